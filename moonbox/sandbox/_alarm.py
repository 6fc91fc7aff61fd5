"""The alarm: a host thread that makes a resume past its deadline poll the clock at once.

The meter reads the clock every K checks, with K adapted up to 2^17 to what a step has
cost so far. When steps suddenly cost far more (a cheap loop first, then one whose every
step is one long operation), a whole window of K steps runs before the next poll: a
0.2 s wall budget once ended tens of seconds late. The alarm bounds that without touching
the checks: one daemon thread per process looks at every sandbox with a resume running,
and for one past its deadline (plus ALARM_GRACE_S) it does two things. It writes POLL_NOW
into the meter's poll flag, which every instrumented check compares the step window with,
so the next check, interpreted or in a loop the JIT compiled whole, enters the slow path,
polls the clock and trips. And it arms the runtime's count hook for the very next VM
instruction, through LuaJIT's ``lua_sethook``, which LuaJIT lets a signal handler or
another thread call: the hook (meter.lua) covers the prelude's own code, which has no
checks. Both read the meter's own clock and deadline: past it, the resume trips on time; a
stale alarm, for a resume that ended meanwhile, costs one poll and no step.

The thread wakes every ALARM_TICK_S while any sandbox exists; it holds the interpreter lock
for a few microseconds each time, and nothing runs on a resume's own path.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
import time
import weakref
from typing import Any

from ._lua import lua

__all__ = ["ALARM_GRACE_S", "ALARM_TICK_S", "watch"]

ALARM_TICK_S = 0.005
"""How often the thread looks at the running resumes."""
ALARM_GRACE_S = 0.005
"""How far past its deadline a resume may be before the alarm sounds: the meter's own poll
comes first in ordinary code (it lands within about a millisecond)."""
PREEMPT_GRACE_S = 0.05
"""The grace of a preemptible resume: a hook cannot yield, so an alarm ends the slice in a
time trip rather than a preemption, and it waits longer for the meter's own poll."""

POLL_NOW = 0x7FFFFFFF
"""What the alarm writes into the poll flag (meter.lua's cell[1]): above any step window, so
the next instrumented check enters the slow path."""

_LUA_MASKCOUNT = 8


@functools.cache
def _hook_api() -> tuple[Any, int] | None:
    """``lua_sethook`` and the C hook function of ``debug.sethook``, or None where the
    LuaJIT library does not export them (then there is no alarm)."""
    try:
        lib = ctypes.CDLL(lua.__file__)
        sethook, gethook = lib.lua_sethook, lib.lua_gethook
    except (OSError, AttributeError):
        return None
    sethook.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    sethook.restype = ctypes.c_int
    gethook.argtypes = [ctypes.c_void_p]
    gethook.restype = ctypes.c_void_p
    # debug.sethook installs one C function that calls the Lua hook: read it from a
    # runtime of our own while a hook is set there.
    rt = lua.LuaRuntime(register_eval=False, register_builtins=False)
    state = rt.execute(
        "local co = coroutine.create(function() end) "
        "debug.sethook(function() end, '', 1000000) "
        "return co, string.format('%p', co)")
    hookf = gethook(int(state[1], 16))
    rt.execute("debug.sethook()")
    return (sethook, hookf) if hookf else None


class _Alarm:
    __slots__ = ("_refs", "_lock", "_wake", "_thread", "_pid")

    def __init__(self) -> None:
        # id -> weak reference: a sandbox leaves when it is collected. (A scan of weak
        # references costs ~60 ns a sandbox; a WeakSet's, three times that.)
        self._refs: dict[int, weakref.ref[Any]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0  # the process the thread runs in (a forked child has none)

    def watch(self, sandbox: Any) -> None:
        key, refs = id(sandbox), self._refs

        def gone(_: object, key: int = key) -> None:
            refs.pop(key, None)

        with self._lock:
            refs[key] = weakref.ref(sandbox, gone)
            if self._thread is None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._serve, name="moonbox-alarm", daemon=True)
                self._thread.start()
            self._wake.set()

    def _serve(self) -> None:
        api = _hook_api()
        if api is None:
            return
        sethook, hookf = api
        wake, refs, clock = self._wake, self._refs, time.perf_counter
        while True:
            if not refs:
                wake.wait()  # no sandbox left: sleep until one is made
                wake.clear()
            started = clock()
            for ref in list(refs.values()):
                sb = ref()
                if sb is None or sb._running is None:
                    continue
                try:
                    state = sb._alarm_state
                    grace = PREEMPT_GRACE_S if sb.preempt else ALARM_GRACE_S
                    if state is None or sb._clock() <= sb._deadline + grace:
                        continue
                    # `state` holds the runtime: its Lua state stays valid meanwhile.
                    address, flag = state[1], state[2]
                    ctypes.c_int32.from_address(flag).value = POLL_NOW
                    sethook(address, hookf, _LUA_MASKCOUNT, 1)
                except Exception:  # noqa: BLE001, S112 - a sandbox closing meanwhile
                    continue
            sb = state = None  # hold no sandbox while asleep
            # The scan stays under ~2% of a core, however many sandboxes there are.
            time.sleep(max(ALARM_TICK_S, 50 * (clock() - started)))


_ALARM = _Alarm()


def watch(sandbox: Any) -> None:
    """Watches ``sandbox`` from now on (it is held weakly): while it runs a resume past its
    deadline, the alarm arms its runtime's hook (module docstring). The sandbox provides
    ``_running`` (None between resumes), ``_deadline`` on ``_clock``, ``preempt``, and
    ``_alarm_state``: None, or its runtime, the address of a Lua state of that runtime,
    and the address of the meter's poll flag."""
    _ALARM.watch(sandbox)


def alarm_state(rt: Any, host: Any) -> tuple[Any, int, int]:
    """A runtime's ``_alarm_state`` from the prelude's host table."""
    return (rt, int(host[b"alarm_address"], 16), int(host[b"alarm_flag"]))
