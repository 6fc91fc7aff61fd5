"""The watchdog: the caller stops waiting at the deadline plus the margin, and nothing of
an abandoned call reaches it later."""

from __future__ import annotations

import threading
import time

import pytest

from moonbox.sandbox._watchdog import Stall, Watchdog

FOREVER = float("inf")


def _never() -> float:
    return FOREVER


@pytest.fixture
def watchdog():
    w = Watchdog()
    yield w
    w.close()


def test_a_call_returns_its_value_and_raises_its_exception(watchdog):
    assert watchdog.call(_never, time.perf_counter, sum, [1, 2, 3]) == 6
    with pytest.raises(ValueError):
        watchdog.call(_never, time.perf_counter, int, "x")
    assert watchdog.call(_never, time.perf_counter, len, "abc") == 3  # the same runner goes on
    assert watchdog.stalls == 0


def test_a_call_runs_on_another_thread(watchdog):
    assert watchdog.call(_never, time.perf_counter, threading.get_ident) != threading.get_ident()


def test_a_stuck_call_is_abandoned_and_the_next_gets_a_new_runner(watchdog):
    release = threading.Event()
    entered = threading.Event()

    def stuck() -> str:
        entered.set()
        release.wait(30)
        return "late"

    now = time.perf_counter()
    result = watchdog.call(lambda: now + 0.05, time.perf_counter, stuck)  # a deadline already past: waits the margin
    assert isinstance(result, Stall)
    assert entered.is_set()
    assert watchdog.stalls == 1 and watchdog.stuck == 1
    # The caller goes on while the stuck call still runs.
    assert watchdog.call(_never, time.perf_counter, str, 5) == "5"
    release.set()
    for _ in range(1000):
        if watchdog.stuck == 0:
            break
        time.sleep(0.01)
    assert watchdog.stuck == 0  # its thread ended once its work returned
    assert watchdog.call(_never, time.perf_counter, str, 6) == "6"


def test_a_deadline_that_moves_later_is_waited_for(watchdog):
    # Time the work excludes (an approval it waits for) moves the deadline; the wait
    # reads it again whenever it runs out.
    moved = threading.Event()
    start = time.perf_counter()

    def deadline() -> float:
        return FOREVER if moved.is_set() else start + 0.05

    def work() -> str:
        moved.set()
        time.sleep(0.2)  # past the first deadline and its margin
        return "done"

    assert watchdog.call(deadline, time.perf_counter, work) == "done"
    assert watchdog.stalls == 0


def test_an_interrupted_wait_abandons_the_runner(watchdog):
    release = threading.Event()

    def deadline() -> float:
        raise KeyboardInterrupt  # as a signal would, in the waiting thread

    with pytest.raises(KeyboardInterrupt):
        watchdog.call(deadline, time.perf_counter, release.wait, 30)
    assert watchdog.stalls == 1
    release.set()
    assert watchdog.call(_never, time.perf_counter, str, 1) == "1"
