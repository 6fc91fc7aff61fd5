"""Read-only queries: host data sources a mod may read through ``query(source, args)``.

Each read is authorized against the access captured when the mod was loaded, bounded in
time, size and concurrency, and cached briefly for identical arguments. Its outcome is a
:class:`Reading`: ``fresh`` (a value and a read id), ``failed`` (the read ran and gave no
usable value; the last good value for the same arguments comes along, marked stale) or
``refused`` (no read was made). Every failure and refusal has a stable code and a
sentence: moonbox's own (:data:`REFUSAL_CODES`) or a source's own ``namespace:name``.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Literal

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._errors import BindingError, ConfigError
from ..sandbox import HostCall
from ._binding import Binding, _explain
from ._codes import QUERY_CODES, Refusal, is_host_code

__all__ = ["QueryClient", "QueryInfo", "QueryLimits", "QueryRunner", "QuerySource",
           "REFUSAL_CODES", "Reading", "ReadingState", "query_bindings"]

log = logging.getLogger("moonbox.bindings")

REFUSAL_CODES = tuple(QUERY_CODES)
"""moonbox's own codes for a query that is refused or fails (see ``_codes.QUERY_CODES``)."""
DEFAULT_TIMEOUT_S = 8.0
DEFAULT_CACHE_S = 10.0
DEFAULT_MAX_RESULT_BYTES = 64 * 1024
DEFAULT_MAX_CONCURRENT = 4
_MAX_CACHE_ENTRIES = 1024  # cached results, and last good values, each

ReadingState = Literal["fresh", "failed", "refused"]


@dataclass(frozen=True)
class QueryLimits:
    """The limits of the query model that hold across sources, for one registry.

    Attributes:
        max_queries_per_mod: distinct sources one mod may read: the ones it declared when
            it was loaded (``Registry.mod(..., queries=...)``, at most this many), or
            else the first ones it reads (``too_many_queries`` beyond).
        max_reads_per_mod: reads of one mod in flight at once, abandoned ones included
            until their work ends (``busy`` beyond).
        max_reads: reads in flight at once in all, abandoned ones included (``busy``).
        max_access_bytes: packed size of the access captured for a mod (plain data);
            more is a configuration error when the mod is loaded.

    Raises:
        ConfigError: a limit that is not a positive integer.
    """

    max_queries_per_mod: int = 8
    max_reads_per_mod: int = 2
    max_reads: int = 8
    max_access_bytes: int = 4096

    def __post_init__(self) -> None:
        for name in ("max_queries_per_mod", "max_reads_per_mod", "max_reads",
                     "max_access_bytes"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ConfigError(f"QueryLimits.{name} must be a positive int, not {value!r}")


@dataclass(frozen=True, slots=True)
class QueryInfo:
    """Who is reading: the mod's id, the source's name, the sandbox's call context.

    ``abort`` is set when the read is abandoned (it timed out, its source was removed,
    its mod unloaded, or the registry closed): a long read should check it
    (``info.aborted``, or ``info.abort.wait(seconds)`` between steps) and stop. Until it
    returns it keeps its place in the concurrency limits.
    """

    mod: str
    source: str
    call: HostCall | None
    abort: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    @property
    def aborted(self) -> bool:
        return self.abort.is_set()


@dataclass(frozen=True)
class QuerySource:
    """A host data source mods may read.

    Attributes:
        name: what mods pass as ``query``'s first argument.
        args: pydantic model of the arguments (the table mods pass second).
        result: pydantic model of what ``read`` returns; it crosses as a table.
        read: ``fn(info, args) -> result`` (runs in a host thread, with a timeout). It may
            return a :class:`~moonbox.bindings.Refusal` to refuse, or raise a
            :class:`~moonbox.BindingError` whose ``reason`` is a host code
            (``namespace:name``) to fail with that code; any other exception fails with
            ``failed`` (logged). When ``info.abort`` is set it should stop.
        authorize: ``fn(info, access, args) -> bool | str | Refusal | None``: ``True``/
            ``None`` allow, ``False``, a sentence or a ``Refusal`` refuse. ``None`` (no
            function): every mod may read, even one loaded without access.
        timeout_s: a read that takes longer is abandoned (``timed_out``) and told to stop.
        cache_s: identical arguments from the same mod within this time reuse the result,
            read id included (0: no cache).
        max_result_bytes: a bigger result (packed size) is refused (``result_too_large``).
        max_concurrent: reads of this source in flight at once, abandoned ones included
            (``busy`` beyond).
        description: one line for the mod API documentation.
    """

    name: str
    args: type[BaseModel]
    result: type[BaseModel]
    read: Callable[[QueryInfo, Any], Any] = field(repr=False)
    authorize: Callable[[QueryInfo, Any, Any], bool | str | Refusal | None] | None = field(
        default=None, repr=False
    )
    timeout_s: float = DEFAULT_TIMEOUT_S
    cache_s: float = DEFAULT_CACHE_S
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or len(self.name) > 64:
            raise ConfigError("a query source needs a name of 1-64 characters")
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ConfigError(f"query source {self.name!r}: timeout_s must be positive")
        if self.cache_s < 0 or self.max_result_bytes <= 0 or self.max_concurrent <= 0:
            raise ConfigError(f"query source {self.name!r}: limits must be positive")
        for model in (self.args, self.result):
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise ConfigError(f"query source {self.name!r}: args and result are models")


@dataclass(frozen=True, slots=True)
class Reading:
    """The outcome of one query.

    Attributes:
        state: ``fresh`` (``value`` was read, or reused from the cache, under
            ``read_id``), ``failed`` (the read ran and gave no usable value) or ``refused``
            (no read was made).
        value: the result as plain data. For ``failed``: the last good value read for the
            same mod, source and arguments, if there is one (then ``stale`` is true and
            ``read_id`` is that read's), else ``None``.
        read_id: the id of the read that produced ``value`` (one id per read from the
            source: a cache hit repeats it).
        code: for ``failed`` and ``refused``: a code of :data:`REFUSAL_CODES` or the
            source's own ``namespace:name``.
        reason: for ``failed`` and ``refused``: one sentence, naming the source.
        stale: ``value`` is from an earlier read, not this one.
    """

    state: ReadingState
    value: Any = None
    read_id: int | None = None
    code: str | None = None
    reason: str | None = None
    stale: bool = False

    @property
    def fresh(self) -> bool:
        return self.state == "fresh"

    def error(self) -> BindingError:
        """The failure a ``query`` call raises for this reading (not for ``fresh``)."""
        return BindingError(f"{self.reason} [{self.code}]", reason=self.code or "failed")

    def to_lua(self) -> dict[str, Any]:
        """The table ``query_reading`` returns: the fields that are set."""
        table: dict[str, Any] = {"state": self.state}
        for key in ("value", "read_id", "code", "reason"):
            value = getattr(self, key)
            if value is not None:
                table[key] = value
        if self.stale:
            table["stale"] = True
        return table


def _refused(code: str, reason: str) -> Reading:
    return Reading("refused", code=code, reason=reason)


def _host_text(exc: BindingError) -> str:
    text = str(exc)
    suffix = f" [{exc.reason}]"
    return text[: -len(suffix)] if text.endswith(suffix) else text


def capture_access(access: Any, limits: QueryLimits) -> Any:
    """A copy of ``access`` as plain data, checked against ``max_access_bytes``.

    Raises:
        ConfigError: ``access`` is not plain data, or is over the size limit.
    """
    if access is None:
        return None
    try:
        packed = msgpack.packb(access, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ConfigError(
            "a mod's access must be plain data (strings, numbers, booleans, lists, tables): "
            f"{exc}"
        ) from None
    if len(packed) > limits.max_access_bytes:
        raise ConfigError(
            f"a mod's access is {len(packed)} bytes packed, over the limit of "
            f"{limits.max_access_bytes} (QueryLimits.max_access_bytes): capture less"
        )
    return msgpack.unpackb(packed, raw=False, strict_map_key=False)


class QueryRunner:
    """Runs queries for a registry: sources, in-flight counts, the cache, last good values."""

    def __init__(self, executor: Executor, clock: Callable[[], float],
                 limits: QueryLimits | None = None) -> None:
        self._executor = executor
        self._clock = clock
        self.limits = limits or QueryLimits()
        self._sources: dict[str, QuerySource] = {}
        self._in_flight: dict[str, int] = {}
        self._in_flight_total = 0
        self._aborts: dict[threading.Event, tuple[str, QueryClient]] = {}
        self._cache: dict[tuple[str, str, bytes], tuple[float, int, Any]] = {}
        self._last: OrderedDict[tuple[str, str, bytes], tuple[int, Any]] = OrderedDict()
        self._read_ids = itertools.count(1)
        self._lock = threading.Lock()

    # -- sources -------------------------------------------------------------------------

    def install(self, source: QuerySource) -> None:
        with self._lock:
            if source.name in self._sources:
                raise ConfigError(f"a query source named {source.name!r} is already registered")
            self._sources[source.name] = source

    def uninstall(self, source: QuerySource) -> None:
        """Remove ``source``: its reads in flight are told to stop, its cache is dropped."""
        with self._lock:
            if self._sources.get(source.name) is not source:
                return
            del self._sources[source.name]
            for key in [k for k in self._cache if k[1] == source.name]:
                del self._cache[key]
            for key in [k for k in self._last if k[1] == source.name]:
                del self._last[key]
            aborts = [e for e, (name, _) in self._aborts.items() if name == source.name]
        for abort in aborts:
            abort.set()

    @property
    def sources(self) -> tuple[QuerySource, ...]:
        return tuple(sorted(self._sources.values(), key=lambda s: s.name))

    @property
    def reads_in_flight(self) -> int:
        """Reads running now, abandoned ones included."""
        return self._in_flight_total

    def abort_all(self) -> None:
        """Tell every read in flight to stop (the registry is closing)."""
        with self._lock:
            aborts = list(self._aborts)
        for abort in aborts:
            abort.set()

    # -- mods ----------------------------------------------------------------------------

    def client(self, mod: str, access: Any = None, queries: Iterable[str] | None = None, *,
               has_access: bool | None = None) -> QueryClient:
        """One mod's view: its captured access, its declared queries, its reads in flight.

        Raises:
            ConfigError: more declared queries than ``max_queries_per_mod``, a declared
                name that is not a string, or an access that is not plain data or too big.
        """
        declared = None
        if queries is not None:
            if isinstance(queries, str):
                raise ConfigError("queries: a list of source names, not one string")
            declared = tuple(dict.fromkeys(queries))
            if not all(isinstance(q, str) and q for q in declared):
                raise ConfigError("queries: each declared query is a source name")
            if len(declared) > self.limits.max_queries_per_mod:
                raise ConfigError(
                    f"mod {mod!r} declares {len(declared)} queries; a mod may declare at most "
                    f"{self.limits.max_queries_per_mod} (QueryLimits.max_queries_per_mod)"
                )
        captured = capture_access(access, self.limits)
        return QueryClient(self, mod, captured,
                           captured is not None if has_access is None else has_access,
                           declared)

    def run(self, mod: str, access: Any, name: str, raw_args: Any, call: HostCall | None,
            *, has_access: bool = True) -> Any:
        """Read source ``name`` for ``mod`` outside a loaded mod; the plain result.

        Raises:
            BindingError: with ``reason`` one of :data:`REFUSAL_CODES` or a host code.
        """
        client = QueryClient(self, mod, access, has_access, None, limited=False)
        return client.run(name, raw_args, call)


class QueryClient:
    """One mod's queries: what it may read and what it has in flight.

    Made by :meth:`QueryRunner.client` (a :class:`ModApi` makes its own). ``access`` is
    the captured copy.
    """

    def __init__(self, runner: QueryRunner, mod: str, access: Any, has_access: bool,
                 declared: tuple[str, ...] | None, *, limited: bool = True) -> None:
        self.runner = runner
        self.mod = mod
        self.access = access
        self.has_access = has_access
        self.declared = declared
        self._limited = limited  # per-mod limits apply (not to anonymous reads)
        self._used: set[str] = set()
        self._in_flight = 0

    @property
    def reads_in_flight(self) -> int:
        """This mod's reads running now, abandoned ones included."""
        return self._in_flight

    def close(self) -> None:
        """Tell this mod's reads in flight to stop (the mod unloads)."""
        runner = self.runner
        with runner._lock:
            aborts = [e for e, (_, c) in runner._aborts.items() if c is self]
        for abort in aborts:
            abort.set()

    def run(self, name: str, raw_args: Any, call: HostCall | None) -> Any:
        """The value of a fresh reading of ``name``.

        Raises:
            BindingError: the reading is ``failed`` or ``refused``; ``reason`` is its code.
        """
        reading = self.read(name, raw_args, call)
        if reading.state != "fresh":
            raise reading.error()
        return reading.value

    def read(self, name: str, raw_args: Any, call: HostCall | None) -> Reading:
        """Read source ``name``: a :class:`Reading`, whatever happens."""
        runner = self.runner
        source = runner._sources.get(name)
        if source is None:
            return _refused("unknown_source", f"no query source named {name!r}")
        refusal = self._declare(name)
        if refusal is not None:
            return refusal
        try:
            args = source.args.__pydantic_validator__.validate_python(
                raw_args if raw_args is not None else {}
            )
        except ValidationError as exc:
            return _refused("invalid_arguments", f"{name}: {_explain(exc)}")
        info = QueryInfo(self.mod, name, call)
        if source.authorize is not None:
            refusal = self._authorize(source, info, args)
            if refusal is not None:
                return refusal
        key = (self.mod, name, msgpack.packb(args.model_dump(mode="json"), use_bin_type=True))
        if source.cache_s > 0:
            hit = runner._cache.get(key)
            if hit is not None and hit[0] > runner._clock():
                return Reading("fresh", hit[2], hit[1])
        return self._read(source, info, args, call, key)

    def _declare(self, name: str) -> Reading | None:
        if self.declared is not None:
            if name in self.declared:
                return None
            return _refused("not_declared", f"{name}: not among the queries this mod declared "
                            f"({', '.join(self.declared) or 'none'})")
        if not self._limited or name in self._used:
            return None
        limit = self.runner.limits.max_queries_per_mod
        with self.runner._lock:
            if len(self._used) >= limit:
                return _refused("too_many_queries",
                                f"{name}: a mod may read at most {limit} query sources, and "
                                f"this one reads {', '.join(sorted(self._used))}")
            self._used.add(name)
        return None

    def _authorize(self, source: QuerySource, info: QueryInfo, args: BaseModel) -> Reading | None:
        name = source.name
        if not self.has_access:
            return _refused("access_unavailable",
                            f"{name}: this mod was loaded without access to check")
        try:
            verdict = source.authorize(info, self.access, args)  # type: ignore[misc]
        except BindingError as exc:
            if is_host_code(exc.reason):
                return _refused(exc.reason, f"{name}: {_host_text(exc)}")
            log.error("authorize of query source %r raised code %r, which is not a host "
                      "code (namespace:name)", name, exc.reason)
            return Reading("failed", code="failed", reason=f"{name}: the host could not check "
                           "access")
        except Exception:
            log.exception("authorize of query source %r failed", name)
            return Reading("failed", code="failed",
                           reason=f"{name}: the host could not check access")
        if isinstance(verdict, Refusal):
            return _refused(verdict.code or "refused", f"{name}: {verdict.reason}")
        if verdict is False or isinstance(verdict, str):
            reason = verdict if isinstance(verdict, str) else "this mod may not read it"
            return _refused("refused", f"{name}: {reason}")
        return None

    def _failed(self, key: tuple[str, str, bytes], code: str, reason: str) -> Reading:
        last = self.runner._last.get(key)
        if last is None:
            return Reading("failed", code=code, reason=reason)
        return Reading("failed", last[1], last[0], code, reason, stale=True)

    def _busy(self, source: QuerySource) -> str | None:
        runner = self.runner
        name = source.name
        if runner._in_flight.get(name, 0) >= source.max_concurrent:
            return f"{name}: {source.max_concurrent} reads of it are in flight; try again later"
        if self._limited and self._in_flight >= runner.limits.max_reads_per_mod:
            return (f"{name}: this mod has {self._in_flight} reads in flight, its limit; "
                    "try again later")
        if runner._in_flight_total >= runner.limits.max_reads:
            return f"{name}: the host has {runner._in_flight_total} reads in flight; try again later"
        return None

    def _read(self, source: QuerySource, info: QueryInfo, args: BaseModel,
              call: HostCall | None, key: tuple[str, str, bytes]) -> Reading:
        runner = self.runner
        name = source.name
        with runner._lock:
            busy = self._busy(source)
            if busy is not None:
                return _refused("busy", busy)
            runner._in_flight[name] = runner._in_flight.get(name, 0) + 1
            runner._in_flight_total += 1
            self._in_flight += 1
            runner._aborts[info.abort] = (name, self)

        def release() -> None:
            # The slot is held until the work really ends: an abandoned read still counts.
            with runner._lock:
                runner._in_flight[name] -= 1
                runner._in_flight_total -= 1
                self._in_flight -= 1
                runner._aborts.pop(info.abort, None)

        def read() -> Any:
            try:
                return source.read(info, args)
            finally:
                release()

        timeout = source.timeout_s
        if call is not None:
            timeout = min(timeout, call.time_left_s())
        try:
            future = runner._executor.submit(read)
        except RuntimeError:  # the registry was closed
            release()
            return self._failed(key, "failed", f"{name}: the host is shutting down")
        try:
            value = future.result(timeout=timeout)
        except FutureTimeout:
            info.abort.set()  # told to stop; it keeps its slot until it returns
            if future.cancel():  # never started: it will not release itself
                release()
            return self._failed(key, "timed_out", f"{name}: no result within {timeout:.3g} s")
        except BindingError as exc:
            if is_host_code(exc.reason):
                return self._failed(key, exc.reason, f"{name}: {_host_text(exc)}")
            log.error("query source %r raised code %r, which is not a host code "
                      "(namespace:name)", name, exc.reason)
            return self._failed(key, "failed", f"{name}: the host could not read it")
        except Exception:
            log.exception("query source %r failed", name)
            return self._failed(key, "failed", f"{name}: the host could not read it")
        if isinstance(value, Refusal):
            return _refused(value.code or "refused", f"{name}: {value.reason}")
        try:
            model = value if type(value) is source.result else \
                source.result.__pydantic_validator__.validate_python(value)
            plain = model.model_dump(mode="python")
            size = len(msgpack.packb(model.model_dump(mode="json"), use_bin_type=True))
        except Exception:
            log.exception("query source %r returned a value that does not fit its result", name)
            return self._failed(key, "failed", f"{name}: the host could not read it")
        if size > source.max_result_bytes:
            return self._failed(key, "result_too_large",
                                f"{name}: the result is {size} bytes, over the limit of "
                                f"{source.max_result_bytes}")
        read_id = next(runner._read_ids)
        with runner._lock:
            if runner._sources.get(name) is source:  # not removed while it was read
                last = runner._last
                last[key] = (read_id, plain)
                last.move_to_end(key)
                while len(last) > _MAX_CACHE_ENTRIES:
                    last.popitem(last=False)
                if source.cache_s > 0:
                    self._remember(key, source, read_id, plain)
        return Reading("fresh", plain, read_id)

    def _remember(self, key: tuple[str, str, bytes], source: QuerySource, read_id: int,
                  plain: Any) -> None:
        # Under the runner's lock.
        runner = self.runner
        cache = runner._cache
        if len(cache) >= _MAX_CACHE_ENTRIES:
            now = runner._clock()
            for k in [k for k, (t, _, _) in cache.items() if t <= now]:
                del cache[k]
            if len(cache) >= _MAX_CACHE_ENTRIES:
                cache.clear()
        cache[key] = (runner._clock() + source.cache_s, read_id, plain)


class QueryArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str = Field(description="the name of the query source")
    args: dict[str, Any] | None = Field(default=None, description="its arguments")


class ReadingResult(BaseModel):
    """What ``query_reading`` returns."""

    state: ReadingState = Field(description="fresh, failed or refused")
    value: Any = Field(default=None, description="the value (failed: the last good one, if any)")
    read_id: int | None = Field(default=None, description="the read that produced value")
    code: str | None = Field(default=None, description="failed or refused: a stable code")
    reason: str | None = Field(default=None, description="failed or refused: one sentence")
    stale: bool = Field(default=False, description="value is from an earlier read")


def _client_of(runner: QueryRunner, call: HostCall) -> QueryClient:
    # The mod's own client (its ModApi's); outside a ModApi the read is anonymous.
    client = getattr(call.mod, "queries", None)
    if isinstance(client, QueryClient) and client.runner is runner:
        return client
    return QueryClient(runner, "", None, False, None, limited=False)


def query_bindings(runner: QueryRunner) -> tuple[Binding, Binding]:
    """The ``query`` and ``query_reading`` bindings over ``runner``.

    ``query(source, args)`` returns the value of a fresh reading and fails with the code
    otherwise; ``query_reading(source, args)`` returns the reading itself as a table and
    never fails on a refusal. The mod's identity, access and declared queries come from
    the :class:`ModApi` calling them; outside a ModApi a read is anonymous (no access,
    no per-mod limits).
    """

    def _query(call: HostCall, args: QueryArgs) -> Any:
        return _client_of(runner, call).run(args.source, args.args, call)

    def _reading(call: HostCall, args: QueryArgs) -> Any:
        return _client_of(runner, call).read(args.source, args.args, call).to_lua()

    bindings = (
        Binding(
            "query", QueryArgs, _query, risk="read", group="query", cost=10,
            codes=REFUSAL_CODES,
            description="Read a host data source: query(source, args) returns a table, or "
                        "fails with a [code].",
        ),
        Binding(
            "query_reading", QueryArgs, _reading, result=ReadingResult, risk="read",
            group="query", cost=10,
            description="Read a host data source without failing: returns the reading "
                        "(state fresh, failed or refused; value, read_id, code, reason, "
                        "stale); code is one of query's.",
        ),
    )
    for binding in bindings:
        # Each registry makes its own: one copying another's bindings leaves these out.
        object.__setattr__(binding, "builtin_query", True)
    return bindings
