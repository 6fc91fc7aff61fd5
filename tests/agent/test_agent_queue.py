"""The request queue: priority, the concurrency cap, latest-wins scopes, cancellation."""

from __future__ import annotations

import threading

import pytest

from moonbox import Outcome, ScriptError
from moonbox.agent import (
    AgentError,
    Cancelled,
    CancelToken,
    Programmer,
    RequestQueue,
    ScriptedClient,
)
from moonbox.bindings import Registry, default_bindings

WAIT_S = 5.0  # generous: nothing here should take more than milliseconds


def blocker():
    """A request that runs until released, and an event set when it starts."""
    started, release = threading.Event(), threading.Event()

    def fn(token):
        started.set()
        release.wait(WAIT_S)
        return "cancelled" if token.cancelled else "finished"

    return fn, started, release


def test_priority_then_submission_order():
    order = []
    with RequestQueue(max_concurrent=1) as queue:
        fn, started, release = blocker()
        first = queue.submit(fn)
        assert started.wait(WAIT_S)
        tickets = [queue.submit(lambda t, n=n: order.append(n), priority=p)
                   for n, p in [("low", 0), ("high", 5), ("mid", 1), ("high2", 5)]]
        assert queue.pending == 4
        release.set()
        for ticket in tickets:
            ticket.result(WAIT_S)
        assert first.result(WAIT_S) == "finished"
    assert order == ["high", "high2", "mid", "low"]


def test_the_concurrency_cap_holds():
    running, peak = [0], [0]
    lock = threading.Lock()
    gate = threading.Barrier(2, timeout=WAIT_S)

    def fn(token):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            gate.wait()
        except threading.BrokenBarrierError:
            pass
        with lock:
            running[0] -= 1

    with RequestQueue(max_concurrent=2) as queue:
        tickets = [queue.submit(fn) for _ in range(6)]
        for ticket in tickets:
            ticket.result(WAIT_S)
    assert peak[0] == 2


def test_latest_wins_within_a_scope():
    with RequestQueue(max_concurrent=1) as queue:
        fn, started, release = blocker()
        running = queue.submit(fn, scope="npc-7")
        assert started.wait(WAIT_S)
        queued = queue.submit(lambda t: "old", scope="npc-7")
        other = queue.submit(lambda t: "other", scope="npc-8")
        latest = queue.submit(lambda t: "new", scope="npc-7")
        assert running.token.cancelled and running.token.reason == "superseded"
        assert queued.cancelled
        with pytest.raises(Cancelled) as info:
            queued.result(WAIT_S)
        assert info.value.reason == "superseded"
        release.set()
        assert running.result(WAIT_S) == "cancelled"  # it saw its token and stopped
        assert latest.result(WAIT_S) == "new" and other.result(WAIT_S) == "other"


def test_an_empty_scope_cancels_nothing():
    with RequestQueue() as queue:
        a = queue.submit(lambda t: 1)
        b = queue.submit(lambda t: 2)
        assert (a.result(WAIT_S), b.result(WAIT_S)) == (1, 2)


def test_explicit_cancel_of_a_queued_request():
    ran = []
    with RequestQueue(max_concurrent=1) as queue:
        fn, started, release = blocker()
        queue.submit(fn)
        assert started.wait(WAIT_S)
        ticket = queue.submit(lambda t: ran.append(1))
        assert ticket.cancel() is True
        release.set()
        with pytest.raises(Cancelled):
            ticket.result(WAIT_S)
        assert ticket.cancel() is False
    assert ran == []


def test_the_callers_cancellation_before_start_is_respected():
    ran = []
    token = CancelToken()
    with RequestQueue(max_concurrent=1) as queue:
        fn, started, release = blocker()
        queue.submit(fn)
        assert started.wait(WAIT_S)
        ticket = queue.submit(lambda t: ran.append(1), cancel=token)
        token.cancel()
        release.set()
        with pytest.raises(Cancelled):
            ticket.result(WAIT_S)
        assert ticket.state == "cancelled"
    assert ran == []


def test_cancel_scope_and_errors_and_close():
    with RequestQueue(max_concurrent=1) as queue:
        fn, started, release = blocker()
        running = queue.submit(fn, scope="s")
        assert started.wait(WAIT_S)
        assert queue.cancel_scope("s") == 1
        release.set()
        assert running.result(WAIT_S) == "cancelled"
        failing = queue.submit(lambda t: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            failing.result(WAIT_S)
        assert failing.state == "failed"
    with pytest.raises(AgentError) as info:
        queue.submit(lambda t: 1)
    assert info.value.code == "closed"


def test_the_programmer_loop_stops_on_a_superseded_token():
    registry = Registry(default_bindings())
    gate = threading.Event()
    running = threading.Event()

    def dry_run(script):
        running.set()
        gate.wait(WAIT_S)  # hold the first attempt until the newer request arrives
        return Outcome("error", (), ScriptError("x", chunk=script.chunk, line=1))

    client = ScriptedClient(["```lua\nreturn 1\n```"] * 4)
    programmer = Programmer(client, registry, dry_run=dry_run)
    with RequestQueue(max_concurrent=2) as queue:
        old = queue.submit(lambda t: programmer.run("t", cancel=t), scope="npc")
        # The first attempt is running (its generation over): the newer request cancels
        # the loop between two steps, not its generation.
        assert running.wait(WAIT_S)
        queue.submit(lambda t: "newer", scope="npc")
        gate.set()
        result = old.result(WAIT_S)
    assert result.status == "cancelled" and len(result.attempts) == 1
    registry.close()
