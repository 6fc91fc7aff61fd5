"""A sandbox whose runtime lives in a worker process: the same calls as :class:`Sandbox`."""

from __future__ import annotations

import itertools
import logging
import math
import re
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .._errors import (
    MAX_SOURCE_BYTES,
    BindingError,
    BudgetExceeded,
    ConfigError,
    HostError,
    MoonboxError,
    SandboxClosed,
    ScriptError,
    SourceTooLarge,
)
from ..sandbox import (
    LUA_KEYWORDS,
    Budget,
    FunctionHandle,
    HostCall,
    HostFunction,
    Outcome,
    Sandbox,
    Stats,
    Status,
    ValueLimits,
)
from ..sandbox._run import (  # the same caps as in process
    ReportLines,
    ReportsOfARun,
)
from ._process import WorkerCrashed, WorkerLost, WorkerProcess, WorkerStats
from ._protocol import FunctionRef, decode_error

__all__ = [
    "DEFAULT_MEMORY_LIMIT_BYTES",
    "DEFAULT_WALL_MARGIN_S",
    "IsolatedChunk",
    "IsolatedRun",
    "IsolatedSandbox",
    "Pool",
    "RemoteFunction",
    "Respawn",
]

log = logging.getLogger("moonbox.isolation")

# A worker's address space: the interpreter, moonbox and its libraries take ~150 MiB of it
# before any mod is loaded (measured on Linux x86-64).
DEFAULT_MEMORY_LIMIT_BYTES = 1 << 30
# How late past its wall budget a resume may end before the host kills the worker. The
# sandbox stops the mod itself within its wall budget plus a few milliseconds; the margin is
# for what it cannot stop (a C call, a VM bug) and for a loaded machine.
DEFAULT_WALL_MARGIN_S = 1.0
# Requests that run no mod code (create, load, restore) answer within this.
OPERATION_TIMEOUT_S = 30.0

Respawn = Literal["now", "next_call"]
"""When a fresh worker takes over from a lost one: at once, in the call that lost it
(``now``), or on the mod's next call (``next_call``: the engine's choice, so that the
restart is never charged to a call that only waited on the lost one)."""



def _check_size(source: str | bytes, chunk: str) -> None:
    """Refuse a source over the limit before it crosses to the worker (as in process)."""
    if isinstance(source, str) and len(source) * 4 > MAX_SOURCE_BYTES:  # maybe over: count
        source = source.encode("utf-8", "surrogateescape")
    if len(source) > MAX_SOURCE_BYTES:
        raise SourceTooLarge(len(source), MAX_SOURCE_BYTES, chunk=chunk)

class Pool(Protocol):
    """What a sandbox asks of the pool it runs in (a :class:`WorkerPool`): a worker for its
    mod when it is made, the mod unpinned when it closes, and whether the pool is closed
    (its sandboxes refuse every call then)."""

    @property
    def closed(self) -> bool: ...

    def pin(self, mod_id: str) -> WorkerProcess: ...

    def unpin(self, mod_id: str) -> None: ...


_FINISHED = frozenset({"done", "error", "budget"})
_OK_STATUSES = frozenset({"done", "yielded", "preempted"})
_STATUSES = _OK_STATUSES | {"error", "budget"}
_NUMBERS = (int, float)
_tuple_new = tuple.__new__
_monotonic = time.monotonic
_INF = math.inf
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ids = itertools.count(1)
_FAILS = {"ConfigError": ConfigError, "SandboxClosed": SandboxClosed}
_HOST_BUG = "the host failed to handle this call (a host bug, logged)"


@dataclass(frozen=True, slots=True)
class IsolatedChunk:
    """Mod source compiled in the worker, by id; compiled again in a fresh worker."""

    name: str
    checks: int
    _id: int = field(repr=False)
    _sandbox_id: int = field(repr=False)


class RemoteFunction(FunctionHandle):
    """A function of a mod whose runtime lives in a worker: what a host function that takes
    functions gets from an isolated sandbox (the function itself stays in the worker).

    It behaves as a :class:`~moonbox.sandbox.FunctionHandle`: ``sandbox.start(handle)`` and
    ``sandbox.run(handle, args=...)`` run it in the worker, :meth:`release` lets it go (the
    worker hears of it with the sandbox's next request). It is no longer :attr:`valid` once
    its worker is lost: a fresh worker does not hold the mod's functions.
    """

    __slots__ = ()

    @property
    def valid(self) -> bool:
        """False once released, when its sandbox is closed, or once its worker was lost
        (or the runtime in it replaced)."""
        sb: IsolatedSandbox = self.sandbox  # type: ignore[assignment]
        # Its _generation is the incarnation of the mod's runtime it came from.
        return (self._key is not None and not sb._closed and sb._made == self._generation
                and not sb.lost)

    def __repr__(self) -> str:
        return f"<RemoteFunction {self.where}{'' if self.valid else ' (invalid)'}>"


class _Watch:
    """The watchdog's deadline for the request in flight, and the resume's own deadline
    that :class:`HostCall` reads (on the sandbox)."""

    __slots__ = ("sandbox", "deadline", "limit", "wall_s", "ticks", "overdue")

    def __init__(self, sandbox: IsolatedSandbox) -> None:
        self.sandbox = sandbox
        self.deadline = math.inf
        self.limit = math.inf  # what served() may push the deadline to, at most
        self.wall_s = 0.0
        self.ticks = 0  # the resumes the request may still begin (tick frames)
        # A call was answered past the resume's own time (and the margin): the worker's
        # meter stops the mod when such a call returns, so no further call may come.
        self.overdue = False

    def begin(self, wall_s: float, ticks: int, now: float) -> None:
        """A request begins at ``now``: its first resume, and ``ticks`` more it may begin
        (a ``run`` of ``max_resumes`` resumes: ``max_resumes - 1``; a ``resume``: none).
        The resume gets its own wall budget, and the watchdog its margin past it."""
        self.wall_s = wall_s
        self.ticks = ticks
        sb = self.sandbox
        sb._start, sb._deadline = now, now + wall_s
        self.deadline = now + wall_s + sb.wall_margin_s
        self.limit = self.deadline + sb.wall_margin_s
        self.overdue = False

    def tick(self) -> bool:
        """The worker says the request's next resume begins; whether it may (a worker
        that says so more often than the request allows would hold the host forever)."""
        if self.ticks <= 0:
            return False
        self.begin(self.wall_s, self.ticks - 1, time.monotonic())
        return True

    def served(self, begun: float) -> None:
        """The host answered a call, which it began serving at ``begun`` (monotonic seconds).

        That time was the host's, not the worker's: the deadline and its limit move by it
        (a slow host function, or a nested call into another mod, is no hang of the
        worker's). Then the worker gets the margin to go on (its own meter bounds the rest
        of the resume), but never more than one margin more in all.

        The worker's own clock does count the host's time: when a call returns past the
        resume's wall budget (as the host keeps it: excluded waits move it), the worker's
        meter stops the mod before it makes another call, as in process. So once a call
        is answered past that budget and the margin, the request is :attr:`overdue`: a
        further call is not served, and a worker that only sends calls to a slow host
        function cannot keep the host serving it."""
        now = time.monotonic()
        spent = now - begun
        self.deadline += spent
        self.limit += spent
        sb = self.sandbox
        later = min(now + sb.wall_margin_s, self.limit)
        if later > self.deadline:
            self.deadline = later
        if now > sb._deadline + sb.wall_margin_s:
            self.overdue = True


class IsolatedRun(ReportLines):
    """A chunk running in a coroutine in the worker; each :meth:`resume` gets a fresh budget.

    Create with :meth:`IsolatedSandbox.start`. A run does not survive the loss of its worker:
    after one, :meth:`resume` raises :class:`SandboxClosed` (the mod's state, not its
    coroutines, is what a snapshot restores).
    """

    __slots__ = ("sandbox", "chunk", "status", "resumes", "_id", "_made", "_steps",
                 "_peak", "_wall_s")

    def __init__(self, sandbox: IsolatedSandbox, chunk: IsolatedChunk, run_id: int,
                 made: int) -> None:
        super().__init__()
        self.sandbox = sandbox
        self.chunk = chunk
        self.status: Status | Literal["new"] = "new"
        self.resumes = 0
        self._id = run_id
        self._made = made  # the incarnation of the mod's runtime that holds it
        self._steps = 0
        self._peak = 0
        self._wall_s = 0.0

    @property
    def finished(self) -> bool:
        return self.status in _FINISHED

    @property
    def _open(self) -> bool:
        """Resumable: not finished, and its sandbox still lives in the worker that holds it."""
        sb = self.sandbox
        return (self.status not in _FINISHED and not sb._closed and sb._made == self._made
                and not sb.lost)

    @property
    def stats(self) -> Stats:
        return Stats(self._steps, self._peak, self._wall_s)

    def resume(self, *args: Any, budget: Budget | None = None) -> Outcome:
        """Resume the run with a fresh budget (the sandbox's unless one is given).

        Raises:
            SandboxClosed: the run is finished or closed, its sandbox closed, or the worker
                that held it was lost.
        """
        sb = self.sandbox
        worker = sb._worker
        # The hot path of every handler call of the engine: one test for all that refuses
        # the resume (1.4k instructions of a resume's 33k), the refusal itself in _refuse.
        if (self.status in _FINISHED or sb._closed or worker._closed or sb._made != self._made
                or sb._generation != worker.generation or worker._down
                or (sb._pool is not None and sb._pool.closed)):
            self._refuse()
        self._new_resume()
        first = 0
        frame = ["resume", sb._id, self._id, args,
                 None if budget is None else sb._budget_frame(budget)]
        outcome = sb._exchange(frame, budget or sb.budget, self.chunk.name, self, first)
        self.resumes += 1
        s = outcome[4]
        self._steps += s[0]
        if s[1] > self._peak:
            self._peak = s[1]
        self._wall_s += s[2]
        self.status = outcome[0]
        return outcome

    def _refuse(self) -> None:
        """Raise why the run cannot be resumed.

        Raises:
            SandboxClosed: the run is finished, its sandbox closed, or the worker that held
                it was lost.
        """
        sb = self.sandbox
        if self.status in _FINISHED:
            raise SandboxClosed(f"the run of {self.chunk.name} is finished ({self.status})")
        sb._check_open()
        if sb._made != self._made or sb.lost:
            self.status = "error"
            raise SandboxClosed(f"the run of {self.chunk.name} was lost with its worker; "
                                "start it again")

    def finish(self, *args: Any, max_resumes: int = 1000, budget: Budget | None = None) -> Outcome:
        """Resume until the chunk returns, fails or trips (see :meth:`Run.finish`)."""
        outcome = self.resume(*args, budget=budget)
        reports = ReportsOfARun()
        reports.add(outcome.reports)
        count = 1
        while outcome.status in ("yielded", "preempted"):
            if count >= max_resumes:
                self.close()
                err = ScriptError(f"still yielding after {max_resumes} resumes; finish "
                                  "within fewer", chunk=self.chunk.name)
                outcome = Outcome("error", (), err)
                break
            outcome = self.resume(budget=budget)
            count += 1
            reports.add(outcome.reports)
        return Outcome(outcome.status, outcome.values, outcome.error, tuple(reports.lines),
                       self.stats)

    def close(self) -> None:
        """Drop the run's coroutine in the worker. Idempotent."""
        if not self.finished:
            self.status = "error"
            sb = self.sandbox
            if not sb._closed and sb._made == self._made and not sb.lost:
                try:
                    sb._operation(["close_run", sb._id, self._id])
                except (HostError, SandboxClosed):
                    pass


class IsolatedSandbox:
    """A sandbox in a worker process: what no in-VM check can stop ends with the worker.

    It takes the options of :class:`moonbox.sandbox.Sandbox` and answers the same calls
    (:meth:`load`, :meth:`start`, :meth:`run`, runs with :meth:`IsolatedRun.resume` and
    :meth:`IsolatedRun.finish`). Host functions run in the host: the worker's sandbox holds
    proxies that send each call here, where it is validated and served. A host function
    that takes the mod's functions gets :class:`RemoteFunction` handles, which start runs
    in the worker.

    A worker that overruns the wall budget by more than ``wall_margin_s``, passes its memory
    limit, crashes or stops answering is killed; the call returns ``budget`` (kind ``time``
    or ``memory``) or ``error`` with a :class:`WorkerCrashed`, and a fresh worker takes over
    with the mod's snapshot: its loaded chunks, compiled again, and the last state copied out
    of the global named by ``state_global`` after an ok resume (see docs/isolation.md).

    Args:
        budget, jit, preempt, host_functions, value_limits, seed, deterministic: as for
            :class:`~moonbox.sandbox.Sandbox`. A seed is picked here when none is given, so
            a fresh worker replays the same random numbers.
        memory_limit_bytes: the worker's OS address-space limit (0: none). Shared by all
            mods of a pool's worker; the pool's own setting wins there.
        wall_margin_s: how far past a resume's wall budget the worker may run before the
            host kills it.
        state_global: the global holding the mod's state (plain data), snapshotted after
            every ok resume and restored into a fresh worker; ``None``: no state is kept.
        pool: run in this pool's worker for ``mod_id`` instead of a worker of its own.
        mod_id: the mod's id in the pool (and in statistics).
        respawn: ``now`` (default): a fresh worker takes over in the call that lost the
            last one; ``next_call``: on the mod's next call (or :meth:`revive`).

    Raises:
        ConfigError: an option that cannot be enforced (as :class:`Sandbox`, or a bad
            ``state_global``).
        HostError: the worker could not start.
    """

    # HostCall asks a sandbox how much of the resume it excluded: the same bookkeeping.
    _excluded_in_resume = Sandbox._excluded_in_resume

    def __init__(
        self,
        budget: Budget | None = None,
        *,
        jit: bool = True,
        preempt: bool = False,
        host_functions: Iterable[HostFunction] = (),
        value_limits: ValueLimits | None = None,
        seed: int | None = None,
        deterministic: bool = False,
        memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
        wall_margin_s: float = DEFAULT_WALL_MARGIN_S,
        state_global: str | None = "state",
        pool: Pool | None = None,
        mod_id: str | None = None,
        respawn: Respawn = "now",
        _test_hooks: bool = False,
    ) -> None:
        self.budget = budget or Budget()
        self.jit = jit
        self.preempt = preempt
        self.value_limits = value_limits or ValueLimits()
        self.seed = secrets.randbelow(2**31) if seed is None else seed
        self.deterministic = deterministic
        if not (isinstance(wall_margin_s, (int, float)) and math.isfinite(wall_margin_s)
                and wall_margin_s >= 0):
            raise ConfigError("wall_margin_s must be a finite number of seconds, 0 or more")
        if memory_limit_bytes < 0:
            raise ConfigError("memory_limit_bytes cannot be negative")
        if state_global is not None and (not _NAME.match(state_global)
                                         or state_global in LUA_KEYWORDS
                                         or state_global.startswith("__mb")):
            raise ConfigError(f"state_global {state_global!r} is not a Lua global name")
        if respawn not in ("now", "next_call"):
            raise ConfigError(f"respawn must be 'now' or 'next_call', not {respawn!r}")
        self.wall_margin_s = float(wall_margin_s)
        self.state_global = state_global
        self.respawn = respawn
        self.mod_id = mod_id or f"sandbox-{id(self):x}"
        self._functions: dict[str, HostFunction] = {}
        self._takes_functions: set[str] = set()
        for hf in host_functions:
            if hf.name in self._functions:
                raise ConfigError(f"two host functions are named {hf.name!r}")
            self._functions[hf.name] = hf
            if getattr(hf, "accepts_functions", False):
                self._takes_functions.add(hf.name)
        self._id = next(_ids)
        self._chunks: dict[int, tuple[str | bytes, str, int]] = {}
        self._chunk_ids = itertools.count(1)
        self._run_ids = itertools.count(1)
        self._snapshot: tuple[Any, ...] = ()  # () none yet, else (value,)
        self._closed = False
        self.restores = 0
        self.replacements = 0
        self._replaced_here = 0  # replacements the worker's sandbox of this mod reported
        self._pool = pool
        # Keys of released RemoteFunctions, told to the worker with the next request.
        self._dropped: list[int] = []
        # What HostCall reads of a sandbox (moonbox.sandbox.HostCall): the time left is the
        # resume's as the host sees it; excluded time moves the worker's clock too (_serve).
        self._running: Any = None
        self._deadline = math.inf
        self._start = 0.0
        self._clock = time.monotonic
        self._excluded_start = 0.0
        self._excluded_s = 0.0
        self._excluded_pending = 0.0
        self._watch = _Watch(self)
        self._call = HostCall(self, None, "")  # type: ignore[arg-type]
        self._generation = 0  # the worker generation the mod lives in (0: none yet)
        self._made = 0  # incarnations of the mod's runtime: its runs and functions name one
        self._remake = False  # the worker replaced the runtime: make the mod again
        if pool is not None:
            self._worker = pool.pin(self.mod_id)
        else:
            self._worker = WorkerProcess(memory_limit_bytes=memory_limit_bytes,
                                         test_hooks=_test_hooks)
            self._worker.mods.append(self.mod_id)
        self.memory_limit_bytes = self._worker.memory_limit_bytes
        try:
            self._ensure()
        except BaseException:
            self.close()
            raise

    # -- lifecycle -----------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        return {
            "budget": self.budget.model_dump(),
            "jit": self.jit,
            "preempt": self.preempt,
            "functions": [[hf.name, hf.cost, hf.name in self._takes_functions]
                          for hf in self._functions.values()],
            "value_limits": self.value_limits.model_dump(),
            "seed": self.seed,
            "deterministic": self.deterministic,
            "state_global": self.state_global,
        }

    def _ensure(self) -> None:
        """Make sure a live worker holds this mod: start one if the last was lost, then
        create the mod there, compile its chunks again and restore its state snapshot.

        Raises:
            WorkerLost: the worker was lost while the mod was being restored.
            HostError: a fresh worker could not start.
        """
        worker = self._worker
        worker.revive()  # a lost or abandoned worker is replaced first
        if self._generation == worker.generation and not self._remake:
            return
        if self._generation and self._generation != worker.generation:
            self.restores += 1
        self._dropped = []  # keys of the old runtime: a new one may reuse them
        self._replaced_here = 0
        deadline = time.monotonic() + OPERATION_TIMEOUT_S
        self._check(worker.request(["new", self._id, self._config()], deadline))
        for cid, (source, name, _checks) in self._chunks.items():
            self._check(worker.request(["load", self._id, cid, source, name], deadline))
        if self._snapshot:
            self._check(worker.request(["restore", self._id, self._snapshot[0]], deadline))
        self._generation = worker.generation
        self._made += 1
        self._remake = False

    def revive(self) -> bool:
        """Bring the mod back if its worker was lost: a fresh worker (unless another mod
        of a pool started one already) and the mod restored there from its snapshot. Its
        runs and functions are gone. Whether the mod was restored now.

        Raises:
            SandboxClosed: the sandbox (or its pool) is closed.
            HostError: a fresh worker could not start, or was lost while restoring the mod.
        """
        self._check_open()
        with self._worker.lock:
            before = self.restores
            try:
                self._ensure()
            except WorkerLost as lost:
                raise HostError(f"{self.mod_id}: {lost.detail}") from None
            return self.restores != before

    @property
    def lost(self) -> bool:
        """The worker holding the mod's runtime was lost and the mod was not restored yet:
        its runs and functions are gone."""
        worker = self._worker
        return self._generation != worker.generation or worker._down

    def _decode_error(self, reply: list[Any], index: int = 1) -> ScriptError:
        try:
            error = decode_error(reply[index])
        except Exception:  # noqa: BLE001 - whatever the worker sent, it is no error
            error = None
        if error is None:
            raise self._worker.violation(f"a malformed error: {str(reply)[:80]}")
        return error

    def _check(self, reply: list[Any]) -> list[Any]:
        """An answer that is no failure, as it is.

        Raises:
            ScriptError: the worker answered with the mod's fault (a syntax error).
            HostError, SandboxClosed, ConfigError: the worker refused the request.
            WorkerLost: the answer is malformed (the worker is killed).
        """
        kind = reply[0]
        if kind == "script":
            raise self._decode_error(reply)
        if kind == "fail":
            if len(reply) != 3 or type(reply[1]) is not str or type(reply[2]) is not str:
                raise self._worker.violation(f"a malformed refusal: {str(reply)[:80]}")
            raise _FAILS.get(reply[1], HostError)(reply[2])
        if kind != "ok":
            raise self._worker.violation(f"an answer of kind {kind!r}")
        return reply

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosed("the sandbox is closed")
        if self._pool is not None and self._pool.closed:
            raise SandboxClosed(f"{self.mod_id}: the worker pool is closed")
        if self._worker._closed:
            raise SandboxClosed(f"{self.mod_id}: the worker is closed")

    def _notes(self) -> list[Any] | None:
        """Frames the worker takes without answering: the functions released since the
        last request."""
        if not self._dropped:
            return None
        dropped, self._dropped = self._dropped, []
        return [["drop_fns", self._id, dropped]]

    def _operation(self, frame: list[Any]) -> list[Any]:
        """A request that runs no mod code; a lost worker is replaced and the loss raised."""
        self._check_open()
        with self._worker.lock:
            try:
                self._ensure()
                return self._check(self._worker.request(
                    frame, time.monotonic() + OPERATION_TIMEOUT_S, self._serve,
                    notes=self._notes()))
            except WorkerLost as lost:
                self._after_loss()
                raise HostError(f"{self.mod_id}: {lost.detail}") from None

    def _after_loss(self) -> None:
        log.warning("%s: worker lost; a fresh worker takes over %s", self.mod_id,
                    "now" if self.respawn == "now" else "on the next call")
        if self.respawn != "now":
            return
        try:
            self._ensure()  # this mod at once; the others of a pool's worker on their next call
        except (WorkerLost, MoonboxError) as exc:
            log.warning("%s: restoring the mod failed (%s); retried on the next call",
                        self.mod_id, exc)

    def close(self) -> None:
        """Drop the mod from its worker (and stop the worker if it is the mod's own).
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        worker = getattr(self, "_worker", None)
        if worker is None:
            return
        if self._pool is not None:
            self._pool.unpin(self.mod_id)
            if worker.alive and self._generation == worker.generation:
                try:
                    with worker.lock:
                        worker.request(["drop", self._id],
                                       time.monotonic() + OPERATION_TIMEOUT_S)
                except WorkerLost:
                    pass  # reaped; the next user of the worker starts a fresh one
                except SandboxClosed:
                    pass
        else:
            worker.close()

    def __enter__(self) -> IsolatedSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def state_snapshot(self) -> Any:
        """The last snapshot of the mod's state (``None`` before the first)."""
        return self._snapshot[0] if self._snapshot else None

    def worker_stats(self) -> WorkerStats:
        """Memory and CPU of the worker running this mod (shared with the mods pinned to it)."""
        return self._worker.stats()

    @property
    def pid(self) -> int | None:
        """The process id of the worker running this mod now."""
        return self._worker.pid

    @property
    def memory_used_bytes(self) -> int:
        """The mod's Lua heap now, in bytes, as the worker's runtime counts it.

        Raises:
            SandboxClosed: the sandbox is closed.
            HostError: the worker was lost while answering.
        """
        reply = self._operation(["memory", self._id])
        return reply[1] if len(reply) == 2 and type(reply[1]) is int else 0

    # -- loading and running -------------------------------------------------------------

    def load(self, source: str | bytes, chunk: str = "=(mod)") -> IsolatedChunk:
        """Compile source text in the worker (see :meth:`Sandbox.load`). The chunk becomes
        part of the mod's snapshot: a fresh worker compiles it again.

        Raises:
            ScriptError: kind ``syntax``.
            ConfigError: a bad chunk name.
        """
        _check_size(source, chunk)
        cid = next(self._chunk_ids)
        reply = self._operation(["load", self._id, cid, source, chunk])
        checks = reply[1] if len(reply) == 2 and type(reply[1]) is int else 0
        self._chunks[cid] = (source, chunk, checks)
        return IsolatedChunk(chunk, checks, cid, self._id)

    def unload(self, chunk: IsolatedChunk) -> None:
        """Forget a chunk: it is no longer part of the snapshot."""
        if self._chunks.pop(chunk._id, None) is not None and not self._closed:
            self._operation(["unload", self._id, chunk._id])

    def _own(self, chunk: IsolatedChunk) -> None:
        if chunk._sandbox_id != self._id or chunk._id not in self._chunks:
            raise ConfigError(f"{chunk.name} was not loaded by this sandbox (or was unloaded)")

    def _own_function(self, handle: FunctionHandle) -> None:
        if handle.sandbox is not self:  # type: ignore[comparison-overlap]
            raise ConfigError(f"the function at {handle.where} belongs to another sandbox")
        if not handle.valid:
            raise SandboxClosed(f"the function at {handle.where} was released, or lost with "
                                "its worker")

    def start(self, source: str | bytes | IsolatedChunk | FunctionHandle,
              chunk: str = "=(mod)") -> IsolatedRun:
        """Compile (unless given a chunk) and create a run; nothing runs yet. Given a
        :class:`RemoteFunction` of this sandbox, the run calls that function: the first
        resume's arguments are its arguments.

        Raises:
            ScriptError: kind ``syntax``.
            SandboxClosed: the function was released or lost with its worker.
            ConfigError: the chunk or function belongs to another sandbox.
        """
        rid = next(self._run_ids)
        if isinstance(source, FunctionHandle):
            self._own_function(source)
            self._operation(["start_fn", self._id, rid, source._key])
            compiled = IsolatedChunk(source.chunk, 0, 0, self._id)
        else:
            compiled = source if isinstance(source, IsolatedChunk) else self.load(source, chunk)
            self._own(compiled)
            self._operation(["start", self._id, rid, compiled._id])
        return IsolatedRun(self, compiled, rid, self._made)

    def run(
        self,
        source: str | bytes | IsolatedChunk | FunctionHandle,
        chunk: str = "=(mod)",
        *,
        args: Sequence[Any] = (),
        max_resumes: int = 1000,
        budget: Budget | None = None,
    ) -> Outcome:
        """Compile and run a chunk (or call a :class:`RemoteFunction`) to its end, in one
        request to the worker.

        Script faults, syntax errors and the loss of the worker come back in the outcome.

        Raises:
            SandboxClosed: a function that was released or lost with its worker.
        """
        budget_frame = None if budget is None else self._budget_frame(budget)
        if isinstance(source, FunctionHandle):
            self._own_function(source)
            name = source.chunk
            frame = ["run", self._id, None, None, name, list(args), max_resumes, budget_frame,
                     source._key]
        elif isinstance(source, IsolatedChunk):
            self._own(source)
            name = source.name
            frame = ["run", self._id, source._id, None, name, list(args), max_resumes,
                     budget_frame]
        else:
            name = chunk
            try:
                _check_size(source, chunk)
            except SourceTooLarge as exc:  # refused here: never sent to the worker
                return Outcome("error", (), exc)
            frame = ["run", self._id, None, source, chunk, list(args), max_resumes,
                     budget_frame]
        self._check_open()
        reports = ReportLines()
        # The worker begins each resume after the first with a tick frame: as many as that.
        return self._exchange(frame, budget or self.budget, name, reports, 0,
                              max(0, max_resumes - 1))

    def _budget_frame(self, budget: Budget) -> dict[str, Any] | None:
        return None if budget is self.budget or budget == self.budget else budget.model_dump()

    def _exchange(self, frame: list[Any], budget: Budget, name: str, run: ReportLines,
                  first_report: int, ticks: int = 0) -> Outcome:
        """Send a request that runs mod code, under the watchdog; an outcome either way.
        ``ticks``: the resumes past the first the request may begin (tick frames).

        The hot path of every call into the mod: the caller made sure the sandbox is open,
        and the worker's lock is held here, so the worker is asked without its own checks
        (:meth:`WorkerProcess.exchange_locked`), and the usual answer is read on a short
        path (:meth:`_result`).

        Raises:
            HostError: a run of this sandbox is running (a host function serving it called
                back into the same mod), refused as in process before the request in
                flight is touched: its watchdog, deadline and reports stay its own.
            TypeError, ValueError, OverflowError: the request is not plain data (nothing
                was sent).
        """
        if self._running is not None:
            raise HostError("a run cannot be resumed while another run of the sandbox runs")
        worker = self._worker
        with worker.lock:
            start = _monotonic()
            try:
                begun = start
                if self._generation != worker.generation or worker._down or self._remake:
                    self._ensure()
                    begun = _monotonic()  # making the mod again is not its resume's time
                generation = worker.generation
                data = worker.pack(frame, self._notes() if self._dropped else None)
                self._running = run
                watch = self._watch
                watch.begin(budget.wall_s, ticks, begun)
                reply = worker.exchange_locked(data, generation, None, self._serve, watch)
                reports = (tuple(run.reports[first_report:]) if len(run.reports) > first_report
                           else ())
                outcome = self._result(reply, reports)
            except WorkerLost as lost:
                wall_s = _monotonic() - start
                self._after_loss()
                if isinstance(run, IsolatedRun):
                    run._made = -1
                return self._lost_outcome(lost, budget, name, run, first_report, wall_s)
            finally:
                self._running, self._deadline = None, _INF
        return outcome

    def _result(self, reply: list[Any], reports: tuple[str, ...]) -> Outcome:
        """The outcome in the worker's answer to a run or resume, and its snapshot.

        Raises:
            WorkerLost: the answer is malformed (the worker is killed).
            HostError, SandboxClosed, ConfigError: the worker refused the request.
        """
        if len(reply) == 9:
            _, status, values, steps, peak, wall_s, error, snapshot, replaced = reply
            if (error is None and reply[0] == "r" and type(status) is str
                    and status in _OK_STATUSES and type(values) is list and type(steps) is int
                    and type(peak) is int and type(wall_s) is float and type(replaced) is int
                    and replaced == self._replaced_here):
                # The usual answer: no error, the same runtime, at most a snapshot.
                if snapshot is not None:
                    if type(snapshot) is not list or len(snapshot) != 1:
                        return self._unusual_result(reply, reports)
                    self._snapshot = (snapshot[0],)
                return _tuple_new(Outcome, (status, tuple(values), None, reports,
                                            _tuple_new(Stats, (steps, peak, wall_s))))
        return self._unusual_result(reply, reports)

    def _unusual_result(self, reply: list[Any], reports: tuple[str, ...]) -> Outcome:
        """:meth:`_result` of any answer but the usual one."""
        kind = reply[0]
        if kind != "r":
            if kind == "script":
                return Outcome("error", (), self._decode_error(reply), reports)
            self._check(reply)
            raise self._worker.violation(f"an answer of kind {kind!r} to a run")
        try:
            _, status, values, steps, peak, wall_s, error, snapshot, replaced = reply
        except ValueError:
            raise self._worker.violation(f"a malformed result: {str(reply)[:80]}") from None
        if (type(status) is not str or type(values) is not list or type(steps) is not int
                or type(peak) is not int or type(wall_s) not in _NUMBERS
                or type(replaced) is not int
                or (status in _OK_STATUSES) != (error is None)
                or (error is not None and status not in _STATUSES)):
            raise self._worker.violation(f"a malformed result: {str(reply)[:80]}")
        if error is None:
            outcome = Outcome(status, tuple(values), None, reports, Stats(steps, peak, wall_s))
        else:
            try:
                outcome = Outcome(status, (), decode_error(error), reports,
                                  Stats(steps, peak, wall_s))
            except Exception:  # noqa: BLE001 - whatever the worker sent, it is no result
                raise self._worker.violation(f"a malformed result: {str(reply)[:80]}") from None
        if snapshot is not None:
            if type(snapshot) is list and len(snapshot) == 1:
                self._snapshot = (snapshot[0],)
            else:
                log.warning("%s: %s", self.mod_id, str(snapshot)[:300])
        if replaced != self._replaced_here:
            # The worker replaced the mod's runtime after an out-of-memory trip: its chunks
            # and functions went with it. It is made again on the next call.
            self.replacements += max(0, replaced - self._replaced_here)
            self._replaced_here = replaced
            self._made += 1  # its runs and functions are gone now
            self._remake = True
        return outcome

    def _lost_outcome(self, lost: WorkerLost, budget: Budget, name: str, run: ReportLines,
                      first_report: int, wall_s: float) -> Outcome:
        reports = tuple(run.reports[first_report:])
        stats = Stats(0, 0, wall_s)
        error: ScriptError
        if lost.cause == "time":
            error = BudgetExceeded("time", budget.wall_s, wall_s, chunk=name)
            status: Status = "budget"
        elif lost.cause == "memory":
            error = BudgetExceeded("memory", self.memory_limit_bytes, self.memory_limit_bytes,
                                   chunk=name)
            status = "budget"
        else:
            error = WorkerCrashed(
                f"{lost.detail}; the mod is restored from its last snapshot in a fresh worker",
                chunk=name, signal=lost.signal, exit_code=lost.exit_code)
            status = "error"
        log.warning("%s: %s", self.mod_id, lost.detail)
        return Outcome(status, (), error, reports, stats)

    # -- host functions ------------------------------------------------------------------

    def _h_extend(self, seconds: float) -> None:
        # HostCall.excluded_time moved the resume's deadline (self._deadline) by this much:
        # the worker hears of it with the answer (_serve). The watchdog moves by all the
        # time the host spends serving the call, this included (_Watch.served).
        self._excluded_pending += seconds

    def _serve(self, frame: list[Any]) -> list[Any]:
        """Run one host function for the worker: validated and served here, in the host."""
        name, args = frame[1], frame[2]
        hf = self._functions.get(name)
        if hf is None:
            return ["err", "no such host function", "failed"]
        if name in self._takes_functions:
            args = [RemoteFunction(self, a.chunk, a.line, a.key, self._made)  # type: ignore[arg-type]
                    if type(a) is FunctionRef else a for a in args]
        call = self._call
        call.run = self._running
        call.name = name
        self._excluded_pending = 0.0
        try:
            # The binding's lane first, as in process (it only ever declines to the full
            # path): the arguments come as msgpack decoded them, plain values only.
            args = tuple(args)
            lane = getattr(hf, "lane", None)
            result = None if lane is None else lane(call, args)
            if result is None:
                call.mod = None
                result = hf(call, args)
            elif type(result) is not tuple:
                result = (result,)
        except BindingError as exc:
            answer = ["err", str(exc), exc.reason]
        except Exception:
            log.exception("host function %r failed", name)
            answer = ["err", _HOST_BUG, "failed"]
        else:
            answer = ["ret", result or ()]
        if self._excluded_pending:
            answer.append(self._excluded_pending)
        return answer
