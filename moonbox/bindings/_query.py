"""Read-only queries: host data sources a mod may read through ``query(source, args)``.

Each read is authorized against the access captured when the mod was loaded, bounded in
time, size and concurrency, and cached briefly for identical arguments. Every refusal has
a stable code and a sentence: ``unknown_source``, ``invalid_arguments``, ``refused``,
``failed``, ``timed_out``, ``result_too_large``, ``busy``, ``access_unavailable``.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._errors import BindingError, ConfigError
from ..sandbox import HostCall
from ._binding import Binding, _explain

__all__ = ["QueryInfo", "QueryRunner", "QuerySource", "REFUSAL_CODES", "query_binding"]

log = logging.getLogger("moonbox.bindings")

REFUSAL_CODES = (
    "unknown_source", "invalid_arguments", "refused", "failed", "timed_out",
    "result_too_large", "busy", "access_unavailable",
)
DEFAULT_TIMEOUT_S = 8.0
DEFAULT_CACHE_S = 10.0
DEFAULT_MAX_RESULT_BYTES = 64 * 1024
DEFAULT_MAX_CONCURRENT = 4
_MAX_CACHE_ENTRIES = 1024


@dataclass(frozen=True, slots=True)
class QueryInfo:
    """Who is reading: the mod's id, the source's name, the sandbox's call context."""

    mod: str
    source: str
    call: HostCall | None


@dataclass(frozen=True)
class QuerySource:
    """A host data source mods may read.

    Attributes:
        name: what mods pass as ``query``'s first argument.
        args: pydantic model of the arguments (the table mods pass second).
        result: pydantic model of what ``read`` returns; it crosses as a table.
        read: ``fn(info, args) -> result`` (runs in a host thread, with a timeout).
        authorize: ``fn(info, access, args) -> bool | str | None``: ``True``/``None``
            allow, ``False`` or a sentence refuses. ``None`` (no function): every mod may
            read, even one loaded without access.
        timeout_s: a read that takes longer is abandoned (``timed_out``).
        cache_s: identical arguments from the same mod within this time reuse the result
            (0: no cache).
        max_result_bytes: a bigger result (packed size) is refused (``result_too_large``).
        max_concurrent: reads of this source in flight at once, abandoned ones included
            (``busy`` beyond it).
        description: one line for the mod API documentation.
    """

    name: str
    args: type[BaseModel]
    result: type[BaseModel]
    read: Callable[[QueryInfo, Any], Any] = field(repr=False)
    authorize: Callable[[QueryInfo, Any, Any], bool | str | None] | None = field(
        default=None, repr=False
    )
    timeout_s: float = DEFAULT_TIMEOUT_S
    cache_s: float = DEFAULT_CACHE_S
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    description: str = ""

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 64:
            raise ConfigError("a query source needs a name of 1-64 characters")
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ConfigError(f"query source {self.name!r}: timeout_s must be positive")
        if self.cache_s < 0 or self.max_result_bytes <= 0 or self.max_concurrent <= 0:
            raise ConfigError(f"query source {self.name!r}: limits must be positive")
        for model in (self.args, self.result):
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise ConfigError(f"query source {self.name!r}: args and result are models")


def _refuse(code: str, sentence: str) -> BindingError:
    return BindingError(f"{sentence} [{code}]", reason=code)


class QueryRunner:
    """Runs queries for a registry: sources, in-flight counts, the cache."""

    def __init__(self, executor: Executor, clock: Callable[[], float]) -> None:
        self._executor = executor
        self._clock = clock
        self._sources: dict[str, QuerySource] = {}
        self._in_flight: dict[str, int] = {}
        self._cache: dict[tuple[str, str, bytes], tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def install(self, source: QuerySource) -> None:
        with self._lock:
            if source.name in self._sources:
                raise ConfigError(f"a query source named {source.name!r} is already registered")
            self._sources[source.name] = source

    def uninstall(self, source: QuerySource) -> None:
        with self._lock:
            if self._sources.get(source.name) is source:
                del self._sources[source.name]
            for key in [k for k in self._cache if k[1] == source.name]:
                del self._cache[key]

    @property
    def sources(self) -> tuple[QuerySource, ...]:
        return tuple(sorted(self._sources.values(), key=lambda s: s.name))

    def run(self, mod: str, access: Any, name: str, raw_args: Any, call: HostCall | None,
            *, has_access: bool = True) -> Any:
        """Read source ``name`` for ``mod``; the plain result, or a refusal.

        Raises:
            BindingError: with ``reason`` one of :data:`REFUSAL_CODES`.
        """
        source = self._sources.get(name)
        if source is None:
            raise _refuse("unknown_source", f"no query source named {name!r}")
        try:
            args = source.args.__pydantic_validator__.validate_python(
                raw_args if raw_args is not None else {}
            )
        except ValidationError as exc:
            raise _refuse("invalid_arguments", f"{name}: {_explain(exc)}") from None
        info = QueryInfo(mod, name, call)
        if source.authorize is not None:
            if not has_access:
                raise _refuse("access_unavailable",
                              f"{name}: this mod was loaded without access to check")
            try:
                verdict = source.authorize(info, access, args)
            except Exception:
                log.exception("authorize of query source %r failed", name)
                raise _refuse("failed", f"{name}: the host could not check access") from None
            if verdict is False or isinstance(verdict, str):
                reason = verdict if isinstance(verdict, str) else "this mod may not read it"
                raise _refuse("refused", f"{name}: {reason}")
        if source.cache_s <= 0:
            return self._read(source, info, args, call)
        key = (mod, name, msgpack.packb(args.model_dump(mode="json"), use_bin_type=True))
        now = self._clock()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        plain = self._read(source, info, args, call)
        with self._lock:
            if len(self._cache) >= _MAX_CACHE_ENTRIES:
                now = self._clock()
                for k in [k for k, (t, _) in self._cache.items() if t <= now]:
                    del self._cache[k]
                if len(self._cache) >= _MAX_CACHE_ENTRIES:
                    self._cache.clear()
            self._cache[key] = (self._clock() + source.cache_s, plain)
        return plain

    def _read(self, source: QuerySource, info: QueryInfo, args: BaseModel,
              call: HostCall | None) -> Any:
        name = source.name
        with self._lock:
            if self._in_flight.get(name, 0) >= source.max_concurrent:
                raise _refuse("busy", f"{name}: too many reads in flight; try again later")
            self._in_flight[name] = self._in_flight.get(name, 0) + 1

        def read() -> Any:
            try:
                return source.read(info, args)
            finally:
                with self._lock:
                    self._in_flight[name] -= 1

        timeout = source.timeout_s
        if call is not None:
            timeout = min(timeout, call.time_left_s())
        try:
            future = self._executor.submit(read)
        except RuntimeError:  # the registry was closed
            with self._lock:
                self._in_flight[name] -= 1
            raise _refuse("failed", f"{name}: the host is shutting down") from None
        try:
            value = future.result(timeout=timeout)
        except FutureTimeout:
            if future.cancel():  # never started: it will not decrement itself
                with self._lock:
                    self._in_flight[name] -= 1
            raise _refuse("timed_out", f"{name}: no result within {timeout:.3g} s") from None
        except Exception:
            log.exception("query source %r failed", name)
            raise _refuse("failed", f"{name}: the host could not read it") from None
        try:
            model = value if type(value) is source.result else \
                source.result.__pydantic_validator__.validate_python(value)
            plain = model.model_dump(mode="python")
            size = len(msgpack.packb(model.model_dump(mode="json"), use_bin_type=True))
        except Exception:
            log.exception("query source %r returned a value that does not fit its result", name)
            raise _refuse("failed", f"{name}: the host could not read it") from None
        if size > source.max_result_bytes:
            raise _refuse("result_too_large",
                          f"{name}: the result is {size} bytes, over the limit of "
                          f"{source.max_result_bytes}")
        return plain


class QueryArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str = Field(description="the name of the query source")
    args: dict[str, Any] | None = Field(default=None, description="its arguments")


def query_binding(runner: QueryRunner) -> Binding:
    """The ``query`` binding: ``query(source, args)`` reads a host data source.

    The mod's identity and access come from the :class:`ModApi` calling it (the call
    context's ``mod`` and ``access``); outside a ModApi the read is anonymous.
    """

    def _query(call: HostCall, args: QueryArgs) -> Any:
        api = call.mod
        if api is None:
            return runner.run("", None, args.source, args.args, call, has_access=False)
        return runner.run(api.mod_id, api.access, args.source, args.args, call,
                          has_access=api.access is not None)

    return Binding(
        "query",
        QueryArgs,
        _query,
        risk="read",
        group="query",
        cost=10,
        description="Read a host data source: query(source, args) returns a table.",
    )
