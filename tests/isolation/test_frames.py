"""Frames between host and worker, read and written in one process over a real pipe: whole,
split across reads, busy-waited for or slept on, under deadlines."""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moonbox.isolation import _protocol
from moonbox.isolation._protocol import (
    SPIN_ENV,
    FrameError,
    FrameReader,
    FrameTimeout,
    FrameWriter,
    pack,
    spin_window,
)


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


@pytest.fixture
def spins(monkeypatch) -> list[bytes]:
    """What each busy-wait of any reader took (nothing when nothing came in the window)."""
    took: list[bytes] = []
    real_spin = FrameReader._spin

    def spy(self, *args):
        got = real_spin(self, *args)
        took.append(got)
        return got

    monkeypatch.setattr(FrameReader, "_spin", spy)
    return took


def _later(seconds: float, fn, *args) -> threading.Thread:
    def go() -> None:
        time.sleep(seconds)
        fn(*args)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


# -- the busy-wait window ------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "seconds"), [
    ("0", 0.0), ("250", 250e-6), ("1e9", _protocol.MAX_SPIN_US / 1e6), ("-5", 0.0),
    ("12.5", 12.5e-6),
])
def test_the_window_is_read_from_the_environment_and_clamped(monkeypatch, raw, seconds):
    monkeypatch.setenv(SPIN_ENV, raw)
    assert spin_window() == pytest.approx(seconds)


@pytest.mark.parametrize("raw", ["", "lots", "nan"])
def test_a_window_that_is_no_number_falls_back_to_the_default(monkeypatch, raw):
    monkeypatch.setenv(SPIN_ENV, raw)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert spin_window() == _protocol.DEFAULT_SPIN_US / 1e6


@pytest.mark.parametrize(("cpus", "seconds"), [(1, 0.0), (2, 100e-6), (8, 100e-6)])
def test_the_default_window_busy_waits_only_with_a_second_cpu(monkeypatch, cpus, seconds):
    monkeypatch.delenv(SPIN_ENV, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
    assert spin_window() == pytest.approx(seconds)


def test_the_worker_inherits_the_window(monkeypatch):
    from moonbox.isolation._process import worker_environment

    monkeypatch.setenv(SPIN_ENV, "0")
    assert worker_environment(False)[SPIN_ENV] == "0"


# -- reading -------------------------------------------------------------------------------

_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False) | st.text(max_size=40) | st.binary(max_size=40),
    lambda inner: st.lists(inner, max_size=5)
    | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(values=st.lists(_values, min_size=1, max_size=6),
       cuts=st.lists(st.integers(0, 400), max_size=6),
       pauses=st.lists(st.sampled_from([0.0, 0.0005, 0.003]), min_size=7, max_size=7),
       spin=st.sampled_from([0.0, 0.002]))
def test_frames_come_out_as_they_went_in_however_the_bytes_arrive(values, cuts, pauses, spin):
    r, w = os.pipe()
    os.set_blocking(r, False)
    try:
        data = b"".join(pack(v) for v in values)
        bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})

        def write() -> None:  # the bytes in pieces, with pauses between (some past the window)
            for (start, end), pause in zip(itertools.pairwise(bounds), pauses, strict=False):
                time.sleep(pause)
                os.write(w, data[start:end])

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        reader = FrameReader(r, spin_s=spin)
        got = [reader.read(time.monotonic() + 30) for _ in values]
        writer.join()
        assert got == values
        assert not reader.pending()
    finally:
        os.close(r)
        os.close(w)


def test_a_busy_waiting_reader_takes_a_frame_that_comes_within_its_window(pipe, calm, spins):
    r, w = pipe
    reader = FrameReader(r, spin_s=5.0)
    _later(0.02, os.write, w, pack(["r", 1]))
    assert reader.read(time.monotonic() + 30) == ["r", 1]
    assert spins and spins[0]  # the busy-wait took the frame
    assert reader._hot  # it came within the window: the reader goes on busy-waiting


def test_a_wait_past_the_window_stops_the_busy_waiting_and_a_short_one_starts_it(
        pipe, calm, spins):
    r, w = pipe
    # A window wide enough that "again" (5 ms) lands in it on a loaded machine, and "late"
    # (1 s) well past it.
    reader = FrameReader(r, spin_s=0.25)
    _later(1.0, os.write, w, pack(["late"]))
    assert reader.read(time.monotonic() + 30) == ["late"]
    assert spins == [b""]  # the busy-wait ran out; the reader slept
    assert not reader._hot  # the next wait sleeps at once
    os.write(w, pack(["soon"]))
    assert reader.read(time.monotonic() + 30) == ["soon"]
    assert spins == [b""]  # it did
    assert reader._hot  # that one took no time: busy-waiting again
    _later(0.005, os.write, w, pack(["again"]))
    assert reader.read(time.monotonic() + 30) == ["again"]
    assert len(spins) == 2 and spins[1]


def test_busy_waiting_keeps_the_deadline(pipe, calm, spins):
    r, _ = pipe
    reader = FrameReader(r, spin_s=5.0)
    began = time.monotonic()
    with pytest.raises(FrameTimeout):
        reader.read(began + 0.05)
    assert spins == [b""]
    assert time.monotonic() - began < 3  # the deadline, not the 5 s window


def test_a_pipe_closed_while_the_reader_busy_waits_is_the_end(pipe, calm, spins):
    r, w = pipe
    reader = FrameReader(r, spin_s=5.0)
    _later(0.02, os.close, w)
    with pytest.raises(FrameError):
        reader.read(time.monotonic() + 30)
    assert len(spins) == 1


def test_a_frame_split_across_the_window_is_read_whole(pipe):
    r, w = pipe
    reader = FrameReader(r, spin_s=0.001)
    frame = pack(["r", "x" * 1000])
    os.write(w, frame[:7])
    _later(0.05, os.write, w, frame[7:])
    assert reader.read(time.monotonic() + 30) == ["r", "x" * 1000]


def test_a_reader_without_a_deadline_waits_for_as_long_as_it_takes(pipe):
    r, w = pipe
    for spin in (0.0, 0.001):
        reader = FrameReader(r, spin_s=spin)
        _later(0.05, os.write, w, pack(["ok", spin]))
        assert reader.read() == ["ok", spin]


def test_a_deadline_past_what_poll_can_wait_at_once_is_a_long_wait(pipe):
    # A wall budget of years (Budget bounds it only to be finite): poll takes a C int of
    # milliseconds, and the reader must not overflow it.
    r, w = pipe
    reader = FrameReader(r)
    _later(0.05, os.write, w, pack(["far"]))
    assert reader.read(time.monotonic() + 1e8) == ["far"]
    # A frame larger than the pipe: the writer waits for room, as long as the reader takes.
    os.set_blocking(w, False)
    big = pack(["x" * (1 << 20)])
    got = []
    drain = _later(0.05, lambda: got.append(reader.read(time.monotonic() + 30)))
    FrameWriter(w).write(big, time.monotonic() + 1e8)
    drain.join(30)
    assert got == [["x" * (1 << 20)]]


def test_poll_timeouts_for_any_deadline():
    now = time.monotonic()
    longest = _protocol._MAX_POLL_MS
    assert _protocol._timeout_ms(None) is None
    assert _protocol._timeout_ms(now - 5) == 0 == _protocol._timeout_ms(-math.inf)
    assert 0 < _protocol._timeout_ms(now + 1) <= 1001
    assert _protocol._timeout_ms(now + 1e306) == longest == _protocol._timeout_ms(math.inf)


def test_a_poll_that_ends_before_the_deadline_is_asked_again():
    # What poll does at its longest timeout (24 days) with a deadline later still.
    answers = iter([[], [], [(3, 1)]])
    asked = []

    def poll(timeout_ms):
        asked.append(timeout_ms)
        return next(answers)

    assert _protocol._poll_until(poll, time.monotonic() + 60)
    assert len(asked) == 3
    assert not _protocol._poll_until(lambda timeout_ms: [], time.monotonic() - 1)


def _next_interval(reader: FrameReader) -> None:
    reader._next_check = 0.0  # the next read checks the CPUs again


def test_a_reader_on_contended_cpus_sleeps_at_once_until_they_stay_calm(pipe, calm, spins):
    r, w = pipe
    reader = FrameReader(r, spin_s=5.0, sets_blocking=True)
    assert not os.get_blocking(r)  # it may busy-wait: reads must not block

    _next_interval(reader)
    calm.count += 10_000  # preempted thousands of times a second: contended
    os.write(w, pack(["a"]))
    assert reader.read() == ["a"]
    assert reader.contended and not spins
    assert os.get_blocking(r)  # sleeping in a plain read, the cheapest way

    # Calm intervals: it sleeps at once until enough of them came in a row.
    for i in range(_protocol._CALM_INTERVALS):
        _next_interval(reader)
        _later(0.01, os.write, w, pack(["b", i]))
        assert reader.read() == ["b", i]
    assert not reader.contended and len(spins) == 1  # the last read busy-waited
    assert not os.get_blocking(r)


def test_a_thread_that_waits_for_a_cpu_is_contention_too(monkeypatch, pipe, calm):
    r, w = pipe
    waited = {"own": 0, "peer": 0}
    monkeypatch.setattr(_protocol, "_runqueue_wait_ns",
                        lambda path: waited["peer" if "/proc/4242/" in path else "own"])
    reader = FrameReader(r, spin_s=5.0, peer_pid=4242)
    for who in ("own", "peer"):
        for _ in range(_protocol._CALM_INTERVALS):  # calm again
            _next_interval(reader)
            os.write(w, pack(["calm"]))
            reader.read()
        assert not reader.contended
        _next_interval(reader)
        waited[who] += 10**9  # a whole second waiting for a CPU, in a moment: contended
        os.write(w, pack([who]))
        assert reader.read() == [who]
        assert reader.contended, who


def test_without_scheduler_figures_the_preemptions_decide(monkeypatch, pipe, calm):
    r, w = pipe
    monkeypatch.setattr(_protocol, "_runqueue_wait_ns", lambda path: None)
    reader = FrameReader(r, spin_s=5.0, peer_pid=4242)
    _next_interval(reader)
    os.write(w, pack(["x"]))
    reader.read()
    assert not reader.contended
    _next_interval(reader)
    calm.count += 10_000
    os.write(w, pack(["y"]))
    reader.read()
    assert reader.contended


def test_a_reader_that_keeps_deadlines_leaves_its_pipe_non_blocking(pipe, calm):
    r, w = pipe
    reader = FrameReader(r, spin_s=5.0)
    _next_interval(reader)
    calm.count += 10_000
    began = time.monotonic()
    with pytest.raises(FrameTimeout):
        reader.read(began + 0.05)
    assert reader.contended and not os.get_blocking(r)
    assert time.monotonic() - began < 3


def test_the_scheduler_figures_are_read_where_linux_keeps_them():
    own = _protocol._runqueue_wait_ns(_protocol._OWN_SCHEDSTAT)
    if not os.path.exists(_protocol._OWN_SCHEDSTAT):
        pytest.skip("no schedstat on this kernel")
    assert isinstance(own, int) and own >= 0
    assert _protocol._runqueue_wait_ns("/proc/0/no-such-file") is None


def test_a_reader_used_from_several_threads_compares_each_thread_with_itself(
        monkeypatch, pipe):
    r, w = pipe
    # Each thread's figures are its own: far apart, and none of them moving.
    counts: dict[int, int] = {}

    def usage(who: int) -> object:
        n = counts.setdefault(threading.get_ident(), 1_000_000 * len(counts))
        return type("Usage", (), {"ru_nivcsw": n})()

    monkeypatch.setattr(_protocol.resource, "getrusage", usage)
    monkeypatch.setattr(_protocol, "_runqueue_wait_ns",
                        lambda path: counts.setdefault(threading.get_ident(), 0) * 1000)
    reader = FrameReader(r, spin_s=0.001)

    def read_once(tag: int) -> None:
        _next_interval(reader)
        os.write(w, pack([tag]))
        assert reader.read() == [tag]

    for i in range(6):  # two threads in turn, as a pool's callers may
        if i % 2:
            thread = threading.Thread(target=read_once, args=(i,))
            thread.start()
            thread.join()
        else:
            read_once(i)
        assert not reader.contended, i
