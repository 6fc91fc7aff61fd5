"""One side's half of a round trip (``FrameReader.exchange``): the request written, the
answer waited for and read, compiled (``_wire.c``) and in Python, which must behave alike;
and whole sandboxes on the Python steps, as where no C compiler built the module."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import sysconfig
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import moonbox
from moonbox.isolation import IsolatedSandbox, _protocol
from moonbox.isolation._process import worker_environment
from moonbox.isolation._protocol import (
    WIRE_ENV,
    FrameCorrupt,
    FrameError,
    FrameReader,
    FrameTimeout,
    FrameWriter,
    compiled_wire,
    pack,
)

try:
    from moonbox.isolation import _wire
except ImportError:
    _wire = None
compiled_exchange = None if _wire is None else _wire.exchange


def test_the_compiled_wire_is_built_where_a_c_compiler_is():
    headers = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not (shutil.which("cc") or shutil.which("gcc")) or not os.path.exists(headers):
        pytest.skip("no C compiler (or no Python headers) here: the Python steps are the wire")
    assert compiled_exchange is not None, "the install did not build moonbox.isolation._wire"
    if os.environ.get(WIRE_ENV) != "python":
        assert compiled_wire()
    # An editable install builds the module next to its source: one older than the source
    # is a stale build (rebuild: pip install -e . again).
    module = _wire.__file__
    source = os.path.join(os.path.dirname(module), "_wire.c")
    if os.path.exists(source):  # (a build copied into place keeps whole seconds)
        assert os.path.getmtime(module) >= os.path.getmtime(source) - 2, "a stale _wire build"


@pytest.fixture(params=["compiled", "python"])
def wire(request, monkeypatch) -> str:
    """Each test runs on both wires."""
    if request.param == "compiled":
        if compiled_exchange is None:
            pytest.skip("the compiled wire is not built here")
        monkeypatch.setattr(_protocol, "_exchange", compiled_exchange)
    else:
        monkeypatch.setattr(_protocol, "_exchange", None)
    return request.param


class _Ends:
    """Two pipes, as between host and worker: this side writes ``out`` and reads
    ``back``; the test plays the other side on ``peer_in`` and ``peer_out``."""

    def __init__(self) -> None:
        self.peer_in, self.out = os.pipe()
        self.back, self.peer_out = os.pipe()
        os.set_blocking(self.back, False)  # as the host's: reads keep deadlines
        os.set_blocking(self.out, False)
        self.writer = FrameWriter(self.out)

    def reader(self, spin_s: float = 0.0) -> FrameReader:
        return FrameReader(self.back, spin_s=spin_s)

    def close(self) -> None:
        for fd in (self.peer_in, self.out, self.back, self.peer_out):
            try:
                os.close(fd)
            except OSError:
                pass


@pytest.fixture
def ends() -> Iterator[_Ends]:
    e = _Ends()
    yield e
    e.close()


def _later(seconds: float, fn, *args) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        fn(*args)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _echo(ends: _Ends, count: int) -> threading.Thread:
    """The other side: answers each of ``count`` frames with ``["r", frame]``."""

    def run() -> None:
        reader = FrameReader(ends.peer_in)
        writer = FrameWriter(ends.peer_out)
        for _ in range(count):
            writer.send(["r", reader.read()])

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("spin_s", [0.0, 0.005])
def test_a_request_and_its_answer(wire, ends, calm, spin_s):
    echo = _echo(ends, 3)
    reader = ends.reader(spin_s)
    for i in range(3):
        data = ends.writer.frame(["run", i, "x" * i])
        assert reader.exchange(ends.writer, data, time.monotonic() + 30) == ["r", ["run", i, "x" * i]]
    echo.join(10)


def test_nothing_to_write_only_reads(wire, ends):
    os.write(ends.peer_out, pack(["ready", 1]))
    assert ends.reader().exchange(ends.writer, None, time.monotonic() + 30) == ["ready", 1]
    os.set_blocking(ends.peer_in, False)
    with pytest.raises(BlockingIOError):
        os.read(ends.peer_in, 10)  # nothing was written


def test_notes_and_a_request_go_in_one_write(wire, ends):
    echo = _echo(ends, 2)
    data = ends.writer.frame(["note"]) + ends.writer.frame(["run"])
    reader = ends.reader()
    assert reader.exchange(ends.writer, data, time.monotonic() + 30) == ["r", ["note"]]
    assert reader.exchange(ends.writer, None, time.monotonic() + 30) == ["r", ["run"]]
    echo.join(10)


@pytest.mark.parametrize("spin_s", [0.0, 5.0])
def test_the_deadline_ends_the_wait(wire, ends, calm, spin_s):
    reader = ends.reader(spin_s)
    began = time.monotonic()
    with pytest.raises(FrameTimeout):
        reader.exchange(ends.writer, ends.writer.frame(["run"]), began + 0.05)
    assert time.monotonic() - began < 3  # the deadline, not the window
    assert os.read(ends.peer_in, 100) == ends.writer.frame(["run"])  # the request went


def test_a_deadline_already_past_still_takes_what_is_there(wire, ends):
    os.write(ends.peer_out, pack(["late", 1]))
    assert ends.reader().exchange(ends.writer, None, time.monotonic() - 1) == ["late", 1]


def test_a_deadline_far_off_is_a_wait_as_long_as_it_takes(wire, ends):
    reader = ends.reader()
    _later(0.02, os.write, ends.peer_out, pack(["far"]))
    assert reader.exchange(ends.writer, None, time.monotonic() + 1e7) == ["far"]  # 115 days


def test_a_full_pipe_keeps_the_deadline_of_the_write(wire, ends):
    # Nobody reads the request: the pipe fills, and the write waits for room until the
    # deadline.
    big = ends.writer.frame(["run", b"\0" * (4 << 20)])
    began = time.monotonic()
    with pytest.raises(FrameTimeout):
        ends.reader().exchange(ends.writer, big, began + 0.1)
    assert time.monotonic() - began < 5


def test_the_other_side_gone_is_the_end(wire, ends):
    reader = ends.reader(0.005)
    os.close(ends.peer_out)
    with pytest.raises(FrameError):
        reader.exchange(ends.writer, None, time.monotonic() + 30)


def test_writing_to_a_side_that_is_gone_is_the_end(wire, ends):
    os.close(ends.peer_in)
    with pytest.raises(FrameError):
        ends.reader().exchange(ends.writer, ends.writer.frame(["run"]), time.monotonic() + 30)


def test_a_descriptor_that_cannot_be_read_is_the_end(wire, ends):
    reader = ends.reader()
    # The reader's descriptor now names a file open for writing only: always ready, and
    # reading it fails (EBADF). (A closed one could be reused by another test's thread.)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, ends.back)
    os.close(null)
    with pytest.raises(FrameError):
        reader.exchange(ends.writer, None, time.monotonic() + 30)


@pytest.mark.parametrize("raw", [
    b"\x03\x00\x00\x00\xc1\xc1\xc1",  # a whole frame whose body is no msgpack
    b"\x02\x00\x00\x00\x92\x01",  # an array cut off by its length
    b"\xff\xff\xff\x7f\x90",  # a header past the size limit
])
def test_what_is_no_frame_is_corrupt(wire, ends, raw):
    os.write(ends.peer_out, raw)
    with pytest.raises(FrameCorrupt):
        ends.reader().exchange(ends.writer, None, time.monotonic() + 30)


def test_a_frame_cut_off_by_the_end_of_the_pipe_is_the_end(wire, ends):
    os.write(ends.peer_out, b"\x09\x00\x00\x00\x92")
    os.close(ends.peer_out)
    with pytest.raises(FrameError):
        ends.reader().exchange(ends.writer, None, time.monotonic() + 30)


def test_a_frame_larger_than_one_read_is_read_whole(wire, ends):
    value = ["r", "y" * 200_000, list(range(1000))]
    _later(0.02, os.write, ends.peer_out, pack(value))
    assert ends.reader(0.001).exchange(ends.writer, None, time.monotonic() + 30) == value


def test_two_frames_in_one_read_come_out_one_at_a_time(wire, ends):
    os.write(ends.peer_out, pack(["a"]) + pack(["b"]))
    reader = ends.reader()
    assert reader.exchange(ends.writer, None, time.monotonic() + 30) == ["a"]
    assert reader.pending()
    # The buffered frame is the answer: nothing is waited for.
    assert reader.exchange(ends.writer, None, time.monotonic() - 1) == ["b"]
    assert not reader.pending()


def test_a_wait_past_the_window_stops_the_busy_waiting_and_a_short_one_starts_it(
        wire, ends, calm):
    reader = ends.reader(0.02)
    _later(0.3, os.write, ends.peer_out, pack(["late"]))
    assert reader.exchange(ends.writer, None, time.monotonic() + 30) == ["late"]
    assert not reader._hot
    os.write(ends.peer_out, pack(["soon"]))
    assert reader.exchange(ends.writer, None, time.monotonic() + 30) == ["soon"]
    assert reader._hot


def test_a_blocking_pipe_without_a_deadline_is_read_as_it_comes(wire, ends):
    # The worker's side when the CPUs are contended: a plain read is its sleep.
    os.set_blocking(ends.back, True)
    reader = FrameReader(ends.back)
    _later(0.05, os.write, ends.peer_out, pack(["go"]))
    assert reader.exchange(ends.writer, ends.writer.frame(["done"]), None) == ["go"]


def test_a_non_blocking_pipe_without_a_deadline_waits_as_long_as_it_takes(wire, ends):
    reader = ends.reader()
    _later(0.05, os.write, ends.peer_out, pack(["go"]))
    assert reader.exchange(ends.writer, None, None) == ["go"]


class _Interrupted(Exception):
    pass


@contextlib.contextmanager
def _interrupted_after(seconds: float) -> Iterator[None]:
    """A SIGALRM handler that raises :class:`_Interrupted` in ``seconds``, as Ctrl-C
    raises KeyboardInterrupt."""

    def interrupt(signum, frame):
        raise _Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def alarm() -> Iterator[list[int]]:
    """SIGALRM every 10 ms with a handler that counts, until the test ends."""
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
    yield fired
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("spin_s", [0.0, 0.001])
def test_signals_in_the_middle_of_a_wait_run_their_handlers_and_the_wait_goes_on(
        wire, ends, alarm, calm, spin_s):
    _later(0.2, os.write, ends.peer_out, pack(["after", "signals"]))
    got = ends.reader(spin_s).exchange(ends.writer, None, time.monotonic() + 30)
    assert got == ["after", "signals"]
    assert len(alarm) >= 3  # the handlers ran while it waited


@pytest.mark.parametrize("spin_s", [0.0, 0.001])
def test_a_handler_that_raises_ends_the_wait_with_its_exception(wire, ends, calm, spin_s):
    # A KeyboardInterrupt in a host waiting for a hung worker: the host gets control back.
    began = time.monotonic()
    with _interrupted_after(0.05), pytest.raises(_Interrupted):
        ends.reader(spin_s).exchange(ends.writer, None, None)
    assert time.monotonic() - began < 10


def test_a_signal_while_it_busy_waits_is_handled_before_it_sleeps(wire, ends, calm):
    # Nothing comes: after the window it would sleep until the deadline, and a handler
    # due from the window must run first.
    began = time.monotonic()
    with _interrupted_after(0.05), pytest.raises(_Interrupted):
        ends.reader(0.3).exchange(ends.writer, None, time.monotonic() + 30)
    assert time.monotonic() - began < 10


def test_a_signal_while_a_large_write_goes_on_is_handled_as_it_goes(wire, ends):
    # The worker's blocking pipe and a large answer the host drains slowly: a write that
    # makes progress is not interrupted by the signal, so its handler must not wait for
    # the whole frame to go and its answer to come.
    os.set_blocking(ends.out, True)
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set() and os.read(ends.peer_in, 1 << 16):
            time.sleep(0.05)  # 8 MiB takes ~6 s

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    began = time.monotonic()
    try:
        with _interrupted_after(0.1), pytest.raises(_Interrupted):
            ends.reader().exchange(ends.writer, pack(["r", b"\0" * (8 << 20)]),
                                   time.monotonic() + 20)
        assert time.monotonic() - began < 3
    finally:
        # The drainer ends before the pipes close: a descriptor number it read from could
        # be the next test's pipe.
        stop.set()
        os.close(ends.out)  # its read, if it waits in one, meets the end
        drainer.join(10)
        assert not drainer.is_alive()


def test_busy_waiting_spends_the_cpu_and_sleeping_does_not(wire, ends, calm):
    # The compiled wait really busy-waits within its window, and really sleeps after it
    # (what the window is for).
    # A second of waiting: a third of a core (0.1 s) is far below it even on a loaded machine.
    for spin_s, busy in ((2.0, True), (0.0, False)):
        _later(1.0, os.write, ends.peer_out, pack(["x"]))
        cpu = time.thread_time()
        assert ends.reader(spin_s).exchange(ends.writer, None, time.monotonic() + 30) == ["x"]
        spent = time.thread_time() - cpu
        assert (spent > 0.1) if busy else (spent < 0.1), (spin_s, spent)


@pytest.mark.parametrize("spin_s", [0.0, 0.5])
def test_another_thread_runs_while_one_waits(wire, ends, calm, spin_s):
    # The wait lets go of the interpreter, busy-waiting too: a game's other threads go on.
    began = []
    counted = []

    def count() -> None:
        while not began:
            time.sleep(0.001)
        end = began[0] + 0.25
        while (now := time.monotonic()) < end:
            if now > began[0] + 0.05:  # well inside the wait
                counted.append(1)

    _later(0.35, os.write, ends.peer_out, pack(["late"]))
    t = threading.Thread(target=count)
    t.start()
    began.append(time.monotonic())
    assert ends.reader(spin_s).exchange(ends.writer, None, time.monotonic() + 30) == ["late"]
    t.join()
    assert len(counted) > 1000


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.recursive(
           st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.text(max_size=20)
           | st.binary(max_size=300),
           lambda inner: st.lists(inner, max_size=4), max_leaves=12), min_size=1, max_size=5),
       cuts=st.lists(st.integers(0, 600), max_size=5),
       pauses=st.lists(st.sampled_from([0.0, 0.0005, 0.003]), min_size=6, max_size=6),
       spin=st.sampled_from([0.0, 0.002]),
       compiled=st.booleans())
def test_frames_come_out_as_they_went_in_however_the_bytes_arrive(values, cuts, pauses, spin,
                                                                 compiled):
    if compiled and compiled_exchange is None:
        compiled = False  # only the Python steps here
    e = _Ends()
    real = _protocol._exchange
    _protocol._exchange = compiled_exchange if compiled else None
    try:
        data = b"".join(pack(v) for v in values)
        bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})

        def write() -> None:
            for (start, end), pause in zip(itertools.pairwise(bounds), pauses, strict=False):
                time.sleep(pause)
                os.write(e.peer_out, data[start:end])

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        reader = e.reader(spin)
        got = [reader.exchange(e.writer, None, time.monotonic() + 30) for _ in values]
        writer.join()
        assert got == values
        assert not reader.pending()
    finally:
        _protocol._exchange = real
        e.close()


@pytest.mark.skipif(compiled_exchange is None, reason="the compiled wire is not built here")
@pytest.mark.parametrize("args, error", [
    ((1, None, 2, 0.0, 0.0), TypeError),  # one too few
    ((1, None, 2, 0.0, 0.0, None, None), TypeError),
    (("1", None, 2, 0.0, 0.0, None), TypeError),
    ((-1, None, 2, 0.0, 0.0, None), ValueError),
    ((1, None, 2**40, 0.0, 0.0, None), ValueError),
    ((1, "text", 2, 0.0, 0.0, None), TypeError),
    ((1, bytearray(b"x"), 2, 0.0, 0.0, None), TypeError),
    ((1, None, 2, "fast", 0.0, None), TypeError),
    ((1, None, 2, 0.0, 0.0, float("nan")), ValueError),
    ((1, None, 2, float("nan"), 0.0, None), ValueError),
    ((2**70, None, 2, 0.0, 0.0, None), ValueError),
    ((-1, None, "y", 0.0, 0.0, None), ValueError),  # the first fault is the one raised
])
def test_the_compiled_call_refuses_what_it_cannot_take(args, error):
    with pytest.raises(error):
        compiled_exchange(*args)


# -- whole sandboxes on the Python steps ---------------------------------------------------


@pytest.fixture
def python_wire(monkeypatch) -> None:
    """Host and workers started from now on wait and read in Python."""
    monkeypatch.setenv(WIRE_ENV, "python")
    monkeypatch.setattr(_protocol, "_exchange", None)


def test_a_sandbox_on_the_python_steps_calls_serves_and_recovers(python_wire):
    assert worker_environment(False)[WIRE_ENV] == "python"  # the workers' steps too
    with IsolatedSandbox(moonbox.Budget(wall_s=0.5), host_functions=moonbox.default_bindings(),
                         _test_hooks=True) as sb:
        out = sb.run("local s = 0 for i = 1, 10 do s = add(s, i) end return s")
        assert out.values == (55,)
        big = sb.run("return string.rep('z', 300000)")
        assert big.values == ("z" * 300000,)
        hung = sb.run("test_sleep(30)")
        assert hung.status == "budget" and hung.budget == "time"
        pid = sb.pid
        crashed = sb.run("test_segfault()")
        assert crashed.status == "error" and sb.pid != pid
        assert sb.run("return 2").values == (2,)
        # Wall budgets of three years and more: deadlines past what poll can wait at once.
        for wall_s in (1e8, 1e306):
            assert sb.run("return 3", budget=moonbox.Budget(wall_s=wall_s)).values == (3,)
