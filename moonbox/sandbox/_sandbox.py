"""The sandbox: one hardened LuaJIT runtime per mod, runs under per-resume budgets."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from types import MethodType
from typing import Any

from .._errors import (
    MAX_SOURCE_BYTES,
    BudgetExceeded,
    ConfigError,
    HostError,
    SandboxClosed,
    ScriptError,
    SourceTooLarge,
)
from ._alarm import alarm_state, watch
from ._budget import Budget
from ._dispatch import AbandonedEntries, FunctionHandle, HostCall, HostFunction, dispatch
from ._environment import ALLOWED_GLOBALS, ALLOWED_LIBRARIES
from ._instrument import ReservedNameError, instrument
from ._lua import lua
from ._marshal import ValueLimits, encode_text, table_pairs
from ._outcome import Outcome
from ._parser_limits import SourceLimitError
from ._run import MAX_REPORT_CHARS as MAX_REPORT_CHARS
from ._run import MAX_REPORTS as MAX_REPORTS
from ._run import MAX_REPORTS_TOTAL_CHARS as MAX_REPORTS_TOTAL_CHARS
from ._run import Chunk, Run
from ._runtime import (
    ENV_SPEC,
    HOST_HEADROOM_BYTES,
    PAIRS_SLICE,
    bind_resume,
    open_runtime,
    set_up_compiled_calls,
)
from ._runtime import MAX_MESSAGE_BYTES as MAX_MESSAGE_BYTES
from ._script_errors import POSITION
from ._tokenizer import LuaTokenError
from ._values import lua_text
from ._watchdog import Watchdog, stall_margin_s

# The report and message caps (imported as themselves above) are still read from here by
# the isolated sandbox and the fuzzer: their home is _run.py and _runtime.py.
__all__ = ["Sandbox"]

BOUND_HOST_FUNCTIONS = True
"""Whether a mod's host functions are the compiled crossing bound to each (see
make_host_function in dispatch.lua), where it is built; else a Lua closure of the
prelude's calls it. (Tests compare the two.)"""

# LuaJIT's compile-time limits, as its messages name them.
_LUAJIT_LIMITS = ("upvalues", "syntax levels", "too long", "too many", "complex")


class Sandbox:
    """A fresh, isolated LuaJIT runtime for one mod.

    The runtime is created with Python eval, builtins and attribute access off, the
    ``python`` module removed, and an environment built from the allowlist in
    :mod:`moonbox.sandbox._environment` plus the given host functions.

    Args:
        budget: the per-resume budget (defaults to :class:`Budget`'s defaults).
        jit: ``True`` (default): the JIT stays on and the source is instrumented with budget
            checks. ``False``: the JIT is off and a count hook meters instead (slower, and
            independent of the instrumenter).
        preempt: at slice end (steps or time) a resume yields to the host (status
            ``preempted``) instead of tripping; the next resume continues with a fresh slice.
            ``Budget.total_steps`` is then the hard cap. Needs ``jit=True``.
        host_functions: functions the mod may call (see :mod:`moonbox.bindings`).
        value_limits: limits on values crossing from Lua to Python.
        seed: seeds the runtime's ``math.random`` (again after a replacement), so a mod's
            random numbers replay; ``None`` picks one at random. The seed used is
            :attr:`seed`.
        deterministic: ``pairs`` visits number, string and boolean keys in a fixed order
            (numbers, then strings, then booleans, each sorted), instead of an order that
            depends on the runtime's hash seed; it costs a sort per traversal. Keys that
            are tables, functions or coroutines come last, in an order that does not
            replay. ``next`` stays raw.

    Raises:
        ConfigError: an option that cannot be enforced (``preempt`` without the JIT
            instrumentation, two host functions with one name, a reserved name).
    """

    # Slots: the resume and the dispatcher read a dozen of these per call, and a slot is
    # the fastest attribute CPython has (a class this size otherwise gets a plain dict).
    __slots__ = (
        "_alarm_state", "_alloc_bytes", "_call", "_cell_name", "_clock", "_closed", "_current_limit",
        "_deadline", "_dropped", "_entries", "_env", "_excluded_s", "_excluded_start",
        "_failed", "_fixed_limit", "_generation", "_h_check_argument", "_h_close", "_h_compile",
        "_h_drop_kept", "_h_expire", "_h_extend", "_h_flat_argument", "_h_keep_function", "_pairs",
        "_h_kept_count", "_h_resume", "_h_call", "_call_limit", "_call_growth_limited",
        "_call_fresh",
        "_h_set_budget", "_h_start", "_h_start_kept",
        "_host_functions", "_limit", "_loose_limit", "_lua_budget", "_max_memory",
        "_not_enough_memory", "_poll_name", "_rt", "_running", "_runs", "_slow_name", "_start",
        "_wall_s_limit", "budget", "deterministic", "jit", "preempt", "replacements", "seed",
        "value_limits", "__weakref__", "_watchdog", "_margin_s", "_margin_now", "_late_s",
        "abandoned", "_resumer", "_h_take_end", "_h_run_addresses",
    )

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
        watchdog: Watchdog | bool = False,
    ) -> None:
        self.budget = budget or Budget()
        # With a watchdog, each resume runs on its runner thread and the host stops waiting
        # at the deadline plus the stall margin: a runtime stuck in one VM operation is
        # abandoned (see abandoned). Sandboxes used from one thread may share one.
        self._watchdog: Watchdog | None = (
            Watchdog() if watchdog is True else (watchdog or None))
        self.abandoned = False
        self._margin_s = self._margin_now = stall_margin_s(self.budget.wall_s)
        self._late_s = self.budget.wall_s + self._margin_s
        self.jit = jit
        self.preempt = preempt
        self.value_limits = value_limits or ValueLimits()
        if seed is not None and not (isinstance(seed, int) and 0 <= seed < 2**31):
            raise ConfigError("seed must be an int in [0, 2**31)")
        self.seed = secrets.randbelow(2**31) if seed is None else seed
        self.deterministic = deterministic
        if preempt and not jit:
            raise ConfigError(
                "preempt needs jit=True: the count hook of jit=False cannot yield"
            )
        # By position: the closure of host function i calls the dispatcher with i, a
        # number, which crosses from Lua faster than a name.
        self._host_functions: tuple[HostFunction, ...] = tuple(host_functions)
        # A host function may offer a lane: tried first with the arguments as they come
        # from Lua, it returns the results or None to send the call down the full path.
        # A pairs lane does the same for a call (a, t) whose flat table t crosses as its
        # pairs.
        self._entries = tuple((hf, hf.name, getattr(hf, "lane", None),
                               getattr(hf, "pairs_lane", None))
                              for hf in self._host_functions)
        names = [hf.name for hf in self._host_functions]
        for hf in self._host_functions:
            if names.count(hf.name) > 1:
                raise ConfigError(f"two host functions are named {hf.name!r}")
            if hf.name in ALLOWED_GLOBALS or hf.name in ALLOWED_LIBRARIES or hf.name == "_G":
                raise ConfigError(f"host function {hf.name!r} would shadow a standard global")
        suffix = secrets.token_hex(6)
        self._cell_name = f"__mb_n{suffix}"
        self._poll_name = f"__mb_p{suffix}"
        self._slow_name = f"__mb_s{suffix}"
        self._generation = 0
        self._runs: dict[int, Run] = {}
        self._running: Run | None = None
        # One call context, reused: a host function cannot call back into its sandbox.
        self._call = HostCall(self, None, "")
        self._closed = False
        self.replacements = 0
        self._open_runtime()

    # -- runtime lifecycle ---------------------------------------------------------------

    def _open_runtime(self) -> None:
        bound = MethodType(dispatch, self)  # the dispatcher, as a method would be
        rt, host = open_runtime(
            jit=self.jit,
            value_limits=self.value_limits,
            seed=self.seed,
            deterministic=self.deterministic,
            max_memory_bytes=self.budget.max_memory + HOST_HEADROOM_BYTES,
            dispatch=bound,
        )
        self._rt = rt
        self._h_compile = host[b"compile"]
        self._h_start = host[b"start"]
        self._h_close = host[b"close"]
        self._h_resume = host[b"resume"]
        self._h_call = host[b"call"]
        # The compiled resume of Run.call (or None), and the prelude's side of it.
        if getattr(self, "_resumer", None) is not None:
            self._resumer.close()  # the runtime it was bound to is replaced
        self._resumer = bind_resume(host, bound, self.value_limits)
        if self._resumer is not None:
            self._resumer.set_directs(*self._directs())
        self._h_take_end = host[b"take_end"]
        self._h_run_addresses = host[b"run_addresses"]
        # The allocator's limit Run.call set last (-1: none yet, or another path changed it
        # since), and whether it is the growth allowance (see _limit_calls).
        self._call_limit = -1
        self._call_growth_limited = False
        self._call_fresh = True  # the limit's heap was read by the host, not answered
        self._h_set_budget = host[b"set_budget"]
        self._h_expire = host[b"expire"]
        self._limit = self.budget.max_memory
        self._h_keep_function = host[b"keep_function"]
        self._h_start_kept = host[b"start_kept"]
        self._h_drop_kept = host[b"drop_kept"]
        self._h_kept_count = host[b"kept_count"]
        self._dropped: list[int] = []
        self._deadline = 0.0
        self._start = 0.0
        self._excluded_start = 0.0  # the resume (by its start) _excluded_s belongs to
        self._excluded_s = 0.0
        self._h_extend = host[b"extend"]
        self._h_check_argument = host[b"check_argument"]
        self._h_flat_argument = host[b"flat_argument"]
        self._pairs = table_pairs(host[b"pairs_of"], host[b"pairs_slice"], PAIRS_SLICE)
        self._lua_budget: Budget | None = None
        self._fixed_limit: int | None = None
        self._loose_limit = self.budget.max_memory + HOST_HEADROOM_BYTES
        # The meter's clock: the host reads the same one to start each resume.
        self._clock = time.monotonic if host[b"clock"] == b"monotonic" else time.process_time
        closures = rt.table()
        bound = BOUND_HOST_FUNCTIONS and not self.preempt  # (see make_host_function)
        for i, hf in enumerate(self._host_functions):
            closures[hf.name.encode()] = host[b"make_host_function"](i, hf.cost, bound)
        # The first value of a failed call's answer (the second is the message).
        self._failed = host[b"host_failed"]
        self._not_enough_memory = (self._failed, b"not enough memory")
        self._env = host[b"make_env"](ENV_SPEC, closures)
        rt.set_max_memory(self.budget.max_memory + HOST_HEADROOM_BYTES, total=True)
        self._current_limit = self.budget.max_memory + HOST_HEADROOM_BYTES
        self._generation += 1
        # The alarm makes a resume past its deadline poll at its next instruction.
        self._alarm_state = alarm_state(rt, host)
        if self._generation == 1:
            watch(self)

    def _check_open(self) -> None:
        if self._closed:
            if self.abandoned:
                raise SandboxClosed("the sandbox's runtime was stuck in one operation past its "
                                    "wall budget and was abandoned; make a new sandbox")
            raise SandboxClosed("the sandbox is closed")

    def close(self) -> None:
        """Release the runtime; later calls raise :class:`SandboxClosed`. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for run in list(self._runs.values()):
            run.status = "error" if not run.finished else run.status
            run._open = False
            run._c_co = run._c_run = 0
        self._runs.clear()
        if self._resumer is not None:
            self._resumer.close()
            self._resumer = None
        # Drop every handle into the runtime so lupa can free it now.
        for name in self.__slots__:
            if name.startswith("_h_"):
                setattr(self, name, None)
        self._rt = None  # type: ignore[assignment]
        self._alarm_state = None
        self._env = None
        self._pairs = None
        self._failed = self._not_enough_memory = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reset(self) -> None:
        """Replace the runtime with a fresh one: every chunk and run of the old one is gone."""
        self._check_open()
        for run in list(self._runs.values()):
            if not run.finished:
                run.status = "error"
            run._open = False
            run._c_co = run._c_run = 0
        self._runs.clear()
        self._open_runtime()
        self.replacements += 1

    @property
    def clock(self) -> Callable[[], float]:
        """The meter's clock, in seconds: what the wall budget runs on, and what
        :meth:`Run.call` takes its ``start`` on."""
        return self._clock

    @property
    def functions_held(self) -> int:
        """How many mod functions the host holds handles to (released ones not counted)."""
        self._check_open()
        if self._dropped:
            self._drop_handles()
        return int(self._h_kept_count())

    @property
    def memory_used_bytes(self) -> int:
        """The runtime's heap now, in bytes."""
        self._check_open()
        return int(self._rt.get_memory_used(total=True))

    # -- loading -------------------------------------------------------------------------

    def load(self, source: str | bytes, chunk: str = "=(mod)") -> Chunk:
        """Compile source text as a named chunk (``@path/to/file.lua`` or ``=name``).

        Raises:
            ScriptError: kind ``syntax``, for bytecode, a syntax error or a reserved name.
            SourceTooLarge: a source over ``MAX_SOURCE_BYTES`` (4 MiB), before any work on it.
            BudgetExceeded: kind ``memory``, the compiled chunk does not fit under the heap
                cap.
            ConfigError: a chunk name that is not ``@...`` or ``=...``.
        """
        self._check_open()
        self._loosen()
        if chunk[:1] not in ("@", "=") or chunk.startswith("=[moonbox") or len(chunk) > 512:
            raise ConfigError(
                f"chunk name {chunk!r} must start with '@' (a file) or '=' (a label)"
            )
        if isinstance(source, bytes):
            if source[:1] == b"\x1b":
                raise self._syntax("bytecode is refused: moonbox loads Lua source text only",
                                   chunk, None)
            text = source.decode("utf-8", "surrogateescape")
        else:
            text = source
        if text[:1] == "\x1b":
            raise self._syntax("bytecode is refused: moonbox loads Lua source text only",
                               chunk, None)
        if len(text) > MAX_SOURCE_BYTES:  # a str has at most as many chars as UTF-8 bytes
            raise SourceTooLarge(len(encode_text(text)), MAX_SOURCE_BYTES, chunk=chunk)
        raw = encode_text(text)
        if len(raw) > MAX_SOURCE_BYTES:
            raise SourceTooLarge(len(raw), MAX_SOURCE_BYTES, chunk=chunk)
        wrapped: bytes | None = None
        checks = 0
        # Instrumented in both modes, so reserved names are refused alike; the count-hook
        # mode then loads the source as it is.
        try:
            inst = instrument(text, cell=self._cell_name, poll=self._poll_name,
                              slow=self._slow_name)
        except ReservedNameError as exc:
            raise self._syntax(str(exc).split(": ", 1)[1], chunk, exc.line) from None
        except SourceLimitError as exc:  # never handed to the parser
            raise self._syntax(exc.message, chunk, exc.line) from None
        except (LuaTokenError, ValueError):
            inst = None  # let LuaJIT's own parser name the syntax error
        if inst is not None and self.jit:
            wrapped = encode_text(inst.source)
            checks = inst.checks
        # LuaJIT collects no garbage when an allocation fails: a heap that earlier runs
        # left full of it would refuse this chunk, and then the run it starts.
        if self._rt.get_memory_used(True) > self.budget.max_memory // 2:
            self._rt.gccollect()
        fn, err, *rest = self._compile(raw, wrapped, chunk)
        if fn is None and "not enough memory" in lua_text(err):
            self._rt.gccollect()  # garbage made meanwhile (by the compile itself): once more
            fn, err, *rest = self._compile(raw, wrapped, chunk)
        if fn is None:
            message = lua_text(err)
            if "not enough memory" in message:
                self._rt.gccollect()
                raise BudgetExceeded("memory", self.budget.max_memory,
                                     self._rt.get_memory_used(True), chunk=chunk)
            if rest and rest[0]:
                # LuaJIT accepted the source but not its instrumented form. Near one of
                # LuaJIT's limits that is the mod's to fix; anything else is a moonbox bug.
                if any(limit in message for limit in _LUAJIT_LIMITS):
                    m = POSITION.match(message.split("(", 1)[-1])
                    raise self._syntax(
                        f"{m.group(3).rstrip(')') if m else message} once instrumented: "
                        "moonbox adds up to 3 upvalues to each function and one nesting "
                        "level, and this source is at LuaJIT's limit; split the function "
                        "or nest less",
                        chunk, int(m.group(2)) if m else None,
                    )
                raise HostError(f"{chunk}: {message}")
            m = POSITION.match(message)
            if m:
                raise self._syntax(m.group(3), chunk, int(m.group(2)))
            raise self._syntax(message, chunk, None)
        if self.jit and wrapped is None:
            # The tokenizer refused what LuaJIT accepted: never run it uninstrumented.
            raise HostError(f"{chunk}: moonbox could not instrument this source")
        if self._rt.get_memory_used(True) > self.budget.max_memory:
            self._rt.gccollect()  # the texts compiled are garbage now
            used = self._rt.get_memory_used(True)
            if used > self.budget.max_memory:
                # Compiled with room for it, the chunk does not fit under the heap cap.
                fn = None
                self._rt.gccollect()
                raise BudgetExceeded("memory", self.budget.max_memory, used, chunk=chunk)
        return Chunk(chunk, checks, fn, self._generation)

    def _compile(self, raw: bytes, wrapped: bytes | None, chunk: str) -> tuple[Any, ...]:
        # lupa pushes the texts before its protected call: an allocation failing there would
        # end the process, so the limit leaves room for them above what is in use. The
        # compile itself runs protected, under that limit.
        need = 2 * (len(raw) + len(wrapped or b"")) + HOST_HEADROOM_BYTES
        room = self._rt.get_memory_used(True) + need
        raised = room > self._loose_limit
        if raised:
            self._rt.set_max_memory(room, True)
            self._current_limit = room
        try:
            result = self._h_compile(raw, wrapped, chunk.encode(), self._env)
        except lua.LuaMemoryError:
            result = (None, b"not enough memory to compile this source")
        finally:
            if raised:
                self._rt.set_max_memory(self._loose_limit, True)
                self._current_limit = self._loose_limit
        return result if isinstance(result, tuple) else (result, None)

    @staticmethod
    def _syntax(message: str, chunk: str, line: int | None) -> ScriptError:
        # LuaJIT quotes the token it stopped at, all of it: bounded as runtime errors are.
        if len(message) > MAX_MESSAGE_BYTES:
            message = message[:MAX_MESSAGE_BYTES] + "..."
        return ScriptError(message, chunk=chunk, line=line, kind="syntax")

    # -- running -------------------------------------------------------------------------

    def start(self, source: str | bytes | Chunk | FunctionHandle, chunk: str = "=(mod)", *,
              worker_resume: bool = False) -> Run:
        """Compile (unless given a :class:`Chunk`) and create a run; nothing runs yet.

        Given a :class:`FunctionHandle`, the run calls that function: the first resume's
        arguments are its arguments.

        ``worker_resume`` is for a host's own library chunk that runs a mod's functions in
        coroutines of its own (the engine's): the chunk gets the first resume's first
        argument, then a resume for those coroutines that checks less than
        ``coroutine.resume`` must check for a mod (``resume(co, fn, a, b, c)``, four values
        back at most), and (unless the sandbox is preemptible) a protected call for running
        a mod's function on the chunk's own run, ``call(fn, a, b, c) -> ok, first result``
        (a trip re-raised), and the runtime's ``coroutine.running``, which tells the chunk
        its own run's coroutine (a mod's is told the main thread). Never for a mod's own
        chunk: it could resume any coroutine.

        Raises:
            ScriptError: kind ``syntax`` (see :meth:`load`).
            SandboxClosed: the chunk or handle belongs to a closed or replaced runtime, or
                the handle was released.
            ConfigError: the handle belongs to another sandbox.
        """
        self._check_open()
        self._loosen()
        if self._dropped:
            self._drop_handles()
        if isinstance(source, FunctionHandle):
            compiled = self._handle_chunk(source)
            started = self._h_start_kept(source._key)
            if started is None:
                raise SandboxClosed(f"the function at {source.where} was released")
        else:
            compiled = source if isinstance(source, Chunk) else self.load(source, chunk)
            if compiled._generation != self._generation:
                raise SandboxClosed(f"{compiled.name} was compiled by a runtime that has been "
                                    "replaced; load it again")
            # A preemptible sandbox's slice ends yield from its runs' coroutines: the
            # chunk keeps every mod function in coroutines of its own there.
            started = self._h_start(compiled._fn, worker_resume,
                                    worker_resume and not self.preempt)
        run_id = int(started)
        run = Run(self, compiled, run_id)
        self._runs[run_id] = run
        return run

    def _handle_chunk(self, handle: FunctionHandle) -> Chunk:
        if handle.sandbox is not self:
            raise ConfigError(f"the function at {handle.where} belongs to another sandbox")
        if not handle.valid:
            raise SandboxClosed(
                f"the function at {handle.where} was released or its runtime replaced"
            )
        return Chunk(handle.chunk, 0, handle._key, handle._generation)

    def _directs(self) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
        # What the compiled crossing calls itself, by index (HostFunction.make_direct):
        # for plain calls, and for calls (a, t) whose flat table crossed as its pairs.
        makers = [getattr(hf, "make_direct", None) for hf in self._host_functions]

        def made(pairs: bool) -> tuple[Any, ...] | None:
            directs = tuple(None if make is None else make(self, pairs) for make in makers)
            return directs if any(d is not None for d in directs) else None

        return made(False), made(True)

    def _stall_at(self) -> float:
        """When the host stops waiting for the running resume (the watchdog reads it)."""
        return self._deadline + self._margin_now

    def _abandon(self) -> None:
        """The running resume is stuck in one VM operation past its deadline and margin:
        nothing of the host touches this runtime again. Its host functions refuse, and the
        sandbox closes; the runner thread holds the runtime until the operation returns."""
        self.abandoned = True
        if self._resumer is not None:
            self._resumer.set_directs(None, None)  # no lane of the host answers either
        self._entries = AbandonedEntries()  # type: ignore[assignment]
        self._running = None
        self.close()

    def _excluded_in_resume(self) -> float:
        """Seconds excluded from the running resume's wall budget so far."""
        if self._excluded_start != self._start:
            self._excluded_start, self._excluded_s = self._start, 0.0
        return self._excluded_s

    def _drop_handles(self) -> None:
        dropped, self._dropped = self._dropped, []
        for key in dropped:
            self._h_drop_kept(key)

    def run(
        self,
        source: str | bytes | Chunk | FunctionHandle,
        chunk: str = "=(mod)",
        *,
        args: Sequence[Any] = (),
        max_resumes: int = 1000,
    ) -> Outcome:
        """Compile and run a chunk to its end; each resume after a yield gets a fresh budget.

        Script faults, syntax errors included, come back as the outcome's ``error``.
        """
        try:
            run = self.start(source, chunk)
        except ScriptError as exc:
            return Outcome("budget" if isinstance(exc, BudgetExceeded) else "error", (), exc)
        return run.finish(*args, max_resumes=max_resumes)

    def _close_run(self, run: Run) -> None:
        run._open = False
        run._c_co = run._c_run = 0  # before the run's coroutine and figures may be freed
        if self._runs.pop(run._id, None) is not None and run._generation == self._generation:
            self._h_close(run._id)

    def _loosen(self) -> None:
        """Give the host headroom above the mod's limit before it works in the runtime:
        lupa's pushes and references are unprotected allocations, and one failing there
        would abort the process."""
        if self._current_limit != self._loose_limit:
            self._rt.set_max_memory(self._loose_limit, True)
            self._current_limit = self._loose_limit

    def _limit_calls(self, heap_bytes: int, fresh: bool = False) -> None:
        """The allocator's limit for the next :meth:`Run.call`, from the heap it starts
        with: the growth allowance rounded up to 64 KiB, and 64 KiB more (the prelude tells
        the host the heap only when it moves to another 64 KiB block, so the heap a call
        starts from may be up to 64 KiB above this one: the allocator must never stop a
        call short of its allowance; the meter's own check is exact), or the heap cap."""
        limit = self._fixed_limit
        growth_limited = False
        if limit is None:
            limit = ((int(heap_bytes) + self._alloc_bytes) | 0xFFFF) + 1 + 0x10000
            growth_limited = limit < self._max_memory
            if not growth_limited:
                limit = self._max_memory
        self._limit = limit
        self._call_growth_limited = growth_limited
        if self._current_limit != limit:
            self._rt.set_max_memory(limit, True)
            self._current_limit = limit
        self._call_limit = limit
        # Read by the host (fresh): the prelude's note of the heap's block may be stale, and
        # the next call's end answers the heap whatever block it is in (see runs.lua).
        self._call_fresh = fresh

    def _send_budget(self, budget: Budget) -> None:
        total = -1 if budget.total_steps is None else budget.total_steps
        self._h_set_budget(budget.steps, budget.wall_s, total, self.preempt,
                           budget.alloc_bytes, budget.max_memory)
        self._lua_budget = budget
        # The budget's figures the steady resume reads, copied: attribute reads on a
        # pydantic model take CPython's slow path (the class defines __getattr__).
        self._wall_s_limit = budget.wall_s
        self._margin_s = stall_margin_s(budget.wall_s)
        self._late_s = budget.wall_s + self._margin_s
        self._alloc_bytes = budget.alloc_bytes
        self._max_memory = budget.max_memory
        cap = budget.max_memory
        self._fixed_limit = cap if budget.alloc_bytes >= cap else None
        self._loose_limit = cap + HOST_HEADROOM_BYTES
        self._loosen()


set_up_compiled_calls(Run, Sandbox)
