"""The worker process: sandboxes of one or more mods, driven by the host over two pipes.

Started by the host as ``python -m moonbox.isolation._worker READ_FD WRITE_FD LIMIT``. It
sets its address-space limit (``LIMIT`` bytes, 0 for none) before anything else is imported,
so the Lua runtimes and everything they allocate live under it. A mod reaches the host only
through proxies: each host function of a mod sends a ``call`` frame and waits for the host's
answer; the host validates and runs the call. The process itself is a crash and resource
boundary, not a privilege boundary: it runs as the host's user, in ``/``, with an
allowlisted environment (see docs/isolation.md).

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

    __slots__ = ("name", "cost", "_worker")

    def __init__(self, worker: _Worker, name: str, cost: int) -> None:
        self.name = name
        self.cost = cost
        self._worker = worker

    def __call__(self, call: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return self._worker.call_host(self.name, args)


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


class _Worker:
    def __init__(self, read_fd: int, write_fd: int) -> None:
        from .._errors import BindingError, MoonboxError, ScriptError
        from ..sandbox import Budget, Sandbox, ValueLimits
        from . import _protocol

        self._BindingError = BindingError
        self._MoonboxError = MoonboxError
        self._ScriptError = ScriptError

        self._Budget = Budget
        self._Sandbox = Sandbox
        self._ValueLimits = ValueLimits
        self.p = _protocol
        self.reader = _protocol.FrameReader(read_fd)
        self.write_fd = write_fd
        self.sandboxes: dict[int, Any] = {}
        self.chunks: dict[tuple[int, int], Any] = {}
        self.runs: dict[tuple[int, int], Any] = {}
        self.state_chunks: dict[int, tuple[Any, Any, str]] = {}
        self.test_hooks = os.environ.get(TEST_HOOKS_ENV) == "1"
        self.ops = {
            "new": self.op_new,
            "load": self.op_load,
            "run": self.op_run,
            "start": self.op_start,
            "resume": self.op_resume,
            "close_run": self.op_close_run,
            "drop": self.op_drop,
            "restore": self.op_restore,
            "unload": self.op_unload,
        }

    # -- frames --------------------------------------------------------------------------

    def serve(self) -> None:
        """Answer requests until the host closes the pipe."""
        self.p.write_frame(self.write_fd, ["ready", os.getpid()])
        while True:
            try:
                request = self.reader.read()
            except self.p.FrameError:
                return
            self.p.write_frame(self.write_fd, self.handle(request))

    def handle(self, request: list[Any]) -> list[Any]:
        try:
            return self.ops[request[0]](*request[1:])
        except MemoryError:
            os._exit(self.p.EXIT_OUT_OF_MEMORY)
        except self._ScriptError as exc:
            return ["script", self.p.encode_error(exc)]
        except self._MoonboxError as exc:
            return ["fail", type(exc).__name__, str(exc)]

    def call_host(self, name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
        self.p.write_frame(self.write_fd, ["call", name, list(args)])
        while True:
            reply = self.reader.read()
            kind = reply[0]
            if kind == "ret":
                return tuple(reply[1])
            if kind == "err":
                raise self._BindingError(reply[1], reason=reply[2])
            # A host function serving this call ran another mod of this worker.
            self.p.write_frame(self.write_fd, self.handle(reply))

    def send_tick(self) -> None:
        self.p.write_frame(self.write_fd, ["tick"])

    # -- operations ----------------------------------------------------------------------

    def op_new(self, sid: int, config: dict[str, Any]) -> list[Any]:
        functions: list[Any] = [_Proxy(self, name, cost) for name, cost in config["functions"]]
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
            get = sb.load(f"return {state}", "=(state)")
            put = sb.load(f"{state} = ...", "=(state)")
            self.state_chunks[sid] = (get, put, state)
        return ["ok"]

    def op_load(self, sid: int, cid: int, source: str | bytes, name: str) -> list[Any]:
        chunk = self.sandboxes[sid].load(source, name)
        self.chunks[(sid, cid)] = chunk
        return ["ok", chunk.checks]

    def _snapshot(self, sid: int, outcome: Any) -> list[Any]:
        """``[True, value]`` after an ok resume of a mod that keeps state, else ``[False]``."""
        kept = self.state_chunks.get(sid)
        if kept is None or not outcome.ok:
            return [False]
        sb = self.sandboxes[sid]
        got = sb.run(kept[0])  # checked against the value limits like any result
        if got.status != "done":
            return [False, f"the state in global {kept[2]!r} could not be copied: {got.error}"]
        value = got.value
        if _has_replacement(value):
            # The copy decoded strings as text: copy again from the runtime, keeping bytes.
            from ..sandbox._lua import lua

            value = _exact_copy(sb._env[kept[2].encode()], lua.lua_type)
        return [True, value]

    def op_run(self, sid: int, cid: int | None, source: str | bytes | None, name: str,
               args: list[Any], max_resumes: int, budget: dict[str, Any] | None) -> list[Any]:
        sb = self.sandboxes[sid]
        b = None if budget is None else self._Budget(**budget)
        chunk = sb.load(source, name) if cid is None else self.chunks[(sid, cid)]
        run = sb.start(chunk)
        try:
            outcome = run.resume(*args, budget=b)
            count = 1
            steps, peak, wall = outcome.stats
            while outcome.status in ("yielded", "preempted"):
                if count >= max_resumes:
                    from .._errors import ScriptError

                    err = ScriptError(f"still yielding after {max_resumes} resumes; finish "
                                      "within fewer", chunk=run.chunk.name)
                    outcome = outcome._replace(status="error", values=(), error=err)
                    break
                self.send_tick()  # each resume has its own wall budget: the host's watchdog too
                outcome = run.resume(budget=b)
                count += 1
                s = outcome.stats
                steps, wall, peak = steps + s.steps, wall + s.wall_s, max(peak, s.memory_peak_bytes)
            if count > 1:
                outcome = outcome._replace(stats=outcome.stats._replace(
                    steps=steps, memory_peak_bytes=peak, wall_s=wall))
        finally:
            run.close()
        return ["done", self.p.encode_outcome(outcome), self._snapshot(sid, outcome)]

    def op_unload(self, sid: int, cid: int) -> list[Any]:
        self.chunks.pop((sid, cid), None)
        return ["ok"]

    def op_start(self, sid: int, rid: int, cid: int) -> list[Any]:
        self.runs[(sid, rid)] = self.sandboxes[sid].start(self.chunks[(sid, cid)])
        return ["ok"]

    def op_resume(self, sid: int, rid: int, args: list[Any],
                  budget: dict[str, Any] | None) -> list[Any]:
        run = self.runs[(sid, rid)]
        outcome = run.resume(*args, budget=None if budget is None else self._Budget(**budget))
        if run.finished:
            self.runs.pop((sid, rid), None)
        return ["done", self.p.encode_outcome(outcome), self._snapshot(sid, outcome)]

    def op_close_run(self, sid: int, rid: int) -> list[Any]:
        run = self.runs.pop((sid, rid), None)
        if run is not None:
            run.close()
        return ["ok"]

    def op_drop(self, sid: int) -> list[Any]:
        sb = self.sandboxes.pop(sid, None)
        for key in [k for k in self.chunks if k[0] == sid]:
            del self.chunks[key]
        for key in [k for k in self.runs if k[0] == sid]:
            del self.runs[key]
        self.state_chunks.pop(sid, None)
        if sb is not None:
            sb.close()
        return ["ok"]

    def op_restore(self, sid: int, value: Any) -> list[Any]:
        sb = self.sandboxes[sid]
        got = sb.run(self.state_chunks[sid][1], args=(_to_restore(value),))
        if got.status != "done":
            return ["fail", "HostError", f"the state snapshot could not be restored: {got.error}"]
        return ["ok"]


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
