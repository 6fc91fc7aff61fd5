"""A worker's life from the host: abandoned requests, closing, the watchdog on whole frames,
exact state snapshots and what the worker inherits."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from moonbox import Budget, SandboxClosed
from moonbox.isolation import IsolatedSandbox, WorkerPool
from moonbox.isolation._process import WorkerProcess
from moonbox.isolation._protocol import pack
from moonbox.isolation._worker import TEST_HOOKS_ENV


class _Interrupted(BaseException):
    """What a host-side timeout (or Ctrl-C) raises in the middle of a request."""


class _Function:
    """A host function for these tests: ``fn()`` is called with no context."""

    cost = 1

    def __init__(self, name: str, fn) -> None:
        self.name = name
        self._fn = fn

    def __call__(self, call, args):
        return self._fn()


def _worker_output_pipe(pid: int) -> str:
    """The worker's end of its output pipe, as a path the test can write to (Linux)."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    return f"/proc/{pid}/fd/{int(argv[4])}"  # python -c BOOT READ_FD WRITE_FD LIMIT


def _inject(pid: int, data: bytes) -> None:
    with open(_worker_output_pipe(pid), "wb", buffering=0) as pipe:
        pipe.write(data)


class _WatchedLock:
    """A worker's lock that tells when one thread (the one closing it) begins to wait for
    it; everything else goes to the lock itself."""

    def __init__(self, lock, thread_id: int) -> None:
        self._lock = lock
        self._thread_id = thread_id
        self.waiting = threading.Event()

    def acquire(self, *args, **kwargs) -> bool:
        if threading.get_ident() == self._thread_id:
            self.waiting.set()
        return self._lock.acquire(*args, **kwargs)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> _WatchedLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _no_zombie(pid: int) -> bool:
    """The process is not a zombie: reaped (or still running)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _dead(pid: int) -> bool:
    """The process has exited (reaped, or a zombie not yet reaped)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# -- 1. an abandoned request -------------------------------------------------------------


def test_an_abandoned_request_leaves_no_answer_for_the_next_one():
    # The interrupt is armed from inside the request (by a host call), and the worker then
    # sleeps far longer than it can take to arrive: it lands while the host waits for the
    # answer, however slow the machine.
    def interrupt(*_: object) -> None:
        raise _Interrupted

    def arm():
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        return ()

    with WorkerPool(1, _test_hooks=True) as pool:
        a = pool.sandbox("a", Budget(wall_s=60), host_functions=[_Function("arm", arm)])
        b = pool.sandbox("b")
        b.run("state = {owner = 'b'}")
        old = signal.signal(signal.SIGALRM, interrupt)
        try:
            with pytest.raises(_Interrupted):
                a.run("state = {owner = 'a'} arm() test_sleep(30) return 'a-result'")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        assert b.run("return 'b-result'").values == ("b-result",)
        assert b.state_snapshot == {"owner": "b"}
        assert a.run("return state == nil").values == (True,)  # no snapshot was taken
        assert a.run("return 'a again'").values == ("a again",)
        assert pool.stats()[0].respawns == 1


def test_a_base_exception_from_a_host_function_stops_the_worker():
    def boom():
        raise _Interrupted

    sb = IsolatedSandbox(host_functions=[_Function("boom", boom)], state_global=None)
    try:
        pid = sb.pid
        run = sb.start("coroutine.yield(1) return 2")
        assert run.resume().values == (1,)
        with pytest.raises(_Interrupted):
            sb.run("boom() return 'never'")
        assert sb.run("return 'next'").values == ("next",)
        assert sb.pid != pid and not psutil.pid_exists(pid)
        with pytest.raises(SandboxClosed):
            run.resume()  # its coroutine was in the stopped worker
    finally:
        sb.close()


def test_a_host_function_that_closes_its_sandbox_ends_the_call_as_closed(caplog):
    mine: list[IsolatedSandbox] = []
    sb = IsolatedSandbox(host_functions=[_Function("close_me", lambda: mine[0].close() or ())],
                         state_global=None)
    mine.append(sb)
    pid = sb.pid
    with pytest.raises(SandboxClosed):
        sb.run("close_me() return 'never'")
    assert _dead(pid)
    assert "lost" not in caplog.text  # closed, not a crash of the worker


def test_closing_a_worker_leaves_its_pipe_to_the_request_in_flight():
    # A descriptor closed under a reader could be reused by a file opened meanwhile, and
    # the reader would read that file: close() waits for the request to let go.
    # slow() holds the request until close() has killed the worker and waits for the
    # request to let go (each for at most 10 s): then it looks at the pipe.
    entered = threading.Event()
    seen: list[int] = []

    def slow():
        entered.set()
        deadline = time.monotonic() + 10
        while not _dead(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        lock.waiting.wait(10)
        seen.append(worker._read_fd)
        return ()

    sb = IsolatedSandbox(host_functions=[_Function("slow", slow)], state_global=None)
    worker = sb._worker
    pid = sb.pid
    worker.lock = lock = _WatchedLock(worker.lock, threading.get_ident())
    failures: list[BaseException] = []

    def run() -> None:
        try:
            sb.run("slow() return 1")
        except BaseException as exc:  # noqa: BLE001 - what the request ended with
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert entered.wait(10)  # the worker waits for slow()'s answer
        worker.close(timeout_s=0.1)
        thread.join(5)
        assert seen and seen[0] >= 0  # still open while the request held the worker
        assert worker._read_fd == -1  # and closed once it let go
        assert len(failures) == 1 and isinstance(failures[0], SandboxClosed)
    finally:
        thread.join(25)
        sb.close()


# -- 2. a closed pool --------------------------------------------------------------------


def test_a_sandbox_of_a_closed_pool_refuses_every_call(tmp_path):
    pool = WorkerPool(1)
    sb = pool.sandbox("a")
    worker = sb._worker
    pool.close()
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    victim = tmp_path / "victim.bin"
    with open(victim, "wb", buffering=0):  # likely to get a descriptor number the pool freed
        with pytest.raises(SandboxClosed):
            sb.run("return 1")
        with pytest.raises(SandboxClosed):
            sb.load("return 1")
        with pytest.raises(SandboxClosed):
            worker.request(["memory", 1], None)
        with pytest.raises(SandboxClosed):
            worker.respawn()
    assert victim.read_bytes() == b""
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= children
    sb.close()


# -- 3. each pipe closed once ------------------------------------------------------------


def test_closing_a_worker_closes_each_pipe_exactly_once(monkeypatch):
    worker = WorkerProcess(memory_limit_bytes=0)
    fds = {worker._write_fd, worker._read_fd}
    closed: list[int] = []
    real_close = os.close

    def counting_close(fd: int) -> None:
        if fd in fds:
            closed.append(fd)
        real_close(fd)

    monkeypatch.setattr(os, "close", counting_close)
    worker.close()
    worker._finalizer()  # what garbage collection would run: already done, a no-op
    monkeypatch.undo()
    assert sorted(closed) == sorted(fds)


# -- 4. the watchdog covers whole frames -------------------------------------------------


def test_the_watchdog_covers_the_rest_of_a_frame():
    # The worker has written the start of a frame, then hangs in a C call.
    sb = IsolatedSandbox(Budget(wall_s=0.05), wall_margin_s=0.2, _test_hooks=True,
                         host_functions=[
                             _Function("half", lambda: _inject(sb.pid, b"\x02\x00\x00\x00\x92")
                                       or ())])
    try:
        outcome = sb.run("half() test_sleep(5) return 1")
        assert outcome.status == "budget" and outcome.budget == "time"
        assert sb.run("return 'fresh'").values == ("fresh",)
    finally:
        sb.close()


def test_the_watchdog_covers_writing_to_a_worker_that_stopped_reading():
    # The worker asks for a host call whose answer is far larger than a pipe holds, then
    # hangs without reading it.
    sb = IsolatedSandbox(Budget(wall_s=0.05), wall_margin_s=0.2, _test_hooks=True,
                         host_functions=[
                             _Function("ask", lambda: _inject(sb.pid, pack(["call", "big", []]))
                                       or ()),
                             _Function("big", lambda: ("x" * (4 << 20),))])
    try:
        outcome = sb.run("ask() test_sleep(20) return 1")
        assert outcome.status == "budget" and outcome.budget == "time"
        # Killed at its deadline (~0.25 s), not once the worker woke up and read again.
        assert outcome.stats.wall_s < 10
        assert sb.run("return 'fresh'").values == ("fresh",)
    finally:
        sb.close()


# -- 5. exact snapshots ------------------------------------------------------------------


def test_a_snapshot_restores_binary_strings_exactly(make_isolated):
    sb = make_isolated()
    sb.run("state = {blob = string.char(0x80, 0xff, 0x00, 0x41), text = 'héllo', "
           "[string.char(0xfe)] = 'a', [string.char(0xff)] = 'b', list = {string.char(0xc3)}}")
    check = ("local n = 0 for _ in pairs(state) do n = n + 1 end "
             "return n, state.blob == string.char(0x80, 0xff, 0x00, 0x41), "
             "state[string.char(0xfe)], state[string.char(0xff)], "
             "state.list[1] == string.char(0xc3), state.text")
    expected = (5, True, "a", "b", True, "héllo")
    assert sb.run(check).values == expected
    assert sb.run("test_segfault()").error.kind == "crashed"
    assert sb.restores == 1
    assert sb.run(check).values == expected


# -- 6. what the worker inherits ---------------------------------------------------------


def test_the_worker_gets_an_allowlisted_environment_and_a_neutral_directory(monkeypatch):
    monkeypatch.setenv("MOONBOX_TEST_HOST_SECRET", "hunter2")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv(TEST_HOOKS_ENV, "1")
    with IsolatedSandbox() as sb:
        with open(f"/proc/{sb.pid}/environ", "rb") as f:
            names = {item.split(b"=", 1)[0] for item in f.read().split(b"\0") if item}
        assert b"MOONBOX_TEST_HOST_SECRET" not in names
        assert TEST_HOOKS_ENV.encode() not in names
        assert b"LC_ALL" in names
        assert os.readlink(f"/proc/{sb.pid}/cwd") == "/"
        assert sb.run("return 1 + 1").values == (2,)
    from moonbox.isolation._process import worker_environment

    assert worker_environment(test_hooks=True)[TEST_HOOKS_ENV] == "1"


def test_a_worker_that_only_sends_calls_cannot_keep_the_host_serving_it():
    # A compromised worker asks for host calls again and again (here: each call injects
    # the next), never finishing its resume. Each answered call gives the worker some more
    # time, but only up to one more margin in all: then it is killed as any hang.
    def flood():
        time.sleep(0.01)
        _inject(sb.pid, pack(["call", "flood", []]))
        return ()

    sb = IsolatedSandbox(Budget(wall_s=0.1), wall_margin_s=0.3, _test_hooks=True,
                         host_functions=[_Function("flood", flood)])
    try:
        started = time.monotonic()
        outcome = sb.run("flood() test_sleep(30) return 1")
        assert outcome.status == "budget" and outcome.budget == "time"
        assert time.monotonic() - started < 10
        assert sb.run("return 'fresh'").values == ("fresh",)
    finally:
        sb.close()


@pytest.mark.parametrize("forged", [
    pack(["r", "done", "not a list", 0, 0, 0.0, None, None, 0]),  # a malformed result
    pack(["r", "done", [], 0, 0, 0.0, {"kind": "runtime"}, None, 0]),  # ok with an error
    pack(["call", 7]),  # a malformed call
    pack({"not": "a message"}),
    b"\x03\x00\x00\x00\xc7\x01\x05",  # a msgpack extension the host does not know
    b"\xff\xff\xff\x7f",  # a frame far past the size limit
])
def test_a_worker_that_breaks_the_protocol_is_killed_as_crashed(forged):
    # What a worker taken over by a VM bug might send instead of its answer: the host reads
    # nothing of it as data, kills the worker and answers the call as a crash.
    sb = IsolatedSandbox(Budget(wall_s=5), _test_hooks=True, host_functions=[
        _Function("forge", lambda: _inject(sb.pid, forged) or ())])
    try:
        pid = sb.pid
        outcome = sb.run("forge() test_sleep(30) return 1")
        assert outcome.status == "error" and outcome.error.kind == "crashed"
        assert "broke the protocol" in outcome.error.message
        assert outcome.stats.wall_s < 10
        assert _no_zombie(pid)
        assert sb.run("return 'fresh'").values == ("fresh",)
    finally:
        sb.close()
