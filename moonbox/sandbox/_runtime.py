"""A sandbox's runtime: a hardened LuaJIT runtime with the prelude run in it."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

from ._environment import ALLOWED_GLOBALS, ALLOWED_LIBRARIES
from ._lua import lua
from ._marshal import ValueLimits, to_lua

# jit=False mode: the count hook fires every HOOK_INSTRUCTIONS VM instructions and charges
# HOOK_STEPS steps: one step per two instructions, the cost of the tightest loop iteration
# (ADDVN + FORL), so the hook never counts fewer steps than the instrumented checks would.
HOOK_INSTRUCTIONS = 1000
HOOK_STEPS = 500

# The most values a table's pairs cross in, per call, when the host copies it out (each
# call's values arrive as one tuple; Lua's C stack holds at most ~8,000).
PAIRS_SLICE = 4096
MAX_MESSAGE_BYTES = 4096
# Calls nested through library functions that call back into Lua (gsub, sort, tostring,
# string.format, coroutine resumes): the same bound as LuaJIT's own C-call limit.
MAX_C_DEPTH = 200
# What one step of a guarded library function buys (docs/guards.md): about 64 bytes or
# values copied, or 4 comparisons of table.sort — the same order of time as a step of
# metered Lua code.
WORK_PER_STEP = 64
COMPARISONS_PER_STEP = 4
# table.sort of more values than this runs a metered sort, which the time budget can stop.
SORT_NATIVE_MAX = 4096
# Pattern calls: the native matcher runs when its worst case, (subject length + 1) to the
# power of the pattern's repeating items + 1, is at most this many matcher steps, charged
# at PATTERN_OPS_PER_STEP a step; beyond it the metered matcher (patterns.lua) runs.
NATIVE_PATTERN_OPS = 100_000
PATTERN_OPS_PER_STEP = 256

# Room above the heap cap for the host's own work between resumes (copying results out,
# building error descriptions), so that work never meets an out-of-memory error.
HOST_HEADROOM_BYTES = 4 << 20
# A host call from Lua needs this much room below the heap cap, or it is a memory trip.
HOST_CALL_MARGIN_BYTES = 256 << 10

PRELUDE_NAME = b"=[moonbox prelude]"
# The metered matcher's chunk: Lua that runs on the mod's behalf, so the count hook and the
# alarm may poll and trip inside it as in the mod's own code (inside the prelude they wait
# for its next charge, and a long scan of the matcher's ran seconds past its budget).
PATTERNS_NAME = b"=[moonbox patterns]"
# The prelude's files, in the order they are joined into its one chunk: each sees the
# locals of those before it (prelude.lua says why they share locals, not a table).
PRELUDE_PARTS = (
    "prelude.lua",  # the head: its arguments, the globals it captures, the host's handle
    "meter.lua",  # the clock, the meter and the count hook of jit=False
    "environment.lua",  # a mod's environment, built from the allowlist
    "protected.lua",  # pcall, xpcall and the coroutine functions: a trip is re-raised
    "guards.lua",  # library functions charged for their work, ids in place of addresses
    "replay.lua",  # the seeded math.random and the ordered pairs
    "values.lua",  # the check of values that cross to Python
    "dispatch.lua",  # the host functions' closures and the checks of their arguments
    "runs.lua",  # loading and resuming; last: it seals the globals and returns the handle
)
# Runs the prelude: compiled once per process to bytecode (the host's own, never a mod's),
# so a new sandbox loads it in ~20 µs instead of parsing it again in ~500 µs.
_LOADER = b"""
local code, name, config, dispatch, patterns = ...
local f = assert(load(code, name, "b"))
return f(config, dispatch, patterns)
"""


@functools.cache
def _prelude_bytecode() -> tuple[bytes, bytes]:
    """The prelude and the metered pattern functions, compiled once per process. Both carry
    the prelude's chunk name: the count hook of jit=False treats them as host code."""
    files = resources.files("moonbox.sandbox")
    prelude = b"".join(files.joinpath(part).read_bytes() for part in PRELUDE_PARTS)
    patterns = files.joinpath("patterns.lua").read_bytes()
    rt = lua.LuaRuntime(register_eval=False, register_builtins=False, encoding=None)
    dump = rt.eval("function(src, name) return string.dump(assert(load(src, name, 't'))) end")
    return bytes(dump(prelude, PRELUDE_NAME)), bytes(dump(patterns, PATTERNS_NAME))


# The allowlist as the prelude reads it: "name ... lib:field,field ...".
ENV_SPEC = " ".join(
    [*ALLOWED_GLOBALS, *(f"{lib}:{','.join(fields)}" for lib, fields in ALLOWED_LIBRARIES.items())]
).encode()


class _Deny:
    """Attribute access on Python objects from Lua: always refused."""

    def __call__(self, obj: object, name: object, *value: object) -> None:
        raise AttributeError("attribute access is disabled in moonbox")


_DENY = _Deny()

# The compiled allocator (see _heap.c), unless it was not built or HEAP_ENV says "lupa".
HEAP_ENV = "MOONBOX_SANDBOX_HEAP"
_heap: Any = None
if os.environ.get(HEAP_ENV) != "lupa":
    try:
        from ._heap import install as _heap_install
        from ._heap import installed as _heap_installed
    except ImportError:  # no C compiler where moonbox was installed: lupa's allocator
        pass
    else:
        _heap = (_heap_install, _heap_installed)


def compiled_heap() -> bool:
    """Whether new runtimes allocate through the compiled allocator (see ``_heap.c``),
    under the same heap cap as lupa's."""
    return _heap is not None


def _with_thread(rt: Any, use: Callable[[int], bool]) -> bool:
    # A live coroutine's address (tostring shows it) reaches the runtime's shared state.
    thread, text = rt.execute("local co = coroutine.create(function() end) "
                              "return co, tostring(co)")
    try:
        return use(int(text.rpartition(b"0x")[2], 16))
    except ValueError:
        return False
    finally:
        del thread


def _install_heap(rt: Any) -> bool:
    """Give a runtime just created with max_memory the compiled allocator; whether it has
    it. lupa's count of used bytes and its limit stay the runtime's accounting."""
    if _heap is None:
        return False
    try:
        return _with_thread(rt, lambda address: bool(_heap[0](lua.__file__, address, rt)))
    except TypeError:  # a build of the module older than its source: lupa's allocator
        return False


# The compiled resume (see _resume.c), unless it was not built or RESUME_ENV says "lua";
# its crossing of host calls, unless CROSSING_ENV says "lua".
RESUME_ENV = "MOONBOX_SANDBOX_RESUME"
CROSSING_ENV = "MOONBOX_SANDBOX_CROSSING"
_resume: Any = None
if os.environ.get(RESUME_ENV) != "lua":
    try:
        from ._resume import bind as _resume_bind
        from ._resume import call as _resume_call
        from ._resume import set_up as _resume_set_up
    except ImportError:  # no C compiler where moonbox was installed: the prelude's resume
        pass
    else:
        _resume = (_resume_bind, _resume_call, _resume_set_up)


def bind_resume(host: Any, dispatch: Any, value_limits: ValueLimits) -> Any:
    """The compiled resume of a runtime just opened (its prelude's host table), or None
    where there is none: every call then takes the prelude's host.call. It also gives the
    host functions made after it the compiled crossing to ``dispatch`` (the sandbox's
    dispatcher), which walks a flat table argument itself within ``value_limits`` (the
    runtime's), and the prelude the way to take what only lupa converts."""
    if _resume is None:
        return None
    crossing = None if os.environ.get(CROSSING_ENV) == "lua" else dispatch
    holder = int(host[b"call_end_address"].rpartition(b"0x")[2], 16)
    resumer = _resume[0](lua.__file__, holder, int(host[b"meter_address"]), lua.LuaMemoryError,
                         lua.LuaError, crossing, host[b"host_failed"],
                         value_limits.max_items, value_limits.max_bytes)
    if resumer is not None and crossing is not None:
        host[b"set_c_take"](resumer.take)
    return resumer


def compiled_resume() -> bool:
    """Whether runs are resumed through the compiled resume (see ``_resume.c``)."""
    return _resume is not None


def set_up_compiled_calls(run: type, sandbox: type) -> None:
    """Tell the compiled resume the classes whose slots its Run.call reads (the one other
    compiled modules call, through its capsule: see _resume.h)."""
    if _resume is not None:
        _resume[2](run, sandbox, time.monotonic, time.process_time)


def resume_call() -> Any:
    """The compiled resume's call (``_resume.call``), or None."""
    return None if _resume is None else _resume[1]


def uses_compiled_heap(rt: Any) -> bool:
    """Whether the runtime allocates through the compiled allocator."""
    if _heap is None:
        return False
    return _with_thread(rt, lambda address: bool(_heap[1](lua.__file__, address)))


def open_runtime(
    *,
    jit: bool,
    value_limits: ValueLimits,
    seed: int,
    deterministic: bool,
    max_memory_bytes: int,
    dispatch: Callable[..., Any],
) -> tuple[Any, Any]:
    """A new runtime with Python eval, builtins and attribute access off, and the prelude
    run in it: the runtime and the prelude's host table (its entry points).

    ``dispatch`` is the one Python object the runtime holds: the prelude's host functions
    call it with their index and arguments.
    """
    rt = lua.LuaRuntime(
        register_eval=False,
        register_builtins=False,
        encoding=None,
        unpack_returned_tuples=True,
        attribute_handlers=(_DENY, _DENY),
        max_memory=max_memory_bytes,
    )
    _install_heap(rt)
    config = to_lua(
        rt,
        {
            "jit": jit,
            "hook_instructions": HOOK_INSTRUCTIONS,
            "hook_steps": HOOK_STEPS,
            "max_message_bytes": MAX_MESSAGE_BYTES,
            "max_c_depth": MAX_C_DEPTH,
            "work_per_step": WORK_PER_STEP,
            "comparisons_per_step": COMPARISONS_PER_STEP,
            "sort_native_max": SORT_NATIVE_MAX,
            "native_pattern_ops": NATIVE_PATTERN_OPS,
            "pattern_ops_per_step": PATTERN_OPS_PER_STEP,
            "host_call_margin_bytes": HOST_CALL_MARGIN_BYTES,
            "value_max_depth": value_limits.max_depth,
            "value_max_items": value_limits.max_items,
            "value_max_bytes": value_limits.max_bytes,
            "pairs_slice": PAIRS_SLICE,
            "seed": seed,
            "deterministic": deterministic,
        },
    )
    prelude, patterns = _prelude_bytecode()
    host = rt.execute(_LOADER, prelude, PRELUDE_NAME, config, dispatch, patterns)
    return rt, host
