"""The Programmer loop: ask for Lua, run it, feed the failure back, record what works.

One :meth:`Programmer.run` is one task with one trace id. Each round: check the rate
limit, generate, extract the Lua, run it (a fresh sandbox from the registry under the
task's permissions and budget, or the host's dry-run hook), run the acceptance checks. A
clean round records a version in the store and ends; a failed one is recorded as a failed
attempt and becomes the repair context of the next round, up to ``max_repairs`` repairs.
When they run out, the store's current version (the last good one) stays as it is.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .._errors import BudgetExceeded, ConfigError, ScriptError
from ..bindings import Permissions, Registry, Veto
from ..sandbox import Budget
from ..store import Store, StoreError
from ._cancel import CancelToken
from ._client import Delta, LLMClient, Message, Reply, _takes_cancel, collect
from ._errors import AgentError, Cancelled, ClientError, GenerationLimited
from ._extract import extract_lua
from ._prompt import ApiStyle, PromptBuilder, role_prompt
from ._repair import Check, CheckResult, Failure, RunResult, render_repair, run_checks

__all__ = [
    "Attempt",
    "DEFAULT_BUDGET",
    "DryRun",
    "Event",
    "EventName",
    "GoLive",
    "LLMHook",
    "LLMRequest",
    "Programmer",
    "ProgrammerResult",
    "Published",
    "RateLimit",
    "Script",
    "Task",
]

log = logging.getLogger("moonbox.agent")

DEFAULT_BUDGET = Budget(steps=1_000_000, alloc_bytes="16MB", wall_s=0.5, max_memory="32MB")
"""The budget a generated script gets unless the task or the Programmer says otherwise."""

EventName = Literal[
    "generation_started", "generation_delta", "generation_finished", "execution_succeeded",
    "execution_failed", "repair_requested", "repair_exhausted", "version_recorded",
    "rate_limited", "client_failed", "cancelled", "went_live", "request_vetoed",
    "budget_tripped",
]
ResultStatus = Literal["solved", "exhausted", "rate_limited", "client_error", "cancelled",
                       "vetoed"]

_UNITS = BudgetExceeded._UNITS  # steps, bytes, s: as the trip's own message says


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One generation as the LLM hooks see it (and may amend: return a changed copy).

    Attributes:
        role: the role asking.
        model: where the request goes (the client's model, or its profile's).
        trace_id, attempt: the task's trace and the attempt's number.
        messages: the prompt.
        max_tokens, temperature: the request's options.
        profile: the routing profile serving the role, when the client is routed.
    """

    role: str
    model: str
    trace_id: str
    attempt: int
    messages: tuple[Message, ...]
    max_tokens: int | None = None
    temperature: float | None = None
    profile: str | None = None


@dataclass(frozen=True)
class LLMHook:
    """Code the host runs around each LLM request of a :class:`Programmer`.

    Every ``before`` hook runs, in the order given, each seeing the request as the ones
    before it amended it; it returns ``None`` (no change), an amended
    :class:`LLMRequest`, or a :class:`~moonbox.bindings.Veto`, which ends the task with
    status ``vetoed`` once every hook has run (the request is not sent). ``after`` hooks
    see the request and the reply, whose ``usage`` and ``retries`` say what it cost. A hook
    that raises is logged and skipped: raising is not a veto.
    """

    name: str
    before: Callable[[LLMRequest], LLMRequest | Veto | None] | None = field(
        default=None, repr=False)
    after: Callable[[LLMRequest, Reply], object] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.before is None and self.after is None:
            raise ValueError(f"LLM hook {self.name!r} has neither before nor after")


@dataclass(frozen=True, slots=True)
class Task:
    """What the Programmer is asked to do.

    Attributes:
        text: the request in words.
        key: the script's key in the store, ``<mod>:<name>``; the mod id is the part before
            the colon, and the chunk is ``@<mod>/<name>.lua``. A mod package's file is
            ``mods/<id>/<path>`` (the mod host's key), its chunk ``@mods/<id>/<path>``.
        permissions: what the script may call.
        checks: acceptance checks on the run's result (see :data:`Check`).
        world_summary: a short description of the world state, for the prompt.
        budget: the run's budget; ``None``: the Programmer's.
    """

    text: str
    key: str = "agent:main"
    permissions: Permissions = field(default_factory=Permissions)
    checks: tuple[Check, ...] = ()
    world_summary: str = ""
    budget: Budget | None = None

    @property
    def mod_id(self) -> str:
        if self.key.startswith("mods/"):
            return self.key.split("/")[1]
        return self.key.split(":", 1)[0] or "agent"

    @property
    def chunk(self) -> str:
        if self.key.startswith("mods/"):  # a mod package's file, as the mod host names it
            return "@" + self.key
        mod, _, name = self.key.partition(":")
        return f"@{mod or 'agent'}/{name or 'main'}.lua"


@dataclass(frozen=True, slots=True)
class Script:
    """What a dry-run hook is asked to run."""

    source: str
    chunk: str
    key: str
    mod_id: str
    permissions: Permissions
    budget: Budget
    trace_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class Published:
    """What a host's go-live hook did with a verified script: the revision it recorded
    (``None``: no store), or why the live game refused it (then the attempt failed)."""

    revision: int | None = None
    error: str | None = None


GoLive = Callable[[Script], Published]
"""A host's way to put a script that passed its dry run into use (see
:class:`~moonbox.agent.LiveMod`). Without one, the Programmer records it in the store."""

DryRun = Callable[[Script], RunResult]
"""A host's dry run: run the script (in a scratch copy of the world, say) and return an
Outcome-like result. A :class:`ScriptError` it raises counts as the script's failure."""


@dataclass(frozen=True, slots=True)
class Event:
    """One step of the loop, for progress displays and logs."""

    name: EventName
    trace_id: str
    attempt: int
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.name, "trace_id": self.trace_id, "attempt": self.attempt,
                **self.data}


@dataclass(frozen=True, slots=True)
class Attempt:
    """One round: the reply's visible text, the code found, and how it went.

    The reasoning is not kept: it never reaches the history.
    """

    number: int
    reply: str
    code: str | None
    failure: Failure | None
    checks: tuple[CheckResult, ...] = ()
    reports: tuple[str, ...] = ()
    values: tuple[Any, ...] = ()
    stats: dict[str, Any] = field(default_factory=dict)
    generation_s: float = 0.0
    usage: dict[str, Any] = field(default_factory=dict)
    retries: int = 0
    calls: tuple[dict[str, Any], ...] = ()

    @property
    def ok(self) -> bool:
        return self.failure is None

    def to_dict(self) -> dict[str, Any]:
        failure = self.failure
        return {
            "attempt": self.number, "ok": self.ok,
            "outcome": "passed" if failure is None else "failed",
            "kind": failure.kind if failure else None,
            "where": failure.where if failure and failure.chunk else None,
            "refused": failure.to_dict()["refused"] if failure else [],
            "code": self.code, "reply": self.reply,
            "failure": self.failure.to_dict() if self.failure else None,
            "checks": [c.to_dict() for c in self.checks], "reports": list(self.reports),
            "values": _plain(list(self.values)), "stats": self.stats,
            "generation_s": round(self.generation_s, 6),
            "usage": dict(self.usage), "retries": self.retries, "calls": list(self.calls),
        }


@dataclass(frozen=True, slots=True)
class ProgrammerResult:
    """How a task ended.

    Attributes:
        status: ``solved``, ``exhausted`` (every round failed), ``rate_limited`` (the
            generation limit stopped the loop), ``client_error`` (the backend failed) or
            ``cancelled``.
        source: the script now in use for the key: the new one when solved, else the
            store's current version (the last good one), else ``None``.
        revision: its revision number in the store, when there is a store.
        error: the client error, limit or cancellation that stopped the loop.
    """

    status: ResultStatus
    task: str
    key: str
    trace_id: str
    attempts: tuple[Attempt, ...]
    source: str | None = None
    revision: int | None = None
    error: AgentError | None = None

    @property
    def solved(self) -> bool:
        return self.status == "solved"

    def to_dict(self) -> dict[str, Any]:
        error = None
        if self.error is not None:
            error = {"code": self.error.code, "message": str(self.error)}
        return {
            "status": self.status, "task": self.task, "key": self.key,
            "trace_id": self.trace_id, "source": self.source, "revision": self.revision,
            "error": error, "attempts": [a.to_dict() for a in self.attempts],
        }


class RateLimit:
    """At most ``max_generations`` per ``window_s`` seconds per role (a sliding window).

    Shared between loops (give several :class:`Programmer` objects the same instance) it
    limits the role across all of them. Thread-safe.
    """

    def __init__(self, max_generations: int = 20, window_s: float = 60.0, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_generations < 1 or not window_s > 0:
            raise ConfigError("a rate limit needs at least one generation per positive window")
        self.max_generations = max_generations
        self.window_s = window_s
        self._clock = clock
        self._seen: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def acquire(self, role: str) -> None:
        """Count one generation for ``role``.

        Raises:
            GenerationLimited: the role has had ``max_generations`` in the window.
        """
        with self._lock:
            now = self._clock()
            seen = self._seen.setdefault(role, deque())
            while seen and seen[0] <= now - self.window_s:
                seen.popleft()
            if len(seen) >= self.max_generations:
                raise GenerationLimited(role, self.max_generations, self.window_s,
                                        seen[0] + self.window_s - now)
            seen.append(now)


class Programmer:
    """The Programmer role: writes Lua for tasks, and repairs it from its failures.

    Args:
        client: any :class:`LLMClient`.
        registry: the bindings the scripts run against; the prompt's mod API comes from it.
        store: where versions are recorded (``None``: nowhere).
        budget: each run's budget unless the task gives one (:data:`DEFAULT_BUDGET`).
        max_repairs: repair rounds after the first attempt (default 3: four attempts).
        dry_run: the host's way to run a script; default: a fresh sandbox from
            ``registry`` under the task's permissions.
        go_live: the host's way to put a script that passed into use (and record it);
            default: record it in ``store``. When it refuses, the attempt failed.
        world_summary: the world as of now, for each prompt (default: the task's own).
        rate_limit: generations allowed per role (default 20 per 60 s); share one
            instance between Programmers to limit them together.
        role: the role name (its prompt, its rate limit, the store's ``role``).
        role_text: the role's prompt; default: the one shipped for ``role``.
        author: recorded as the author of versions; default: the client's model.
        host_rules: the host's additions to the stable prompt prefix.
        api_style: how the prompt shows the mod API (``compact`` or ``stubs``).
        stream: generate with ``client.stream`` and emit ``generation_delta`` events.
        on_event: called with every :class:`Event` (exceptions are logged, not raised).
        max_tokens, temperature: passed to the client.
        new_trace_id: makes trace ids (default: 16 random hex digits).
        clock: for generation times (``time.monotonic``).
        llm_hooks: :class:`LLMHook` objects run around each request, in order.
        call_history: binding calls each attempt keeps (the default sandbox run records
            them in ``Attempt.calls``, with the call ids and the trace id); 0: none.

    Raises:
        ConfigError: ``max_repairs`` is negative, or no prompt ships for ``role`` and no
            ``role_text`` is given.
    """

    def __init__(
        self,
        client: LLMClient,
        registry: Registry,
        *,
        store: Store | None = None,
        budget: Budget | None = None,
        max_repairs: int = 3,
        dry_run: DryRun | None = None,
        go_live: GoLive | None = None,
        world_summary: Callable[[], str] | None = None,
        rate_limit: RateLimit | None = None,
        role: str = "programmer",
        role_text: str | None = None,
        author: str | None = None,
        host_rules: str = "",
        api_style: ApiStyle = "compact",
        stream: bool = False,
        on_event: Callable[[Event], None] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        new_trace_id: Callable[[], str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        llm_hooks: Sequence[LLMHook] = (),
        call_history: int = 64,
    ) -> None:
        if max_repairs < 0:
            raise ConfigError("max_repairs must be zero or more")
        if role_text is None:
            try:
                role_text = role_prompt(role)
            except FileNotFoundError:
                raise ConfigError(f"no prompt ships for the role {role!r}: give role_text"
                                  ) from None
        self.role_text = role_text
        self.client = client
        self.registry = registry
        self.store = store
        self.budget = budget or DEFAULT_BUDGET
        self.max_repairs = max_repairs
        self.dry_run = dry_run or self._sandbox_run
        self.go_live = go_live
        self.world_summary = world_summary
        self.rate_limit = rate_limit or RateLimit()
        self.role = role
        self.author = author
        self.host_rules = host_rules
        self.api_style = api_style
        self.stream = stream
        self.on_event = on_event
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._new_trace_id = new_trace_id or (lambda: uuid.uuid4().hex[:16])
        self._clock = clock
        self._builders: dict[tuple[str, str], PromptBuilder] = {}
        self.llm_hooks: list[LLMHook] = list(llm_hooks)
        self.call_history = call_history
        self._lock = threading.Lock()
        self._running: dict[str, CancelToken] = {}  # trace id -> token, while it runs

    # -- control ----------------------------------------------------------------------------

    def stop(self, trace_id: str | None = None, reason: str = "stopped") -> int:
        """Stop the running task with ``trace_id`` (every running task if ``None``) at its
        next safe point; a buffered generation under way is given up at once, and its
        connection closed when the client takes a ``cancel`` token (as
        :class:`ChatClient` does). Returns how many were told."""
        with self._lock:
            tokens = [t for tid, t in self._running.items()
                      if trace_id is None or tid == trace_id]
        for token in tokens:
            token.cancel(reason)
        return len(tokens)

    @property
    def running(self) -> tuple[str, ...]:
        """The trace ids of the tasks running now."""
        with self._lock:
            return tuple(self._running)

    def clear_context(self) -> None:
        """Forget what the role keeps between tasks: the prompt builders (each holds the
        stable prefix made from the registry as it was), so the next prompt is built from
        the bindings of now. A running task keeps the prompt it has."""
        with self._lock:
            self._builders = {}

    def prompt(self, task: Task) -> PromptBuilder:
        """The prompt builder for a task's permissions and budget (one per pair, reused)."""
        budget = task.budget or self.budget
        key = (task.permissions.model_dump_json(), budget.model_dump_json())
        builders = self._builders
        builder = builders.get(key)
        if builder is None:
            builder = PromptBuilder(self.registry, task.permissions, budget=budget,
                                    role=self.role, role_text=self.role_text,
                                    host_rules=self.host_rules,
                                    api_style=self.api_style)
            builders[key] = builder
        return builder

    def run(
        self,
        task: Task | str,
        *,
        cancel: CancelToken | None = None,
        trace_id: str | None = None,
        on_event: Callable[[Event], None] | None = None,
    ) -> ProgrammerResult:
        """Work on ``task`` until a script passes or the rounds run out.

        Returns the :class:`ProgrammerResult`; the backend's failures, the rate limit and
        cancellation end the loop with their own status rather than raising.

        Raises:
            StoreError: the store refused a write (a host problem).
        """
        if isinstance(task, str):
            task = Task(task)
        trace_id = trace_id or self._new_trace_id()
        cancel = cancel or CancelToken()
        with self._lock:
            self._running[trace_id] = cancel
        try:
            return self._run(task, cancel, trace_id, on_event)
        finally:
            with self._lock:
                if self._running.get(trace_id) is cancel:
                    del self._running[trace_id]

    def _run(self, task: Task, cancel: CancelToken, trace_id: str,
             on_event: Callable[[Event], None] | None) -> ProgrammerResult:
        listeners = [f for f in (self.on_event, on_event) if f is not None]

        def emit(name: EventName, attempt: int, **data: Any) -> None:
            event = Event(name, trace_id, attempt, data)
            for listener in listeners:
                try:
                    listener(event)
                except Exception:
                    log.exception("event listener failed on %s", name)

        builder = self.prompt(task)
        budget = task.budget or self.budget
        rounds = self.max_repairs + 1
        attempts: list[Attempt] = []
        repair = ""

        def end(status: ResultStatus, error: AgentError | None = None) -> ProgrammerResult:
            source, revision = self._kept(task.key)
            return ProgrammerResult(status, task.text, task.key, trace_id, tuple(attempts),
                                    source, revision, error)

        def cancelled(number: int, exc: Cancelled, stage: str, **data: Any
                      ) -> ProgrammerResult:
            self._cancelled(task, trace_id, number, exc, stage, emit, **data)
            return end("cancelled", exc)

        for number in range(1, rounds + 1):
            if cancel.cancelled:
                return cancelled(number, Cancelled(cancel.reason), "round")
            if number > 1:
                emit("repair_requested", number, after=attempts[-1].failure.kind
                     if attempts[-1].failure else None)
            try:
                self.rate_limit.acquire(self.role)
            except GenerationLimited as exc:
                emit("rate_limited", number, retry_in_s=round(exc.retry_in_s, 3))
                return end("rate_limited", exc)
            messages = builder.messages(task.text, world_summary=self._world_now(task),
                                        repair=repair)
            profile = getattr(self.client, "profile", None)
            request = LLMRequest(self.role, self.client.model, trace_id, number,
                                 tuple(messages), self.max_tokens, self.temperature,
                                 profile if isinstance(profile, str) else None)
            request, veto = self._before(request)
            if veto is not None:
                emit("request_vetoed", number, reason=veto.reason)
                return end("vetoed", AgentError(f"an LLM hook vetoed the request: "
                                                f"{veto.reason}", code="vetoed"))
            if cancel.cancelled:  # while the hooks ran: nothing was sent
                return cancelled(number, Cancelled(cancel.reason), "round")
            emit("generation_started", number, role=self.role, model=request.model,
                 profile=request.profile)
            started = self._clock()
            try:
                reply = self._generate(request, cancel, lambda text, n=number: emit(
                    "generation_delta", n, text=text))
            except Cancelled as exc:
                return cancelled(number, exc, "generation", request=self._given_up(),
                                 model=request.model, profile=request.profile)
            except ClientError as exc:
                retries = max(0, (exc.attempts or 1) - 1)
                if exc.code != "empty_response":
                    emit("client_failed", number, code=exc.code, message=str(exc),
                         retries=retries, model=request.model, profile=request.profile)
                    return end("client_error", exc)
                reply = Reply("", finish_reason=exc.finish_reason, retries=retries)
            generation_s = self._clock() - started
            self._after(request, reply)
            emit("generation_finished", number, chars=len(reply.content),
                 seconds=round(generation_s, 6), model=reply.model or request.model,
                 profile=request.profile, usage=dict(reply.usage), retries=reply.retries)

            try:
                attempt = self._attempt(number, reply, task, budget, trace_id, cancel,
                                        generation_s)
            except Cancelled as exc:  # after the generation, before the run
                return cancelled(number, exc, "run")
            attempt = replace(attempt, usage=dict(reply.usage), retries=reply.retries)
            if attempt.failure is not None and attempt.failure.kind == "budget":
                self._budget_trip(task, attempt, trace_id, emit)
            if attempt.failure is None:
                emit("execution_succeeded", number, reports=list(attempt.reports),
                     stats=attempt.stats)
                published = self._publish(task, attempt, budget, trace_id)
                if published.error is None:
                    attempts.append(attempt)
                    revision = published.revision
                    if self.go_live is not None:
                        emit("went_live", number, key=task.key, revision=revision)
                    if revision is not None:
                        emit("version_recorded", number, key=task.key, revision=revision)
                    return ProgrammerResult("solved", task.text, task.key, trace_id,
                                            tuple(attempts), attempt.code, revision)
                attempt = replace(attempt, failure=Failure(
                    "swap", f"the live game refused it: {published.error}",
                    reports=attempt.reports))
            attempts.append(attempt)
            failure = attempt.failure
            emit("execution_failed", number, kind=failure.kind, message=failure.message,
                 where=failure.where if failure.chunk else None, summary=failure.summary())
            self._record_failure(task, attempt, trace_id)
            repair = render_repair(number, rounds, attempt.code, failure,
                                   earlier=[a.failure for a in attempts[:-1] if a.failure])
        emit("repair_exhausted", rounds, attempts=rounds)
        return end("exhausted")

    # -- one round ------------------------------------------------------------------------

    def _before(self, request: LLMRequest) -> tuple[LLMRequest, Veto | None]:
        veto: Veto | None = None
        for hook in self.llm_hooks:
            if hook.before is None:
                continue
            try:
                verdict = hook.before(request)
            except Exception:
                log.exception("LLM hook %r failed before a request (trace %s); skipped",
                              hook.name, request.trace_id)
                continue
            if isinstance(verdict, Veto):
                veto = veto or verdict
            elif isinstance(verdict, LLMRequest):
                request = verdict
        return request, veto

    def _after(self, request: LLMRequest, reply: Reply) -> None:
        for hook in self.llm_hooks:
            if hook.after is None:
                continue
            try:
                hook.after(request, reply)
            except Exception:
                log.exception("LLM hook %r failed after a request (trace %s); skipped",
                              hook.name, request.trace_id)

    def _budget_trip(self, task: Task, attempt: Attempt, trace_id: str,
                     emit: Callable[..., None]) -> None:
        """A budget trip, as one structured log record (``record.moonbox``) and an event."""
        failure = attempt.failure
        assert failure is not None
        record = {"event": "budget_tripped", "trace_id": trace_id, "attempt": attempt.number,
                  "mod": task.mod_id, "key": task.key, "budget": failure.budget,
                  "limit": failure.limit, "used": failure.used,
                  "unit": _UNITS.get(failure.budget or "", None),
                  "where": failure.where if failure.chunk else None}
        log.warning("budget trip: %s budget of %s (trace %s, attempt %d)", failure.budget,
                    task.key, trace_id, attempt.number, extra={"moonbox": record})
        emit("budget_tripped", attempt.number, **{k: v for k, v in record.items()
                                                  if k not in ("event", "trace_id",
                                                               "attempt")})

    def _cancelled(self, task: Task, trace_id: str, number: int, exc: Cancelled,
                   stage: str, emit: Callable[..., None], **data: Any) -> None:
        """A cancellation, as one structured log record (``record.moonbox``) and an event."""
        record = {"event": "cancelled", "trace_id": trace_id, "attempt": number,
                  "key": task.key, "reason": exc.reason, "stage": stage, **data}
        log.info("%s cancelled (%s) at its %s, trace %s attempt %d", task.key, exc.reason,
                 stage, trace_id, number, extra={"moonbox": record})
        emit("cancelled", number, **{k: v for k, v in record.items()
                                     if k not in ("event", "trace_id", "attempt")})

    def _given_up(self) -> str:
        """What became of the generation a cancellation stopped: ``closed`` when its
        connection was closed (a stream, or a client that takes the token), ``abandoned``
        when it runs on in the background and its reply will be dropped."""
        if self.stream or _takes_cancel(self.client.complete):
            return "closed"
        return "abandoned"

    def _generate(self, request: LLMRequest, cancel: CancelToken,
                  on_text: Callable[[str], None]) -> Reply:
        messages = list(request.messages)
        options: dict[str, Any] = {"max_tokens": request.max_tokens,
                                   "temperature": request.temperature}
        if not self.stream:
            if _takes_cancel(self.client.complete):
                options["cancel"] = cancel  # it closes its connection when cancelled
            return self._interruptible(lambda: self.client.complete(messages, **options),
                                       cancel)
        pieces = self.client.stream(messages, **options)
        try:
            return collect(self._watch(pieces, cancel, on_text), model=self.client.model)
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()

    @staticmethod
    def _interruptible(request: Callable[[], Reply], cancel: CancelToken) -> Reply:
        """A buffered generation that a cancellation interrupts: it runs in a thread of
        its own, and a cancel stops the wait at once. A client that took the token closes
        the request's connection, and the thread ends with it; any other client's request
        finishes (or times out) in the background, bounded by its timeouts, and its reply
        is dropped."""
        if cancel.cancelled:
            raise Cancelled(cancel.reason)
        outcome: list[Any] = []
        wake = threading.Event()

        def work() -> None:
            try:
                outcome.append((True, request()))
            except BaseException as exc:  # handed to the waiting thread
                outcome.append((False, exc))
            finally:
                wake.set()

        remove = cancel.on_cancel(wake.set)
        try:
            threading.Thread(target=work, name="moonbox-generation", daemon=True).start()
            wake.wait()
        finally:
            remove()
        if not outcome:  # woken by the cancellation, the request still under way
            raise Cancelled(cancel.reason)
        ok, value = outcome[0]
        if not ok:
            raise value
        if cancel.cancelled:
            raise Cancelled(cancel.reason)
        return value  # type: ignore[no-any-return]

    @staticmethod
    def _watch(pieces: Iterator[Delta], cancel: CancelToken,
               on_text: Callable[[str], None]) -> Iterator[Delta]:
        for delta in pieces:
            if cancel.cancelled:
                raise Cancelled(cancel.reason)
            if delta.content:
                on_text(delta.content)
            yield delta

    def _attempt(self, number: int, reply: Reply, task: Task, budget: Budget, trace_id: str,
                 cancel: CancelToken, generation_s: float) -> Attempt:
        if not reply.content.strip():
            why = ("the reply was empty: it ran out of tokens" if reply.finish_reason == "length"
                   else "the reply was empty")
            return Attempt(number, "", None, Failure.no_code(why), generation_s=generation_s)
        extraction = extract_lua(reply.content)
        if extraction is None or not extraction.code.strip():
            return Attempt(number, reply.content, None,
                           Failure.no_code("the reply holds no ```lua block"),
                           generation_s=generation_s)
        code = extraction.code
        if cancel.cancelled:
            raise Cancelled(cancel.reason)
        script = Script(code, task.chunk, task.key, task.mod_id, task.permissions, budget,
                        trace_id, number)
        try:
            result: Any = self.dry_run(script)
        except ScriptError as exc:
            failure = Failure.from_error(exc, task.chunk, (), self.registry, task.permissions)
            return Attempt(number, reply.content, code, failure, generation_s=generation_s)
        reports = tuple(getattr(result, "reports", ()) or ())
        values = tuple(getattr(result, "values", ()) or ())
        stats_obj = getattr(result, "stats", None)
        stats = stats_obj.to_dict() if hasattr(stats_obj, "to_dict") else {}
        calls = tuple(getattr(result, "calls", ()) or ())
        error = getattr(result, "error", None)
        refused = tuple(getattr(result, "refused", ()) or ())
        if error is not None:
            failure = Failure.from_error(error, task.chunk, reports, self.registry,
                                         task.permissions)
            failure = replace(failure, refused=refused, values=values)
            return Attempt(number, reply.content, code, failure, (), reports, values, stats,
                           generation_s, calls=calls)
        if refused:
            failure = Failure.refusals(refused, reports, values)
            return Attempt(number, reply.content, code, failure, (), reports, values, stats,
                           generation_s, calls=calls)
        checks = run_checks(task.checks, result)
        failed = [c for c in checks if not c.passed]
        failure = None
        if failed:
            message = "; ".join(f"{c.name}: {c.message}" for c in failed)
            failure = Failure("check", f"acceptance check failed: {message}", reports=reports,
                              checks=checks, values=values)
        return Attempt(number, reply.content, code, failure, checks, reports, values, stats,
                       generation_s, calls=calls)

    def _world_now(self, task: Task) -> str:
        """The world summary for the next prompt: the dry-run host's, as of now, when it
        has one (a fork of the game has the world of the current tick), else the task's."""
        if self.world_summary is not None:
            try:
                return str(self.world_summary())
            except Exception:
                log.exception("the world summary failed")
        return task.world_summary

    def _publish(self, task: Task, attempt: Attempt, budget: Budget,
                 trace_id: str) -> Published:
        if self.go_live is None:
            return Published(self._record_success(task, attempt.code or "", trace_id))
        script = Script(attempt.code or "", task.chunk, task.key, task.mod_id,
                        task.permissions, budget, trace_id, attempt.number)
        try:
            return self.go_live(script)
        except ScriptError as exc:
            return Published(error=str(exc))

    def _sandbox_run(self, script: Script) -> RunResult:
        api = self.registry.mod(script.mod_id, script.permissions)
        api.trace_id = script.trace_id
        if self.call_history:
            api.record_calls(self.call_history)
        try:
            with api.sandbox(script.budget) as sandbox:
                outcome = sandbox.run(script.source, script.chunk)
            calls = tuple(c.to_dict() for c in api.calls)
            return _WithCalls(outcome, calls) if calls else outcome
        finally:
            api.close()

    # -- versions -------------------------------------------------------------------------

    def _author(self) -> str:
        return self.author or getattr(self.client, "model", None) or self.role

    def _record_success(self, task: Task, code: str, trace_id: str) -> int | None:
        if self.store is None:
            return None
        revision = self.store.scripts.record_success(
            task.key, code, author=self._author(), role=self.role, trace_id=trace_id)
        return revision.rev

    def _record_failure(self, task: Task, attempt: Attempt, trace_id: str) -> None:
        if self.store is None or attempt.code is None or attempt.failure is None:
            return
        if task.key not in self.store.scripts:
            # A key starts with a success (its original); the attempt stays in the result.
            return
        self.store.scripts.record_failure(
            task.key, attempt.code, error=attempt.failure.summary(), author=self._author(),
            role=self.role, trace_id=trace_id)

    def _kept(self, key: str) -> tuple[str | None, int | None]:
        if self.store is None or key not in self.store.scripts:
            return None, None
        try:
            current = self.store.scripts.current(key)
        except StoreError:
            return None, None
        return current.content, current.rev


class _WithCalls:
    """A sandbox run's outcome with the binding calls it made (``calls``)."""

    def __init__(self, outcome: Any, calls: tuple[dict[str, Any], ...]) -> None:
        self._outcome = outcome
        self.calls = calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self._outcome, name)


def _plain(value: Any) -> Any:
    """Lua values as JSON can hold them (non-finite numbers as strings)."""
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
