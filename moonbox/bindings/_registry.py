"""The registry: the single source of truth for what a mod may call.

A :class:`Registry` holds bindings, hooks and query sources. :meth:`Registry.mod` turns it
into one mod's API (:class:`ModApi`): the host functions its permissions grant, each of
which validates, prepares, asks, runs hooks, calls and converts, in that order.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from .._errors import BindingError, ConfigError
from ..sandbox import Budget, HostCall, Sandbox
from ._approval import Answer, ApprovalRequest, Approver, PendingApproval, settle_from
from ._binding import Binding
from ._fast import next_call_id
from ._hooks import CallInfo, Hook, Veto
from ._permissions import Decision, Permissions, Risk
from ._query import QueryLimits, QueryRunner, QuerySource, query_bindings
from ._scope import Scope

__all__ = ["Answer", "ApprovalRequest", "Approver", "CallRecord", "ModApi", "Registry"]

log = logging.getLogger("moonbox.bindings")

DEFAULT_APPROVAL_TIMEOUT_S = 10.0

_next_call_id = next_call_id

MAX_CALL_HISTORY = 10_000
"""The longest per-mod call history :meth:`Registry.record_calls` keeps."""


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One binding call in a mod's history (:attr:`ModApi.calls`).

    Attributes:
        call_id: the call's id (as its hooks, approval and refusal carry it).
        trace_id: the trace the call ran under (:attr:`ModApi.trace_id`), or ``None``.
        binding: the binding's name.
        outcome: ``ok`` (it ran and returned), ``refused`` (a :class:`BindingError`:
            arguments, denial, veto, abort...) or ``error`` (the host raised).
        reason: the refusal's code (``vetoed``, ``aborted``, ``unknown_prefab``...), or
            ``None``.
        message: the refusal's line, or the host exception's type.
    """

    call_id: int
    trace_id: str | None
    binding: str
    outcome: Literal["ok", "refused", "error"]
    reason: str | None = None
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "trace_id": self.trace_id, "binding": self.binding,
                "outcome": self.outcome, "reason": self.reason, "message": self.message}


class Registry:
    """Bindings, hooks and query sources, by name.

    Args:
        bindings: registered at creation (for example :func:`default_bindings`); the
            ``query`` bindings of another registry among them are left out, as this one
            has its own (so ``Registry(other)`` copies a registry's bindings).
        clock: monotonic seconds, for the query cache (injectable for tests).
        max_host_threads: threads that run approvers and query reads with a timeout.
        query_limits: the limits of the query model across sources (see
            :class:`~moonbox.bindings.QueryLimits`; defaults as documented there).

    A registry always holds the ``query`` and ``query_reading`` bindings (risk ``read``),
    through which mods read the registered query sources.
    """

    def __init__(
        self,
        bindings: Iterable[Binding] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
        max_host_threads: int = 8,
        query_limits: QueryLimits | None = None,
    ) -> None:
        self._bindings: dict[str, Binding] = {}
        self._serial: dict[str, int] = {}  # name -> which installation it is
        self._installs = itertools.count(1)
        self._hooks: list[tuple[int, int, Hook]] = []
        self._hook_seq = 0
        self._version = 0  # bumped on every change of bindings, hooks or mods closing
        self._lock = threading.RLock()
        self._scopes: dict[str, Scope] = {}
        self._pending: dict[int, PendingApproval] = {}  # call id -> its open question
        self._closed = False
        self._history = 0  # calls kept per mod (record_calls); 0: none
        self.trace_id: str | None = None
        self._executor = ThreadPoolExecutor(max_host_threads, thread_name_prefix="moonbox-host")
        # Approvers wait on people: their own threads, so they never starve query reads.
        self._approvals = ThreadPoolExecutor(max_host_threads, thread_name_prefix="moonbox-ask")
        self.queries = QueryRunner(self._executor, clock, query_limits)
        for binding in query_bindings(self.queries):
            self._install(binding)
        for binding in bindings:
            if getattr(binding, "builtin_query", False):
                continue  # another registry's own: this one has its own over its sources
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
        risk: Risk = "write",
        group: str = "general",
        cost: int = 1,
        description: str = "",
        explain_denial: bool = False,
        prepare: Callable[..., Any] | None = None,
        scope: Scope | None = None,
    ) -> Callable[[Callable[..., Any]], Binding]:
        """Decorator form of :meth:`register`: ``@registry.binding("spawn", SpawnArgs)``.

        ``risk`` is ``write`` unless given, as for :class:`Binding`.
        """

        def decorate(fn: Callable[..., Any]) -> Binding:
            doc = description or (fn.__doc__ or "").strip().split("\n")[0]
            return self.register(
                Binding(name, args, fn, result=result, risk=risk, group=group, cost=cost,
                        description=doc, explain_denial=explain_denial, prepare=prepare),
                scope=scope,
            )

        return decorate

    def unregister(self, name: str) -> None:
        """Remove a binding. Mods that hold it get ``unavailable`` when they call it; its
        pending approvals are cancelled and its running calls end ``aborted``.

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
            self._serial[binding.name] = next(self._installs)
            self._version += 1

    def _uninstall(self, binding: Binding) -> None:
        with self._lock:
            if self._bindings.get(binding.name) is not binding:
                return
            del self._bindings[binding.name]
            del self._serial[binding.name]
            self._version += 1
        self._cancel(lambda a: a.binding is binding,
                     "the binding was removed while its approval was pending")

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

    # -- observability -------------------------------------------------------------------

    def record_calls(self, limit: int) -> None:
        """Keep the last ``limit`` binding calls of every mod of this registry
        (:attr:`ModApi.calls`); ``0`` stops recording and drops the histories.

        A recorded call takes the full path (as a hook would make it): recording costs the
        short path and the lane, so it is off unless asked for.

        Raises:
            ConfigError: ``limit`` is negative or over :data:`MAX_CALL_HISTORY`.
        """
        if not isinstance(limit, int) or not 0 <= limit <= MAX_CALL_HISTORY:
            raise ConfigError(f"a call history holds 0 to {MAX_CALL_HISTORY} calls")
        with self._lock:
            self._history = limit
            self._version += 1

    @property
    def call_history(self) -> int:
        """How many calls per mod :meth:`record_calls` keeps (0: none)."""
        return self._history

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

    # -- approvals -----------------------------------------------------------------------

    def pending_approvals(self, *, mod: str | None = None,
                          binding: str | None = None) -> tuple[ApprovalRequest, ...]:
        """The questions waiting for an answer now (of one mod id or binding name, if
        given), oldest first. ``len()`` of it is the count."""
        with self._lock:
            pending = [a for a in self._pending.values() if not a.settled
                       and (mod is None or a.request.mod == mod)
                       and (binding is None or a.request.binding == binding)]
        return tuple(a.request for a in sorted(pending, key=lambda a: a.request.call_id))

    def deny_pending(self, *, mod: str | None = None, binding: str | None = None,
                     reason: str = "the host denied every pending approval") -> int:
        """Deny every question waiting now (of one mod id or binding name, if given);
        returns how many. Each call ends ``approval_cancelled`` with ``reason``: it does not
        run, and nothing is remembered for later calls."""
        return self._cancel(lambda a: (mod is None or a.request.mod == mod)
                            and (binding is None or a.request.binding == binding), reason)

    def _track(self, approval: PendingApproval) -> str | None:
        # Under the lock that removals and closes hold: a question is either tracked before
        # one of them (and cancelled by it) or sees it here (and is never asked).
        with self._lock:
            if self._closed:
                return "the host is shutting down"
            if approval.owner is not None and approval.owner._closed:
                return "the mod was unloaded while its approval was pending"
            binding = approval.binding
            if binding is not None and self._bindings.get(binding.name) is not binding:
                return "the binding was removed while its approval was pending"
            self._pending[approval.request.call_id] = approval
            return None

    def _untrack(self, approval: PendingApproval) -> None:
        with self._lock:
            if self._pending.get(approval.request.call_id) is approval:
                del self._pending[approval.request.call_id]

    def _cancel(self, which: Callable[[PendingApproval], bool], why: str) -> int:
        with self._lock:
            chosen = [a for a in self._pending.values() if which(a)]
        return sum(a.cancel(why) for a in chosen)

    # -- scopes and mods -----------------------------------------------------------------

    def scope(self, name: str) -> Scope:
        """A new scope: what is added through it is released together.

        Raises:
            ConfigError: an open scope of this registry has that name (or it is empty).
        """
        if not isinstance(name, str) or not name.strip():
            raise ConfigError("a scope needs a name")
        with self._lock:
            if name in self._scopes:
                raise ConfigError(f"a scope named {name!r} is open already: close it first, "
                                  "or choose another name")
            scope = Scope(self, name, on_close=self._forget_scope)
            self._scopes[name] = scope
        return scope

    def _forget_scope(self, scope: Scope) -> None:
        with self._lock:
            if self._scopes.get(scope.name) is scope:
                del self._scopes[scope.name]

    def mod(
        self,
        mod_id: str,
        permissions: Permissions | None = None,
        *,
        access: Any = None,
        approve: Approver | None = None,
        approval_timeout_s: float = DEFAULT_APPROVAL_TIMEOUT_S,
        queries: Iterable[str] | None = None,
    ) -> ModApi:
        """One mod's API: the host functions ``permissions`` grant, and the mod's scope.

        Args:
            mod_id: the mod's id (hooks, approvers and queries see it).
            permissions: defaults to ``Permissions()`` (mode ``auto``).
            access: what the host captured about the mod when it was loaded (its owner,
                role...), as plain data (a copy is kept, at most
                ``QueryLimits.max_access_bytes`` packed); query sources authorize
                against it.
            approve: asked for bindings whose decision is ``ask``; none: they are denied.
            approval_timeout_s: no answer within this time denies. The wait does not count
                against the mod's wall budget (at most this long per resume).
            queries: the query sources the mod declares (from its manifest, at most
                ``QueryLimits.max_queries_per_mod``): it may read only these. Without it,
                the first sources it reads are its queries, up to the same limit.

        Raises:
            ConfigError: a bad timeout, too many queries, or an access that is not plain
                data or too big.
        """
        return ModApi(self, mod_id, permissions or Permissions(), access, approve,
                      approval_timeout_s, queries)

    def close(self) -> None:
        """Cancel every pending approval, tell every query read to stop, and stop the host
        threads (waits for none of them)."""
        with self._lock:
            self._closed = True
        self._cancel(lambda a: True, "the host is shutting down")
        self.queries.abort_all()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._approvals.shutdown(wait=False, cancel_futures=True)


class ModApi:
    """One mod's view of a registry: its host functions, its scope, its queries.

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
        queries: Iterable[str] | None = None,
    ) -> None:
        if not approval_timeout_s > 0:
            raise ConfigError("approval_timeout_s must be positive")
        self.registry = registry
        self.mod_id = mod_id
        self.permissions = permissions
        self.queries = registry.queries.client(mod_id, access, queries)
        self.access = self.queries.access  # the captured copy
        self.approve = approve
        self.approval_timeout_s = approval_timeout_s
        # Not one of the registry's named scopes: several ModApis of one mod id may live
        # at once (a dry run beside the live version).
        self.scope = Scope(registry, f"mod {mod_id}")
        self._closed = False
        self._remembered: dict[str, bool] = {}
        self._asking: set[str] = set()  # bindings whose approver has not returned yet
        self._trace_id: str | None = None
        self._history: int | None = None  # record_calls of this mod; None: the registry's
        self._calls: deque[CallRecord] = deque(maxlen=max(1, registry._history))
        functions: list[_ModFunction | _DeniedFunction] = []
        for binding, decision in registry.granted(permissions):
            if decision == "deny":
                if binding.explain_denial:
                    functions.append(_DeniedFunction(binding, mod_id))
                continue
            functions.append(_ModFunction(self, binding, decision == "ask"))
        self.host_functions: tuple[_ModFunction | _DeniedFunction, ...] = tuple(functions)
        self._functions = {f.name: f for f in functions if isinstance(f, _ModFunction)}

    @property
    def names(self) -> tuple[str, ...]:
        """The names the mod sees."""
        return tuple(f.name for f in self.host_functions)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def trace_id(self) -> str | None:
        """The trace this mod's calls run under (the agent's attempt, say): its own if set,
        else the registry's (:attr:`Registry.trace_id`). Hooks, approval requests and the
        call history carry it."""
        return self._trace_id if self._trace_id is not None else self.registry.trace_id

    @trace_id.setter
    def trace_id(self, value: str | None) -> None:
        self._trace_id = value

    @property
    def calls(self) -> tuple[CallRecord, ...]:
        """The mod's last binding calls, oldest first, while they are recorded
        (:meth:`record_calls`, :meth:`Registry.record_calls`); empty otherwise."""
        if not self.call_history:
            return ()
        return tuple(self._calls)

    @property
    def call_history(self) -> int:
        """How many calls of this mod are kept: its own :meth:`record_calls`, else the
        registry's."""
        return self._history if self._history is not None else self.registry._history

    def record_calls(self, limit: int | None) -> None:
        """Keep the last ``limit`` calls of this mod alone (``None``: as the registry
        says). As with :meth:`Registry.record_calls`, recorded calls take the full path.

        Raises:
            ConfigError: ``limit`` is negative or over :data:`MAX_CALL_HISTORY`.
        """
        if limit is not None and (not isinstance(limit, int)
                                  or not 0 <= limit <= MAX_CALL_HISTORY):
            raise ConfigError(f"a call history holds 0 to {MAX_CALL_HISTORY} calls")
        registry = self.registry
        with registry._lock:
            self._history = limit
            registry._version += 1  # this mod's functions look again

    def _record(self, record: CallRecord) -> None:
        limit = self.call_history
        if not limit:
            return
        calls = self._calls
        if calls.maxlen != limit:
            calls = self._calls = deque(calls, maxlen=limit)
        calls.append(record)

    def call_aborted(self, name: str) -> str | None:
        """Why a running call of binding ``name`` no longer counts (its binding removed,
        the mod unloaded), or ``None``: what :attr:`HostCall.aborted` and
        :attr:`HostCall.cancelled` read, so that a binding working long sees it."""
        if self._closed:
            return "the mod was unloaded"
        function = self._functions.get(name)
        if function is None:
            return None
        return function._gone(function._serial)

    def sandbox(self, budget: Budget | None = None, **options: Any) -> Sandbox:
        """A sandbox with this mod's host functions (other options as :class:`Sandbox`)."""
        return Sandbox(budget, host_functions=self.host_functions, **options)

    def pending_approvals(self) -> tuple[ApprovalRequest, ...]:
        """This mod's questions waiting for an answer now, oldest first."""
        with self.registry._lock:
            pending = [a for a in self.registry._pending.values()
                       if a.owner is self and not a.settled]
        return tuple(a.request for a in sorted(pending, key=lambda a: a.request.call_id))

    def close(self) -> None:
        """Unload: cancel the mod's pending approvals, end its running calls ``aborted``,
        tell its query reads to stop, and release its scope (its registrations, hooks,
        sources, cleanups). Later calls fail with ``unavailable``. Idempotent."""
        if self._closed:
            return
        registry = self.registry
        with registry._lock:
            self._closed = True
            registry._version += 1  # every function of the mod looks again
        registry._cancel(lambda a: a.owner is self,
                         "the mod was unloaded while its approval was pending")
        self.queries.close()
        self.scope.close()

    def __enter__(self) -> ModApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ask(self, binding: Binding, args: BaseModel, call: HostCall, call_id: int = 0,
             prepared: Any = None) -> None:
        name = binding.name
        remembered = self._remembered.get(name)
        if remembered is not None:
            if remembered:
                return
            raise BindingError("not approved for this mod [not_approved]", reason="not_approved")
        if self.approve is None:
            raise BindingError("needs approval and the host has no approver [not_approved]",
                               reason="not_approved")
        if name in self._asking:
            # One question at a time per binding: asking again while an earlier approver
            # has not returned would pile waiting threads up.
            raise BindingError("an earlier approval is still pending [not_approved]",
                               reason="not_approved")
        timeout = min(self.approval_timeout_s, call.wait_left_s(self.approval_timeout_s))
        if timeout <= 0:
            raise BindingError("no time left in this resume to ask [approval_timed_out]",
                               reason="approval_timed_out")
        request = ApprovalRequest(self.mod_id, name, binding.risk,
                                  args.model_dump(mode="json"), call_id, prepared,
                                  self.trace_id)
        approval = PendingApproval(request, binding, self)
        registry = self.registry
        gone = registry._track(approval)
        if gone is not None:
            approval.cancel(gone)
        else:
            try:
                with call.excluded_time(self.approval_timeout_s):
                    self._asking.add(name)
                    try:
                        future = registry._approvals.submit(self.approve, request)
                    except RuntimeError:  # the registry is closing
                        self._asking.discard(name)
                        approval.cancel("the host is shutting down")
                    else:
                        # Settle (and log a late answer) before the binding may be asked
                        # again, so "no longer asking" means the answer is dealt with.
                        future.add_done_callback(lambda f: settle_from(approval, f))
                        future.add_done_callback(lambda f: self._asking.discard(name))
                        approval.wait(timeout)
                        if not future.done():
                            future.cancel()  # not started yet: it never will
            finally:
                registry._untrack(approval)
        state = approval.state
        if state == "allowed" or state == "denied":
            remember = approval.remember
            if remember is not None:
                self._remembered[name] = remember
            if state == "allowed":
                return
            raise BindingError("not approved for this mod [not_approved]", reason="not_approved")
        if state == "failed":  # logged by settle_from, with the traceback
            raise BindingError("the approver failed, so the call is denied [not_approved]",
                               reason="not_approved")
        if state == "timed_out":
            raise BindingError(f"no approval within {timeout:.3g} s [approval_timed_out]",
                               reason="approval_timed_out")
        raise BindingError(f"{approval.why} [approval_cancelled]", reason="approval_cancelled")


class _ModFunction:
    """A binding as one mod calls it: availability, validation, preparation, approval,
    hooks, result."""

    __slots__ = ("name", "cost", "accepts_functions", "binding", "lane", "pairs_lane", "_api",
                 "_ask",
                 "_version", "_pre", "_post", "_available", "_plain", "_has_result",
                 "_lane_version", "_serial")

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
        self._serial: int | None = None
        self._lane_version = -1  # the registry version the lane may run under
        self._has_result = binding.result is not None
        # The sandbox tries the lane first (arguments as they come from Lua) and calls
        # this object when the lane declines: see moonbox.bindings._fast.lane_factory.
        # With no result model a lane answers fn's tuple as it is, as __call__ does.
        results = binding.results if self._has_result else None
        factory = binding._lane_factory  # type: ignore[attr-defined]
        self.lane = (None if factory is None
                     else factory(self, api.registry, api, binding.fn, results))
        # The same for a call (a, {flat table}) of a binding with fast_pairs: see
        # moonbox.bindings._fast.pairs_lane_factory.
        factory = binding._pairs_lane_factory  # type: ignore[attr-defined]
        self.pairs_lane = (None if factory is None else factory(
            self, api.registry, api, binding.fast_pairs, results))

    def make_direct(self, sb: Any, pairs: bool) -> Any:
        """The binding's direct answer for sandbox ``sb``'s compiled crossing (see
        moonbox.sandbox.HostFunction), or ``None``: a binding may offer one
        (``Binding.direct`` / ``Binding.pairs_direct``, made with this function, the
        registry and the mod's api), to run only while its lane may (``_lane_version``)."""
        binding = self.binding
        maker = binding.pairs_direct if pairs else binding.direct
        if maker is None:
            return None
        return maker(self, self._api.registry, self._api)

    def _refresh(self, version: int) -> None:
        # The version is read before what it guards: a change meanwhile bumps it again,
        # and the next call refreshes (read after, a stale view could be kept under it).
        api = self._api
        registry = api.registry
        self._available = registry._bindings.get(self.name) is self.binding and not api._closed
        self._serial = registry._serial.get(self.name)
        self._pre, self._post = registry.hooks_for(self.name)
        self._plain = (self._available and not self._pre and not self._post
                       and not self._ask and self.binding.prepare is None
                       and not api.call_history)
        self._version = version
        self._lane_version = version if self._plain else -1

    def _gone(self, serial: int | None) -> str | None:
        """Why a call that began under ``serial`` may not run or finish, or ``None``."""
        api = self._api
        if api._closed:
            return "the mod was unloaded"
        registry = api.registry
        if registry._bindings.get(self.name) is not self.binding or \
                registry._serial.get(self.name) != serial:
            return "the binding was removed"
        return None

    def _after_lane(self, call: HostCall) -> None:
        # The registry changed while the lane's fn ran: was the call aborted?
        why = self._gone(self._serial)
        if why is not None:
            exc = BindingError(f"{why} while the call ran; its result is dropped [aborted]",
                               reason="aborted")
            exc.call_id = call.call_id
            raise exc

    def __call__(self, call: HostCall, args: tuple[Any, ...]) -> tuple[Any, ...]:
        api = self._api
        registry = api.registry
        version = registry._version
        if self._version != version:
            self._refresh(version)
        if not self._available:
            raise BindingError("is no longer available [unavailable]", reason="unavailable")
        call.mod = api
        binding = self.binding
        if not self._plain:
            return self._observed(call, args)
        # Nothing observes this call (no hook, approval, preparation or history): the
        # short path. It still has its id, for the binding and for a refusal.
        serial = self._serial
        call_id = call.call_id = _next_call_id()
        try:
            if binding.unpack:
                result = binding.fn(call, *binding.values(args))
            else:
                result = binding.fn(call, binding.validate(args))
            if registry._version != version:
                why = self._gone(serial)
                if why is not None:
                    raise BindingError(f"{why} while the call ran; its result is dropped "
                                       "[aborted]", reason="aborted")
        except BindingError as exc:
            if exc.call_id is None:
                exc.call_id = call_id
            raise
        # binding.results, written out for the bindings with no result model: this
        # runs on every binding call that no lane took.
        if self._has_result:
            return binding.results(result)
        if result is None:
            return ()
        return result if type(result) is tuple else (result,)

    def _observed(self, call: HostCall, args: tuple[Any, ...]) -> tuple[Any, ...]:
        # The full path: the call gets an id that its approval request, hooks, refusal and
        # log lines carry.
        api = self._api
        serial = self._serial
        pre, post = self._pre, self._post
        call_id = call.call_id = _next_call_id()
        try:
            result = self._observed_call(call, args, call_id, serial, pre, post)
        except BindingError as exc:
            if exc.call_id is None:
                exc.call_id = call_id
            api._record(CallRecord(call_id, api.trace_id, self.name, "refused", exc.reason,
                                   str(exc)))
            raise
        except Exception as exc:
            api._record(CallRecord(call_id, api.trace_id, self.name, "error", None,
                                   type(exc).__name__))
            raise
        api._record(CallRecord(call_id, api.trace_id, self.name, "ok"))
        return result

    def _observed_call(self, call: HostCall, args: tuple[Any, ...], call_id: int,
                       serial: int | None, pre: tuple[Hook, ...],
                       post: tuple[Hook, ...]) -> tuple[Any, ...]:
        api = self._api
        binding = self.binding
        model = binding.validate(args)
        prepared = binding.prepared(call, model)
        info = CallInfo(api.mod_id, binding, model, call, call_id, prepared,
                        lambda: self._gone(serial), api.trace_id)
        if self._ask:
            api._ask(binding, model, call, call_id, prepared)
        veto: Veto | None = None
        for hook in pre:  # every one runs, even after a veto
            try:
                verdict = hook.pre_call(info)  # type: ignore[misc]
            except Exception:
                log.exception("pre_call hook %r failed on %r (call %d); skipped",
                              hook.name, self.name, call_id)
                continue
            if veto is None and isinstance(verdict, Veto):
                veto = verdict
        if veto is not None:
            raise BindingError(f"{veto.reason} [vetoed]", reason="vetoed")
        why = self._gone(serial)
        if why is not None:
            raise BindingError(f"{why} before the call could run [aborted]",
                               reason="aborted")
        result = binding.invoke(call, model, prepared)
        why = self._gone(serial)
        if why is not None:
            raise BindingError(f"{why} while the call ran; its result is dropped "
                               "[aborted]", reason="aborted")
        for hook in post:
            try:
                result = hook.post_call(info, result)  # type: ignore[misc]
            except Exception:
                log.exception("post_call hook %r failed on %r (call %d); skipped",
                              hook.name, self.name, call_id)
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
