"""Attacks by a worker that runs no mod code at all: a scripted process in its place (see
the ``scripted_worker`` fixture) sends what a worker taken over by a VM bug might. The host
never raises, never waits past its deadlines, and kills the worker."""

from __future__ import annotations

import signal
import time

import psutil
import pytest

from moonbox import Budget
from moonbox.isolation import IsolatedSandbox

pytestmark = pytest.mark.usefixtures("no_workers_left_behind")


class _HostHeld(BaseException):
    """The host was still waiting on the worker long past every deadline (a BaseException:
    the host answers a host function's Exception to the worker and goes on)."""


@pytest.fixture
def give_up_after():
    """``give_up_after(seconds)``: the test fails (the host's wait is interrupted) rather
    than hang when the host waits on a worker that long."""
    def interrupt(*_: object) -> None:
        raise _HostHeld("the host was still waiting on the worker")

    old = signal.signal(signal.SIGALRM, interrupt)
    yield signal.alarm
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # reaped (between any two looks, too)
        return True


def test_a_worker_ended_by_a_signal_with_no_name_is_a_crash(scripted_worker):
    # Real-time signals (SIGRTMIN..SIGRTMAX) have no name in the signal module.
    scripted_worker("os.kill(os.getpid(), 40)")
    sb = IsolatedSandbox(Budget(wall_s=0.5), wall_margin_s=0.5)
    try:
        pid = sb.pid
        outcome = sb.start("return 1").resume()
        assert outcome.status == "error" and outcome.error.kind == "crashed"
        assert outcome.error.signal == "SIG40"
        assert "SIG40" in outcome.error.message
        assert not psutil.pid_exists(pid)  # reaped, no zombie
    finally:
        sb.close()


_ERROR = {"kind": "runtime", "message": "boom", "chunk": "=m", "line": 1, "traceback": []}


def _answer(status, error) -> str:
    return f"w.send(['r', {status!r}, [], 0, 0, 0.0, {error!r}, None, 0])"


@pytest.mark.parametrize("answer", [
    _answer(["x"], None),  # a status that cannot even be looked up
    _answer({"done": 1}, None),
    _answer("error", {**_ERROR, "chunk": 5}),
    _answer("error", {**_ERROR, "line": "1"}),
    _answer("error", {**_ERROR, "line": True}),
    _answer("error", {**_ERROR, "message": None}),
    _answer("error", {**_ERROR, "message": ["boom"]}),
    _answer("error", {**_ERROR, "kind": 7}),
    _answer("error", {**_ERROR, "kind": "made-up"}),
    _answer("error", {**_ERROR, "kind": "budget"}),  # a budget error without its budget
    _answer("error", {**_ERROR, "traceback": "x"}),
    _answer("error", {**_ERROR, "traceback": [[1, 2, 3]]}),
    _answer("error", {**_ERROR, "traceback": [["=m", 1]]}),
    _answer("error", {**_ERROR, "traceback": [["=m", "1", None]]}),
    _answer("budget", {**_ERROR, "budget": "bogus", "limit": 1, "used": 2}),
    _answer("budget", {**_ERROR, "budget": ["time"], "limit": 1, "used": 2}),
    _answer("budget", {**_ERROR, "budget": "time", "limit": "1", "used": 2}),
    _answer("error", ["not", "a", "map"]),
    "w.send(['script', {'kind': 'syntax', 'message': 'x', 'chunk': 5, 'line': 1, "
    "'traceback': []}])",
    "w.send(['r', 'done', [], 0, 0, 0.0, None, None])",
    "w.send(['r', 'done', [], 0, 0, 0.0, None, None, 0, 0])",
    "w.send(['r', 'done', 'values', 0, 0, 0.0, None, None, 0])",
    "w.send(['r', 'done', [], 0.5, 0, 0.0, None, None, 0])",
    "w.send(['r', 'done', [], 0, None, 0.0, None, None, 0])",
    "w.send(['r', 'done', [], 0, 0, '0.0', None, None, 0])",
    "w.send(['r', 'done', [], 0, 0, 0.0, None, None, '0'])",
    _answer("done", _ERROR),  # an ok status with an error
    _answer("error", None),  # a failure without one
    _answer("paused", None),
    _answer("paused", _ERROR),
], ids=["status-list", "status-map", "chunk-int", "line-str", "line-bool", "message-none",
        "message-list", "kind-int", "kind-unknown", "kind-budget-bare", "traceback-str",
        "frame-ints", "frame-short", "frame-line-str", "budget-unknown", "budget-list",
        "limit-str", "error-list", "syntax-chunk-int", "result-short", "result-long",
        "values-str", "steps-float", "peak-none", "wall-str", "replaced-str",
        "done-with-error", "error-without-one", "status-unknown", "status-unknown-error"])
def test_a_malformed_answer_kills_the_worker_and_never_raises_in_the_host(
        scripted_worker, answer):
    scripted_worker(answer)
    sb = IsolatedSandbox(Budget(wall_s=0.5), wall_margin_s=0.5)
    try:
        pid = sb.pid
        outcome = sb.start("return 1").resume()
        assert outcome.status == "error" and outcome.error.kind == "crashed"
        assert "broke the protocol" in str(outcome.error)
        assert _gone(pid) and sb.pid != pid
    finally:
        sb.close()


def test_a_well_formed_error_from_the_worker_is_taken(scripted_worker):
    # The checks refuse only what encode_error never writes.
    budget = {**_ERROR, "kind": "budget", "budget": "time", "limit": 0.5, "used": 0.7,
              "traceback": [["=m", 1, None], ["=m", None, "f"]]}
    scripted_worker(_answer("budget", budget))
    with IsolatedSandbox(Budget(wall_s=0.5), wall_margin_s=0.5) as sb:
        pid = sb.pid
        outcome = sb.start("return 1").resume()
        assert outcome.status == "budget" and outcome.budget == "time"
        assert outcome.error.chunk == "=m" and len(outcome.error.traceback) == 2
        assert sb.pid == pid


_TICK_FOREVER = """
while True:  # never answers, only says again and again that another resume began
    w.send(["tick"])
    time.sleep(0.02)
"""


def test_tick_frames_do_not_hold_the_host_during_a_resume(scripted_worker, give_up_after):
    # A resume is one resume: it never begins another, so any tick is a violation.
    scripted_worker(_TICK_FOREVER)
    give_up_after(20)
    sb = IsolatedSandbox(Budget(wall_s=0.05), wall_margin_s=0.2)
    try:
        pid = sb.pid
        run = sb.start("return 1")
        started = time.monotonic()
        outcome = run.resume()
        assert time.monotonic() - started < 5
        assert outcome.status == "error" and outcome.error.kind == "crashed"
        assert "tick" in str(outcome.error)
        assert _gone(pid)
    finally:
        sb.close()


def test_tick_frames_do_not_hold_the_host_during_a_run(scripted_worker, give_up_after):
    # A run of max_resumes resumes begins at most max_resumes - 1 more: each resets the
    # watchdog, but that many times only.
    scripted_worker(_TICK_FOREVER)
    give_up_after(20)
    sb = IsolatedSandbox(Budget(wall_s=0.05), wall_margin_s=0.2)
    try:
        started = time.monotonic()
        outcome = sb.run("return 1", max_resumes=20)
        assert time.monotonic() - started < 8
        assert outcome.status == "error" and outcome.error.kind == "crashed"
    finally:
        sb.close()


@pytest.mark.parametrize(("ticks", "max_resumes", "ok"), [(2, 3, True), (3, 3, False),
                                                           (1, 1, False)])
def test_a_run_takes_as_many_ticks_as_it_has_resumes_after_the_first(
        scripted_worker, ticks, max_resumes, ok):
    scripted_worker(f"""
for _ in range({ticks}):
    w.send(["tick"])
w.send(["r", "done", [7], 0, 0, 0.0, None, None, 0])
""")
    with IsolatedSandbox(Budget(wall_s=1), wall_margin_s=1) as sb:
        outcome = sb.run("return 7", max_resumes=max_resumes)
        if ok:
            assert outcome.status == "done" and outcome.values == (7,)
        else:
            assert outcome.status == "error" and outcome.error.kind == "crashed"


def test_a_worker_that_only_calls_a_slow_host_function_is_stopped(scripted_worker,
                                                                  give_up_after):
    # The host's time in serving a call is not counted against the worker; but a worker
    # whose call came back past its budget makes no other (its meter stops the mod), so
    # one that goes on calling is killed as a hang, not served for ever.
    calls = []

    class _Slow:
        name, cost = "slow", 1

        def __call__(self, call, args):
            calls.append(time.monotonic())
            time.sleep(0.2)
            return ()

    scripted_worker("""
while True:
    w.send(["call", "slow", []])
    r.read()
""")
    give_up_after(20)
    sb = IsolatedSandbox(Budget(wall_s=0.1), wall_margin_s=0.3, host_functions=[_Slow()])
    try:
        pid = sb.pid
        outcome = sb.start("return 1").resume()
        assert outcome.status == "budget" and outcome.budget == "time"
        assert _gone(pid)
        assert len(calls) <= 5 and calls[-1] - calls[0] < 5
    finally:
        sb.close()
