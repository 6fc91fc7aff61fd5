"""The registry: the single source of truth for what a mod may call.

A :class:`Registry` holds bindings, hooks and query sources. :meth:`Registry.mod` turns it
into one mod's API (:class:`ModApi`): the host functions its permissions grant, each of
which validates, asks, runs hooks, calls and converts, in that order.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from .._errors import BindingError, ConfigError
from ..sandbox import Budget, HostCall, Sandbox
from ._binding import Binding
from ._hooks import CallInfo, Hook, Veto
from ._permissions import Decision, Permissions, Risk
from ._query import QueryRunner, QuerySource, query_binding
from ._scope import Scope

__all__ = ["Answer", "ApprovalRequest", "Approver", "ModApi", "Registry"]

log = logging.getLogger("moonbox.bindings")

DEFAULT_APPROVAL_TIMEOUT_S = 10.0


class Answer(enum.Enum):
    """An approver's answer; ``True``/``False`` mean ``ALLOW``/``DENY``."""

    ALLOW = "allow"
    DENY = "deny"
    ALLOW_ALWAYS = "allow_always"  # for the rest of this mod's life (until ModApi.close)
    DENY_ALWAYS = "deny_always"


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What an approver is asked: may ``mod`` call ``binding`` with ``args``?"""

    mod: str
    binding: str
    risk: Risk
    args: dict[str, Any]


Approver = Callable[[ApprovalRequest], "bool | Answer"]


class Registry:
    """Bindings, hooks and query sources, by name.

    Args:
        bindings: registered at creation (for example :func:`default_bindings`).
        clock: monotonic seconds, for the query cache (injectable for tests).
        max_host_threads: threads that run approvers and query reads with a timeout.

    A registry always holds the ``query`` binding (risk ``read``), through which mods read
    the registered query sources.
    """

    def __init__(
        self,
        bindings: Iterable[Binding] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
        max_host_threads: int = 8,
    ) -> None:
        self._bindings: dict[str, Binding] = {}
        self._hooks: list[tuple[int, int, Hook]] = []
        self._hook_seq = 0
        self._version = 0  # bumped on every change of bindings or hooks
        self._lock = threading.RLock()
        self._executor = ThreadPoolExecutor(max_host_threads, thread_name_prefix="moonbox-host")
        # Approvers wait on people: their own threads, so they never starve query reads.
        self._approvals = ThreadPoolExecutor(max_host_threads, thread_name_prefix="moonbox-ask")
        self.queries = QueryRunner(self._executor, clock)
        self._install(query_binding(self.queries))
        for binding in bindings:
            self.register(binding)

    # -- bindings ------------------------------------------------------------------------

    def register(self, binding: Binding, *, scope: Scope | None = None) -> Binding:
        """Add a binding (until ``scope`` closes, if given).

        Raises:
            ConfigError: a binding of that name exists.
            ScopeClosed: ``scope`` is closed (nothing is installed).
        """
        if scope is not None:
            scope.hold(f"binding {binding.name!r}", lambda: self._install(binding),
                       lambda: self._uninstall(binding), name=f"binding {binding.name}")
        else:
            self._install(binding)
        return binding

    def binding(
        self,
        name: str,
        args: type[BaseModel],
        *,
        result: type[BaseModel] | None = None,
        risk: Risk = "read",
        group: str = "general",
        cost: int = 1,
        description: str = "",
        explain_denial: bool = False,
        scope: Scope | None = None,
    ) -> Callable[[Callable[[HostCall, Any], Any]], Binding]:
        """Decorator form of :meth:`register`: ``@registry.binding("spawn", SpawnArgs)``."""

        def decorate(fn: Callable[[HostCall, Any], Any]) -> Binding:
            doc = description or (fn.__doc__ or "").strip().split("\n")[0]
            return self.register(
                Binding(name, args, fn, result=result, risk=risk, group=group, cost=cost,
                        description=doc, explain_denial=explain_denial),
                scope=scope,
            )

        return decorate

    def unregister(self, name: str) -> None:
        """Remove a binding. Mods that hold it get ``unavailable`` when they call it.

        Raises:
            KeyError: no binding has that name.
        """
        with self._lock:
            self._uninstall(self._bindings[name])

    def _install(self, binding: Binding) -> None:
        if not isinstance(binding, Binding):
            raise ConfigError(f"not a Binding: {binding!r}")
        with self._lock:
            if binding.name in self._bindings:
                raise ConfigError(f"a binding named {binding.name!r} is already registered")
            self._bindings[binding.name] = binding
            self._version += 1

    def _uninstall(self, binding: Binding) -> None:
        with self._lock:
            if self._bindings.get(binding.name) is binding:
                del self._bindings[binding.name]
                self._version += 1

    def get(self, name: str) -> Binding | None:
        return self._bindings.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._bindings

    def __iter__(self) -> Iterator[Binding]:
        return iter(sorted(self._bindings.values(), key=lambda b: b.name))

    def __len__(self) -> int:
        return len(self._bindings)

    def granted(self, permissions: Permissions) -> list[tuple[Binding, Decision]]:
        """Every binding with its decision under ``permissions``, by name."""
        return [(b, permissions.decide(b.name, b.risk)) for b in self]

    # -- hooks ---------------------------------------------------------------------------

    def add_hook(self, hook: Hook, *, scope: Scope | None = None) -> Hook:
        """Add a hook (until ``scope`` closes, if given)."""
        if scope is not None:
            scope.hold(f"hook {hook.name!r}", lambda: self._install_hook(hook),
                       lambda: self._uninstall_hook(hook), name=f"hook {hook.name}")
        else:
            self._install_hook(hook)
        return hook

    def remove_hook(self, hook: Hook) -> None:
        self._uninstall_hook(hook)

    def _install_hook(self, hook: Hook) -> None:
        if not isinstance(hook, Hook):
            raise ConfigError(f"not a Hook: {hook!r}")
        with self._lock:
            self._hook_seq += 1
            self._hooks.append((hook.order, self._hook_seq, hook))
            self._hooks.sort(key=lambda entry: entry[:2])
            self._version += 1

    def _uninstall_hook(self, hook: Hook) -> None:
        with self._lock:
            self._hooks = [entry for entry in self._hooks if entry[2] is not hook]
            self._version += 1

    def hooks_for(self, name: str) -> tuple[tuple[Hook, ...], tuple[Hook, ...]]:
        """The pre_call and post_call hooks for binding ``name``, in order."""
        hooks = [h for _, _, h in self._hooks if h.matches(name)]
        return (tuple(h for h in hooks if h.pre_call is not None),
                tuple(h for h in hooks if h.post_call is not None))

    # -- query sources -------------------------------------------------------------------

    def add_source(self, source: QuerySource, *, scope: Scope | None = None) -> QuerySource:
        """Add a read-only query source (until ``scope`` closes, if given)."""
        if scope is not None:
            scope.hold(f"query source {source.name!r}", lambda: self._install_source(source),
                       lambda: self._uninstall_source(source), name=f"source {source.name}")
        else:
            self._install_source(source)
        return source

    def _install_source(self, source: QuerySource) -> None:
        self.queries.install(source)

    def _uninstall_source(self, source: QuerySource) -> None:
        self.queries.uninstall(source)

    # -- scopes and mods -----------------------------------------------------------------

    def scope(self, name: str) -> Scope:
        """A new scope: what is added through it is released together."""
        return Scope(self, name)

    def mod(
        self,
        mod_id: str,
        permissions: Permissions | None = None,
        *,
        access: Any = None,
        approve: Approver | None = None,
        approval_timeout_s: float = DEFAULT_APPROVAL_TIMEOUT_S,
    ) -> ModApi:
        """One mod's API: the host functions ``permissions`` grant, and the mod's scope.

        Args:
            mod_id: the mod's id (hooks, approvers and queries see it).
            permissions: defaults to ``Permissions()`` (mode ``auto``).
            access: what the host captured about the mod when it was loaded (its owner,
                role...); query sources authorize against it.
            approve: asked for bindings whose decision is ``ask``; none: they are denied.
            approval_timeout_s: no answer within this time denies. The wait does not count
                against the mod's wall budget (at most this long per resume).
        """
        return ModApi(self, mod_id, permissions or Permissions(), access, approve,
                      approval_timeout_s)

    def close(self) -> None:
        """Stop the host threads (waits for none of them)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._approvals.shutdown(wait=False, cancel_futures=True)


class ModApi:
    """One mod's view of a registry: its host functions and its scope.

    ``host_functions`` are what a :class:`Sandbox` takes; the set is fixed when the
    ModApi is made (a binding registered later is not in it; one unregistered later fails
    with ``unavailable``). :meth:`close` releases the mod's scope.
    """

    def __init__(
        self,
        registry: Registry,
        mod_id: str,
        permissions: Permissions,
        access: Any,
        approve: Approver | None,
        approval_timeout_s: float,
    ) -> None:
        if approval_timeout_s <= 0:
            raise ConfigError("approval_timeout_s must be positive")
        self.registry = registry
        self.mod_id = mod_id
        self.permissions = permissions
        self.access = access
        self.approve = approve
        self.approval_timeout_s = approval_timeout_s
        self.scope = registry.scope(f"mod {mod_id}")
        self._remembered: dict[str, bool] = {}
        self._pending: set[str] = set()  # bindings with an approval in flight
        functions: list[_ModFunction | _DeniedFunction] = []
        for binding, decision in registry.granted(permissions):
            if decision == "deny":
                if binding.explain_denial:
                    functions.append(_DeniedFunction(binding, mod_id))
                continue
            functions.append(_ModFunction(self, binding, decision == "ask"))
        self.host_functions: tuple[_ModFunction | _DeniedFunction, ...] = tuple(functions)

    @property
    def names(self) -> tuple[str, ...]:
        """The names the mod sees."""
        return tuple(f.name for f in self.host_functions)

    def sandbox(self, budget: Budget | None = None, **options: Any) -> Sandbox:
        """A sandbox with this mod's host functions (other options as :class:`Sandbox`)."""
        return Sandbox(budget, host_functions=self.host_functions, **options)

    def close(self) -> None:
        """Release the mod's scope (its registrations, hooks, sources, cleanups). Idempotent."""
        self.scope.close()

    def __enter__(self) -> ModApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ask(self, binding: Binding, args: BaseModel, call: HostCall) -> None:
        remembered = self._remembered.get(binding.name)
        if remembered is not None:
            if remembered:
                return
            raise BindingError("not approved for this mod [not_approved]", reason="not_approved")
        if self.approve is None:
            raise BindingError("needs approval and the host has no approver [not_approved]",
                               reason="not_approved")
        if binding.name in self._pending:
            # One question at a time per binding: asking again while an earlier approval
            # is still out would pile waiting threads up.
            raise BindingError("an earlier approval is still pending [not_approved]",
                               reason="not_approved")
        timeout = min(self.approval_timeout_s, call.wait_left_s(self.approval_timeout_s))
        if timeout <= 0:
            raise BindingError("no time left in this resume to ask [approval_timed_out]",
                               reason="approval_timed_out")
        request = ApprovalRequest(self.mod_id, binding.name, binding.risk,
                                  args.model_dump(mode="json"))
        self._pending.add(binding.name)
        future = None
        try:
            with call.excluded_time(self.approval_timeout_s):
                future = self.registry._approvals.submit(self.approve, request)
                future.add_done_callback(lambda f, name=binding.name: self._pending.discard(name))
                answer = future.result(timeout=timeout)
        except FutureTimeout:
            if future.cancel():
                self._pending.discard(binding.name)
            raise BindingError(
                f"no approval within {timeout:.3g} s [approval_timed_out]",
                reason="approval_timed_out",
            ) from None
        except Exception:
            if future is None:  # never submitted (the registry is closed)
                self._pending.discard(binding.name)
            log.exception("approver of mod %r failed on %r", self.mod_id, binding.name)
            answer = Answer.DENY
        if answer is Answer.ALLOW_ALWAYS:
            self._remembered[binding.name] = True
        elif answer is Answer.DENY_ALWAYS:
            self._remembered[binding.name] = False
        if answer is True or answer is Answer.ALLOW or answer is Answer.ALLOW_ALWAYS:
            return
        raise BindingError("not approved for this mod [not_approved]", reason="not_approved")


class _ModFunction:
    """A binding as one mod calls it: availability, validation, approval, hooks, result."""

    __slots__ = ("name", "cost", "accepts_functions", "binding", "lane", "_api", "_ask",
                 "_version", "_pre", "_post", "_available", "_plain", "_has_result",
                 "_lane_version")

    def __init__(self, api: ModApi, binding: Binding, ask: bool) -> None:
        self.name = binding.name
        self.cost = binding.cost
        self.accepts_functions = binding.accepts_functions  # type: ignore[attr-defined]
        self.binding = binding
        self._api = api
        self._ask = ask
        self._version = -1
        self._pre: tuple[Hook, ...] = ()
        self._post: tuple[Hook, ...] = ()
        self._available = False
        self._plain = False
        self._lane_version = -1  # the registry version the lane may run under
        self._has_result = binding.result is not None
        # The sandbox tries the lane first (arguments as they come from Lua) and calls
        # this object when the lane declines: see moonbox.bindings._fast.lane_factory.
        factory = binding._lane_factory  # type: ignore[attr-defined]
        self.lane = (None if factory is None
                     else factory(self, api.registry, api, binding.fn, binding.results))

    def _refresh(self, version: int) -> None:
        # The version is read before what it guards: a change meanwhile bumps it again,
        # and the next call refreshes (read after, a stale view could be kept under it).
        registry = self._api.registry
        self._available = registry._bindings.get(self.name) is self.binding
        self._pre, self._post = registry.hooks_for(self.name)
        self._plain = (self._available and not self._pre and not self._post
                       and not self._ask)
        self._version = version
        self._lane_version = version if self._plain else -1

    def __call__(self, call: HostCall, args: tuple[Any, ...]) -> tuple[Any, ...]:
        api = self._api
        version = api.registry._version
        if self._version != version:
            self._refresh(version)
        if not self._available:
            raise BindingError("is no longer available [unavailable]", reason="unavailable")
        call.mod = api
        binding = self.binding
        if self._plain:
            if binding.unpack:
                result = binding.fn(call, *binding.values(args))
            else:
                result = binding.fn(call, binding.validate(args))
            # binding.results, written out for the bindings with no result model: this
            # runs on every binding call that no lane took.
            if self._has_result:
                return binding.results(result)
            if result is None:
                return ()
            return result if type(result) is tuple else (result,)
        model = binding.validate(args)
        if self._ask:
            api._ask(binding, model, call)
        info = CallInfo(api.mod_id, binding, model, call)
        for hook in self._pre:
            try:
                verdict = hook.pre_call(info)  # type: ignore[misc]
            except Exception:
                log.exception("pre_call hook %r failed on %r; skipped", hook.name, self.name)
                continue
            if isinstance(verdict, Veto):
                raise BindingError(f"{verdict.reason} [vetoed]", reason="vetoed")
        result = binding.invoke(call, model)
        for hook in self._post:
            try:
                result = hook.post_call(info, result)  # type: ignore[misc]
            except Exception:
                log.exception("post_call hook %r failed on %r; skipped", hook.name, self.name)
        return binding.results(result)


class _DeniedFunction:
    """A denied binding the host chose to explain: every call fails with the reason."""

    __slots__ = ("name", "cost", "_message")

    def __init__(self, binding: Binding, mod_id: str) -> None:
        self.name = binding.name
        self.cost = binding.cost
        self._message = f"denied by the permissions of mod {mod_id!r} [denied]"

    def __call__(self, call: HostCall, args: tuple[Any, ...]) -> tuple[Any, ...]:
        raise BindingError(self._message, reason="denied")
