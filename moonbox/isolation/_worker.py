"""The worker process: sandboxes of one or more mods, driven by the host over two pipes.

Started by the host as ``python -m moonbox.isolation._worker READ_FD WRITE_FD LIMIT``. It
sets its address-space limit (``LIMIT`` bytes, 0 for none) before anything else is imported,
so the Lua runtimes and everything they allocate live under it. A mod reaches the host only
through proxies: each host function of a mod sends a ``call`` frame and waits for the host's
answer; the host validates and runs the call. The process itself is a crash and resource
boundary, not a privilege boundary: it runs as the host's user, in ``/``, with an
allowlisted environment (see docs/isolation.md).

A function the mod passes to a host function that takes functions stays here: the worker
keeps it under its key and sends a reference; the host starts runs of it by key
(``start_fn``, ``run`` with a key) and lets it go (``drop_fns``).

File descriptor 1 is pointed at stderr, so nothing written to stdout can break the frames.

Test-only hooks: with ``MOONBOX_ISOLATION_TEST_HOOKS=1`` in its environment (which the host
sets only when asked to, see ``IsolatedSandbox(_test_hooks=True)``), every sandbox also gets
``test_alloc(bytes)`` (memory the Lua allocator cannot see), ``test_sleep(seconds)`` (a C
call the meter cannot interrupt), ``test_abort()`` and ``test_segfault()``.
"""

from __future__ import annotations

import os
import resource
import sys
from typing import Any

TEST_HOOKS_ENV = "MOONBOX_ISOLATION_TEST_HOOKS"


def _limit_memory(limit_bytes: int) -> None:
    if limit_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


class _Proxy:
    """A host function of the mod, run by the host: one ``call`` frame, one answer."""

    __slots__ = ("name", "cost", "accepts_functions", "_worker", "_sid")

    def __init__(self, worker: _Worker, sid: int, name: str, cost: int,
                 accepts_functions: bool) -> None:
        self.name = name
        self.cost = cost
        # The sandbox hands the mod's functions over as handles; they cross as references.
        self.accepts_functions = accepts_functions
        self._worker = worker
        self._sid = sid

    def __call__(self, call: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        worker = self._worker
        if self.accepts_functions:
            args = worker.references(self._sid, args)
        return worker.call_host(self.name, args, call)


class _TestHook:
    """A worker-local function for the isolation tests (never offered outside them)."""

    cost = 1

    def __init__(self, name: str, fn: Any) -> None:
        self.name = name
        self._fn = fn

    def __call__(self, call: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return self._fn(*args)


def _test_alloc(size: float) -> tuple[Any, ...]:
    from ._protocol import EXIT_OUT_OF_MEMORY

    try:
        block = bytearray(int(size))
        block[::4096] = b"\x01" * len(block[::4096])  # touch every page
    except MemoryError:
        os._exit(EXIT_OUT_OF_MEMORY)
    _HELD.append(block)
    return (len(block),)


def _test_sleep(seconds: float) -> tuple[Any, ...]:
    import time

    time.sleep(float(seconds))
    return ()


def _test_segfault() -> tuple[Any, ...]:
    import ctypes

    ctypes.string_at(0)
    return ()


def _test_abort() -> tuple[Any, ...]:
    os.abort()


_HELD: list[bytearray] = []


def _exact_copy(value: Any, lua_type: Any, depth: int = 0) -> Any:
    """A checked Lua value as plain data, as ``to_python`` copies it except that a string
    that is not UTF-8 stays ``bytes`` (msgpack carries it as bin), so a state snapshot
    restores byte for byte and no two keys merge into one."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    kind = lua_type(value)
    if kind != "table":
        return f"<{kind}>"
    items = list(value.items())
    n = len(items)
    if n and all(type(k) is int and 1 <= k <= n for k, _ in items):
        listed: list[Any] = [None] * n
        for k, v in items:
            listed[k - 1] = _exact_copy(v, lua_type, depth + 1)
        return listed
    return {_exact_copy(k, lua_type, depth + 1): _exact_copy(v, lua_type, depth + 1)
            for k, v in items}


def _to_restore(value: Any) -> Any:
    """A snapshot as the sandbox's ``to_lua`` takes it: ``bytes`` (keys too) become text
    with their bytes escaped (``surrogateescape``), which ``to_lua`` writes back exactly."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, list):
        return [_to_restore(v) for v in value]
    if isinstance(value, dict):
        return {_to_restore(k): _to_restore(v) for k, v in value.items()}
    return value


def _has_replacement(value: Any) -> bool:
    """The copy holds U+FFFD: a string that was not UTF-8 may have been replaced."""
    if isinstance(value, str):
        return "\ufffd" in value
    if isinstance(value, list):
        return any(_has_replacement(v) for v in value)
    if isinstance(value, dict):
        return any(_has_replacement(k) or _has_replacement(v) for k, v in value.items())
    return False


_SCALARS = (bool, int, float)


class _Kept:
    """What the worker keeps of a mod's state global: its name, a raw reader of the mod's
    environment and the chunks that copy it out and write it back."""

    __slots__ = ("name", "key", "rawget", "get", "put")

    def __init__(self, sb: Any, name: str) -> None:
        self.name = name
        self.key = name.encode()
        # The runtime's own rawget (never the mod's): reads the global without running any
        # metamethod of the mod.
        self.rawget = sb._rt.eval("rawget")
        self.get = sb.load(f"return {name}", "=(state)")
        self.put = sb.load(f"{name} = ...", "=(state)")


class _Worker:
    def __init__(self, read_fd: int, write_fd: int) -> None:
        from .._errors import BindingError, MoonboxError, ScriptError
        from ..sandbox import Budget, FunctionHandle, Sandbox, ValueLimits
        from . import _protocol

        self._BindingError = BindingError
        self._MoonboxError = MoonboxError
        self._ScriptError = ScriptError
        self._FunctionHandle = FunctionHandle
        self._Budget = Budget
        self._Sandbox = Sandbox
        self._ValueLimits = ValueLimits
        self.p = _protocol
        self.reader = _protocol.FrameReader(read_fd, spin_s=_protocol.spin_window(),
                                            sets_blocking=True)
        self.writer = _protocol.FrameWriter(write_fd)
        self.sandboxes: dict[int, Any] = {}
        self.chunks: dict[tuple[int, int], Any] = {}
        self.runs: dict[tuple[int, int], Any] = {}
        self.functions: dict[tuple[int, int], Any] = {}
        self.kept: dict[int, _Kept] = {}
        self.budgets: dict[tuple[Any, ...], Any] = {}
        self.test_hooks = os.environ.get(TEST_HOOKS_ENV) == "1"
        self.ops = {
            "new": self.op_new,
            "load": self.op_load,
            "run": self.op_run,
            "start": self.op_start,
            "start_fn": self.op_start_fn,
            "resume": self.op_resume,
            "close_run": self.op_close_run,
            "drop": self.op_drop,
            "drop_fns": self.op_drop_fns,
            "restore": self.op_restore,
            "unload": self.op_unload,
            "memory": self.op_memory,
        }

    # -- frames --------------------------------------------------------------------------

    def serve(self) -> None:
        """Answer requests until the host closes the pipe."""
        exchange, writer, frame, handle = (self.reader.exchange, self.writer,
                                           self.writer.frame, self.handle)
        self._warm_up()
        data: bytes | None = frame(["ready", os.getpid()])
        while True:
            try:
                request = exchange(writer, data)  # the last answer, then the next request
            except self.p.FrameError:
                return
            answer = handle(request)
            data = None if answer is None else frame(answer)

    def _warm_up(self) -> None:
        """Pay the first sandbox's one-time costs (compiling the instrumenter's patterns,
        the runtime's first allocations) before saying ready: a spare worker then takes
        over a lost one's mods as fast as a worker that has run before."""
        sb = self._Sandbox(self._Budget())
        try:
            sb.run(sb.load("local t = {} for i = 1, 8 do t[i] = tostring(i) end "
                           "return #table.concat(t)", "=(warm-up)"))
        finally:
            sb.close()

    def handle(self, request: list[Any]) -> list[Any] | None:
        try:
            if request[0] == "resume":  # every handler call of the engine: no table, no slice
                return self.op_resume(request[1], request[2], request[3], request[4])
            return self.ops[request[0]](*request[1:])  # type: ignore[no-any-return]
        except MemoryError:
            os._exit(self.p.EXIT_OUT_OF_MEMORY)
        except self._ScriptError as exc:
            return ["script", self.p.encode_error(exc)]
        except self._MoonboxError as exc:
            return ["fail", type(exc).__name__, str(exc)]
        except KeyError:
            # A sandbox, chunk, run or function this worker does not hold (dropped, or
            # never made here): the host's view is stale.
            return ["fail", "SandboxClosed", "this worker no longer holds what the request "
                    "names (it was dropped, or lost with an earlier worker)"]

    def call_host(self, name: str, args: tuple[Any, ...], call: Any) -> tuple[Any, ...]:
        writer = self.writer
        data: bytes | None = writer.frame(["call", name, args])
        while True:
            reply = self.reader.exchange(writer, data)
            kind = reply[0]
            if kind == "ret":
                if len(reply) > 2:
                    self._exclude(call, reply[2])
                return tuple(reply[1])
            if kind == "err":
                if len(reply) > 3:
                    self._exclude(call, reply[3])
                raise self._BindingError(reply[1], reason=reply[2])
            # A host function serving this call ran another mod of this worker.
            answer = self.handle(reply)
            data = None if answer is None else writer.frame(answer)

    @staticmethod
    def _exclude(call: Any, seconds: float) -> None:
        """Host work the host excluded from the resume's wall budget (an approval): the
        worker's own deadline moves by as much, as ``HostCall.excluded_time`` does in
        process."""
        sb = call.sandbox
        if seconds > 0 and sb is not None and sb._running is not None:
            sb._excluded_in_resume()
            sb._excluded_s += seconds
            sb._deadline += seconds
            sb._h_extend(seconds)

    def references(self, sid: int, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The arguments with each of the mod's functions kept here and sent as a
        reference."""
        if not any(isinstance(a, self._FunctionHandle) for a in args):
            return args
        out = []
        for value in args:
            if isinstance(value, self._FunctionHandle):
                self.functions[(sid, value._key)] = value
                value = self.p.function_ext(value._key, value.chunk, value.line)
            out.append(value)
        return tuple(out)

    def send_tick(self) -> None:
        self.writer.send(["tick"])

    def _budget(self, data: dict[str, Any] | None) -> Any:
        if data is None:
            return None
        key = tuple(sorted(data.items()))
        budget = self.budgets.get(key)
        if budget is None:
            if len(self.budgets) > 64:
                self.budgets.clear()
            budget = self.budgets[key] = self._Budget(**data)
        return budget

    # -- operations ----------------------------------------------------------------------

    def op_new(self, sid: int, config: dict[str, Any]) -> list[Any]:
        if sid in self.sandboxes:  # made again (its runtime was replaced): start clean
            self.op_drop(sid)
        functions: list[Any] = [_Proxy(self, sid, name, cost, bool(takes))
                                for name, cost, takes in config["functions"]]
        if self.test_hooks:
            functions += [_TestHook("test_alloc", _test_alloc),
                          _TestHook("test_sleep", _test_sleep),
                          _TestHook("test_abort", _test_abort),
                          _TestHook("test_segfault", _test_segfault)]
        sb = self._Sandbox(
            self._Budget(**config["budget"]),
            jit=config["jit"],
            preempt=config["preempt"],
            host_functions=functions,
            value_limits=self._ValueLimits(**config["value_limits"]),
            seed=config["seed"],
            deterministic=config["deterministic"],
        )
        self.sandboxes[sid] = sb
        state = config["state_global"]
        if state is not None:
            self.kept[sid] = _Kept(sb, state)
        return ["ok"]

    def op_load(self, sid: int, cid: int, source: str | bytes, name: str) -> list[Any]:
        chunk = self.sandboxes[sid].load(source, name)
        self.chunks[(sid, cid)] = chunk
        return ["ok", chunk.checks]

    def _snapshot(self, sid: int, outcome: Any) -> Any:
        """``[value]`` after an ok resume of a mod that keeps state, ``None`` when no
        snapshot is taken, or a string saying why none could be."""
        kept = self.kept.get(sid)
        if kept is None or outcome[0] not in ("done", "yielded", "preempted"):
            return None
        sb = self.sandboxes[sid]
        sb._loosen()  # the host's work in the runtime gets its headroom
        value = kept.rawget(sb._env, kept.key)
        if value is None or type(value) in _SCALARS:
            return [value]  # nothing to copy: no second run
        got = sb.run(kept.get)  # checked against the value limits like any result
        if got.status != "done":
            return f"the state in global {kept.name!r} could not be copied: {got.error}"
        value = got.value
        if _has_replacement(value):
            # The copy decoded strings as text: copy again from the runtime, keeping bytes.
            from ..sandbox._lua import lua

            value = _exact_copy(kept.rawget(sb._env, kept.key), lua.lua_type)
        return [value]

    def op_run(self, sid: int, cid: int | None, source: str | bytes | None, name: str,
               args: list[Any], max_resumes: int, budget: dict[str, Any] | None,
               fn: int | None = None) -> list[Any]:
        sb = self.sandboxes[sid]
        b = self._budget(budget)
        if fn is not None:
            chunk = self.functions[(sid, fn)]
        else:
            chunk = sb.load(source, name) if cid is None else self.chunks[(sid, cid)]
        run = sb.start(chunk)
        try:
            outcome = run.resume(*args) if b is None else run.resume(*args, budget=b)
            count = 1
            steps, peak, wall = outcome.stats
            while outcome.status in ("yielded", "preempted"):
                if count >= max_resumes:
                    err = self._ScriptError(f"still yielding after {max_resumes} resumes; "
                                            "finish within fewer", chunk=run.chunk.name)
                    outcome = outcome._replace(status="error", values=(), error=err)
                    break
                self.send_tick()  # each resume has its own wall budget: the host's watchdog too
                outcome = run.resume() if b is None else run.resume(budget=b)
                count += 1
                s = outcome.stats
                steps, wall, peak = steps + s.steps, wall + s.wall_s, max(peak, s.memory_peak_bytes)
            if count > 1:
                outcome = outcome._replace(stats=outcome.stats._replace(
                    steps=steps, memory_peak_bytes=peak, wall_s=wall))
        finally:
            if run._open:  # a run that ended is closed already
                run.close()
        return self.p.encode_result(outcome, self._snapshot(sid, outcome), sb.replacements)

    def op_unload(self, sid: int, cid: int) -> list[Any]:
        self.chunks.pop((sid, cid), None)
        return ["ok"]

    def op_start(self, sid: int, rid: int, cid: int) -> list[Any]:
        self.runs[(sid, rid)] = self.sandboxes[sid].start(self.chunks[(sid, cid)])
        return ["ok"]

    def op_start_fn(self, sid: int, rid: int, key: int) -> list[Any]:
        self.runs[(sid, rid)] = self.sandboxes[sid].start(self.functions[(sid, key)])
        return ["ok"]

    def op_resume(self, sid: int, rid: int, args: list[Any],
                  budget: dict[str, Any] | None) -> list[Any]:
        key = (sid, rid)
        run = self.runs[key]
        # No keyword when there is no budget: a call with one costs the run's hot path more.
        outcome = (run.resume(*args) if budget is None
                   else run.resume(*args, budget=self._budget(budget)))
        if not run._open:  # finished, or its runtime replaced
            self.runs.pop(key, None)
        return self.p.encode_result(outcome, self._snapshot(sid, outcome),
                                    run.sandbox.replacements)

    def op_close_run(self, sid: int, rid: int) -> list[Any]:
        run = self.runs.pop((sid, rid), None)
        if run is not None:
            run.close()
        return ["ok"]

    def op_drop_fns(self, sid: int, keys: list[int]) -> None:
        """Functions the host let go of (no answer)."""
        for key in keys:
            handle = self.functions.pop((sid, key), None)
            if handle is not None:
                handle.release()

    def op_drop(self, sid: int) -> list[Any]:
        sb = self.sandboxes.pop(sid, None)
        for table in (self.chunks, self.runs, self.functions):
            for key in [k for k in table if k[0] == sid]:
                del table[key]
        self.kept.pop(sid, None)
        if sb is not None:
            sb.close()
        return ["ok"]

    def op_restore(self, sid: int, value: Any) -> list[Any]:
        sb = self.sandboxes[sid]
        got = sb.run(self.kept[sid].put, args=(_to_restore(value),))
        if got.status != "done":
            return ["fail", "HostError", f"the state snapshot could not be restored: {got.error}"]
        return ["ok"]

    def op_memory(self, sid: int) -> list[Any]:
        return ["ok", self.sandboxes[sid].memory_used_bytes]


def main() -> None:
    read_fd, write_fd, limit = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    _limit_memory(limit)  # before the Lua runtime, or anything else, is loaded
    os.dup2(2, 1)
    try:
        _Worker(read_fd, write_fd).serve()
    except MemoryError:
        from ._protocol import EXIT_OUT_OF_MEMORY

        os._exit(EXIT_OUT_OF_MEMORY)


if __name__ == "__main__":
    main()
