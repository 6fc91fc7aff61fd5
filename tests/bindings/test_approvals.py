"""Approvals: how a question settles, what the host can see and withdraw, and what a
withdrawn, timed-out or late answer never does (run the call, leave a rule behind)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from moonbox import Budget
from moonbox.bindings import (
    Answer,
    ApprovalRequest,
    Binding,
    LuaNumber,
    Permissions,
    Registry,
)
from moonbox.bindings._approval import PendingApproval


class SpawnArgs(BaseModel):
    prefab: str
    x: LuaNumber = 0.0


def wait_until(condition, timeout_s: float = 10.0) -> None:
    """Wait for ``condition()`` (set by another thread); fail the test if it never holds."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the condition never held")
        time.sleep(0.001)


# -- one question, as a state machine --------------------------------------------------------

ANSWERS = (True, False, Answer.ALLOW, Answer.DENY, Answer.ALLOW_ALWAYS, Answer.DENY_ALWAYS,
           None, "yes")
EVENTS = st.one_of(
    st.tuples(st.just("answer"), st.sampled_from(ANSWERS)),
    st.tuples(st.sampled_from(["fail", "time_out", "cancel"]), st.none()),
)
ALLOWING = (True, Answer.ALLOW, Answer.ALLOW_ALWAYS)


@given(st.lists(EVENTS, min_size=1, max_size=6))
def test_a_question_settles_once_by_its_first_event(events):
    approval = PendingApproval(ApprovalRequest("m", "spawn", "write", {}, 7))
    assert approval.state == "pending" and not approval.settled
    settled = []
    for kind, value in events:
        if kind == "answer":
            settled.append(approval.answered(value))
        elif kind == "fail":
            settled.append(approval.failed())
        elif kind == "time_out":
            settled.append(approval.time_out())
        else:
            settled.append(approval.cancel("withdrawn"))
    assert settled == [True] + [False] * (len(events) - 1)
    kind, value = events[0]
    expected = {"fail": "failed", "time_out": "timed_out", "cancel": "cancelled"}.get(kind)
    if kind == "answer":
        expected = "allowed" if value is True or value in ALLOWING else "denied"
    assert approval.state == expected
    assert approval.wait(0) == expected  # waiting on a settled question returns at once
    # Only the answer that settled it may leave a rule behind.
    remember = {Answer.ALLOW_ALWAYS: True, Answer.DENY_ALWAYS: False}.get(value) \
        if kind == "answer" else None
    assert approval.remember is remember
    assert approval.why == ("withdrawn" if kind == "cancel" else "")


def test_an_unanswered_question_times_out_when_waited_on():
    approval = PendingApproval(ApprovalRequest("m", "spawn", "write", {}))
    assert approval.wait(0.01) == "timed_out"
    assert not approval.answered(Answer.ALLOW_ALWAYS) and approval.remember is None


# -- through the registry: every way a question can end ----------------------------------------

FIRST = ("allow", "deny", "allow_always", "deny_always", "raise", "deny_pending",
         "unregister", "close_scope", "close_mod", "timeout")
LATE = ("none", "allow_always", "deny_always", "deny_pending")
ANSWER_OF = {"allow": Answer.ALLOW, "deny": Answer.DENY, "allow_always": Answer.ALLOW_ALWAYS,
             "deny_always": Answer.DENY_ALWAYS}
OUTCOME = {
    "allow": None, "allow_always": None,
    "deny": "not_approved", "deny_always": "not_approved", "raise": "not_approved",
    "deny_pending": "approval_cancelled", "unregister": "approval_cancelled",
    "close_scope": "approval_cancelled", "close_mod": "approval_cancelled",
    "timeout": "approval_timed_out",
}


class Asker:
    """A mod calling an ``ask`` binding in its own thread, and an approver the test
    answers: the approver blocks until the test hands it an answer."""

    def __init__(self, approval_timeout_s: float) -> None:
        self.registry = Registry()
        self.ran: list[str] = []
        self.scope = self.registry.scope("plugin")
        self.scope.register(Binding("spawn", SpawnArgs,
                                    lambda call, a: self.ran.append(a.prefab) or a.prefab))
        self.requests: list[ApprovalRequest] = []
        self.asked = threading.Event()
        self.answer: Any = None
        self.release = threading.Event()
        self.api = self.registry.mod("m", Permissions(mode="ask"), approve=self.approve,
                                     approval_timeout_s=approval_timeout_s)

    def approve(self, request: ApprovalRequest) -> Any:
        self.requests.append(request)
        self.asked.set()
        if not self.release.wait(30):
            return Answer.DENY
        if self.answer == "raise":
            raise RuntimeError("approver bug")
        return self.answer

    def call(self) -> Any:
        """Run ``spawn('orc')`` in a thread: the outcome once it ends."""
        outcome: list[Any] = []

        def run() -> None:
            with self.api.sandbox(Budget(wall_s=60)) as sb:
                outcome.append(sb.run("return spawn('orc')"))

        thread = threading.Thread(target=run)
        thread.start()
        return thread, outcome

    def answer_now(self, answer: Any) -> None:
        self.answer = answer
        self.release.set()

    def act(self, action: str) -> None:
        if action in ANSWER_OF or action == "raise":
            self.answer_now(ANSWER_OF.get(action, action))
        elif action == "deny_pending":
            self.registry.deny_pending()
        elif action == "unregister":
            self.registry.unregister("spawn")
        elif action == "close_scope":
            self.scope.close()
        elif action == "close_mod":
            self.api.close()


def code_of(out) -> str | None:
    if out.status == "done":
        return None
    return out.error.message.rsplit("[", 1)[1].rstrip("]")


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(first=st.sampled_from(FIRST), late=st.sampled_from(LATE))
def test_each_way_a_question_ends_and_what_a_late_event_cannot_change(first, late):
    logging.getLogger("moonbox.bindings").disabled = True  # the approver bug is expected
    asker = Asker(0.2 if first == "timeout" else 30)
    registry, api = asker.registry, asker.api
    try:
        thread, outcome = asker.call()
        assert asker.asked.wait(10)
        if first != "timeout":
            # The host sees the question while it waits, with the call's id.
            (pending,) = registry.pending_approvals()
            assert pending == asker.requests[0] and pending.call_id > 0
            assert api.pending_approvals() == (pending,)
            assert registry.pending_approvals(mod="other") == ()
            asker.act(first)
        thread.join(30)
        assert not thread.is_alive()
        (out,) = outcome
        code = code_of(out)
        assert code == OUTCOME[first], out
        assert asker.ran == (["orc"] if code is None else [])
        if code is not None:
            assert out.error.kind == "denied"
        assert registry.pending_approvals() == ()
        # Something late: an answer after the question settled, or a withdrawal with
        # nothing left to withdraw. It changes nothing.
        if late in ANSWER_OF:
            asker.answer_now(ANSWER_OF[late])
        elif late == "deny_pending":
            assert registry.deny_pending() == 0
        asker.answer_now(asker.answer if asker.release.is_set() else Answer.DENY)
        wait_until(lambda: not api._asking)  # the approver has returned
        assert asker.ran == (["orc"] if code is None else [])
        remembered = {"allow_always": True, "deny_always": False}.get(first)
        assert api._remembered.get("spawn") is remembered
        if api.closed or "spawn" not in registry:
            return
        # A second call shows what was remembered: asked again unless an always-answer
        # settled the first question.
        asker.answer = Answer.DENY
        asked_before = len(asker.requests)
        thread, outcome = asker.call()
        thread.join(30)
        second = code_of(outcome[0])
        if remembered is True:
            assert second is None and len(asker.requests) == asked_before
        elif remembered is False:
            assert second == "not_approved" and len(asker.requests) == asked_before
        else:
            assert second == "not_approved" and len(asker.requests) == asked_before + 1
    finally:
        logging.getLogger("moonbox.bindings").disabled = False
        asker.answer_now(Answer.DENY)
        registry.close()


# -- the host's view --------------------------------------------------------------------------


def test_the_host_counts_and_denies_every_pending_approval_apart_from_a_no():
    asker = Asker(30)
    thread, outcome = asker.call()
    assert asker.asked.wait(10)
    assert len(asker.registry.pending_approvals(binding="spawn")) == 1
    assert asker.registry.deny_pending(reason="the admin left") == 1
    thread.join(30)
    out = outcome[0]
    assert out.error.kind == "denied"
    assert out.error.message == "spawn: the admin left [approval_cancelled]"
    assert asker.ran == [] and asker.api._remembered == {}
    asker.answer_now(Answer.ALLOW_ALWAYS)  # the answer arrives late: ignored
    wait_until(lambda: not asker.api._asking)
    assert asker.api._remembered == {} and asker.ran == []
    asker.registry.close()


def test_a_late_allow_always_after_a_timeout_is_neither_run_nor_remembered(caplog):
    asker = Asker(0.1)
    with caplog.at_level(logging.INFO, logger="moonbox.bindings"):
        thread, outcome = asker.call()
        thread.join(30)
        assert outcome[0].error.message == "spawn: no approval within 0.1 s [approval_timed_out]"
        asker.answer_now(Answer.ALLOW_ALWAYS)
        wait_until(lambda: not asker.api._asking)
    assert asker.ran == [] and asker.api._remembered == {}
    call_id = asker.requests[0].call_id
    assert any(f"call {call_id}" in r.getMessage() and "ignored" in r.getMessage()
               for r in caplog.records)
    asker.registry.close()


def test_closing_the_registry_cancels_what_is_pending():
    asker = Asker(30)
    thread, outcome = asker.call()
    assert asker.asked.wait(10)
    asker.registry.close()
    thread.join(30)
    assert outcome[0].error.message == "spawn: the host is shutting down [approval_cancelled]"
    asker.answer_now(Answer.ALLOW)


@pytest.mark.parametrize(("action", "sentence"), [
    ("unregister", "the binding was removed while its approval was pending"),
    ("close_scope", "the binding was removed while its approval was pending"),
    ("close_mod", "the mod was unloaded while its approval was pending"),
])
def test_removing_the_binding_or_unloading_the_mod_cancels_its_question(action, sentence):
    asker = Asker(30)
    thread, outcome = asker.call()
    assert asker.asked.wait(10)
    asker.act(action)
    thread.join(30)
    assert outcome[0].error.message == f"spawn: {sentence} [approval_cancelled]"
    assert asker.registry.pending_approvals() == ()
    asker.answer_now(Answer.ALLOW)
    asker.registry.close()


# -- running calls ------------------------------------------------------------------------------


class Slow:
    """A binding whose call blocks until the test lets it finish."""

    def __init__(self, registry: Registry, *, unpack: bool = False, scope=None) -> None:
        self.started = threading.Event()
        self.finish = threading.Event()
        self.returned: list[str] = []
        fn = (lambda call, prefab, x: self.run(prefab)) if unpack else \
            (lambda call, a: self.run(a.prefab))
        binding = Binding("build", SpawnArgs, fn, unpack=unpack)
        (scope or registry).register(binding)

    def run(self, prefab: str) -> str:
        self.started.set()
        assert self.finish.wait(30)
        self.returned.append(prefab)
        return prefab


def call_in_thread(api, source: str):
    outcome: list[Any] = []

    def run() -> None:
        with api.sandbox(Budget(wall_s=60)) as sb:
            outcome.append(sb.run(source))

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _remove(action: str, registry: Registry, scope, api) -> str:
    """Takes the binding ``build`` away from a running call as ``action`` says; why the
    call is aborted, as it says so."""
    if action == "unregister":
        registry.unregister("build")
        return "the binding was removed"
    if action == "close_scope":
        scope.close()
        return "the binding was removed"
    api.close()
    return "the mod was unloaded"


@pytest.mark.parametrize("unpack", [False, True], ids=["model", "lane"])
@pytest.mark.parametrize("action", ["unregister", "close_scope", "close_mod"])
def test_removing_a_binding_or_unloading_the_mod_aborts_its_running_calls(action, unpack):
    registry = Registry()
    scope = registry.scope("plugin")
    slow = Slow(registry, unpack=unpack, scope=scope)
    api = registry.mod("m", Permissions(mode="full"))
    thread, outcome = call_in_thread(api, "local ok, e = pcall(build, 'tower', 1) "
                                          "return ok, e, build == nil")
    assert slow.started.wait(10)
    why = _remove(action, registry, scope, api)
    slow.finish.set()
    thread.join(30)
    ok, message, _ = outcome[0].values
    assert slow.returned == ["tower"]  # it finished its work: only its result is dropped
    assert not ok
    assert message.endswith(f"build: {why} while the call ran; its result is dropped "
                            "[aborted]")
    # Later calls: the binding is unavailable.
    with api.sandbox() as sb:
        out = sb.run("return build('again', 1)")
    assert out.error.message == "build: is no longer available [unavailable]"
    registry.close()


class Watching:
    """A binding that, once let go, reads what its call says of itself before returning."""

    def __init__(self, registry: Registry, *, unpack: bool, scope=None) -> None:
        self.started = threading.Event()
        self.finish = threading.Event()
        self.seen: list[tuple[bool, str | None, int]] = []
        fn = (lambda call, prefab, x: self.run(call)) if unpack else \
            (lambda call, a: self.run(call))
        (scope or registry).register(Binding("build", SpawnArgs, fn, unpack=unpack))

    def run(self, call) -> int:
        self.seen.append((call.cancelled, call.aborted, call.call_id))
        self.started.set()
        assert self.finish.wait(30)
        self.seen.append((call.cancelled, call.aborted, call.call_id))
        return 1


@pytest.mark.parametrize("unpack", [False, True], ids=["model", "lane"])
@pytest.mark.parametrize("action", ["unregister", "close_scope", "close_mod"])
def test_a_running_call_sees_that_it_was_aborted(action, unpack):
    # The binding learns it while it runs (call.cancelled, call.aborted), so one that
    # works long can stop: its result would be dropped anyway.
    registry = Registry()
    scope = registry.scope("plugin")
    watching = Watching(registry, unpack=unpack, scope=scope)
    api = registry.mod("m", Permissions(mode="full"))
    thread, outcome = call_in_thread(api, "local ok, e = pcall(build, 'tower', 1) return ok, e")
    assert watching.started.wait(10)
    why = _remove(action, registry, scope, api)
    watching.finish.set()
    thread.join(30)
    (before_cancelled, before_aborted, first_id), (cancelled, aborted, same_id) = watching.seen
    assert (before_cancelled, before_aborted) == (False, None)
    assert cancelled and aborted == why
    assert first_id == same_id > 0
    ok, message = outcome[0].values
    assert not ok and message.endswith("[aborted]")
    registry.close()


def test_a_call_aborted_before_it_runs_never_runs():
    registry = Registry()
    ran = []
    registry.register(Binding("build", SpawnArgs, lambda c, a: ran.append(a.prefab)))
    from moonbox.bindings import Hook

    # A hook removes the binding (an admin acting while the call was on its way).
    registry.add_hook(Hook("remove", pre_call=lambda info: registry.unregister("build")))
    seen = []
    registry.add_hook(Hook("audit", pre_call=lambda info: seen.append(info.aborted), order=1))
    with registry.mod("m").sandbox() as sb:
        out = sb.run("return build('tower')")
    assert out.error.message == "build: the binding was removed before the call could run " \
                                "[aborted]"
    assert ran == [] and seen == [True]
    registry.close()


def test_a_binding_that_unloads_its_own_mod_ends_aborted():
    registry = Registry()
    holder: dict[str, Any] = {}
    registry.register(Binding("quit", SpawnArgs, lambda c, a: holder["api"].close() or 1))
    api = holder["api"] = registry.mod("m")
    with api.sandbox() as sb:
        out = sb.run("return quit('x')")
    assert out.error.message == "quit: the mod was unloaded while the call ran; its result " \
                                "is dropped [aborted]"
    registry.close()


def test_a_question_that_starts_after_its_mod_unloaded_is_never_asked():
    # A call already past its availability check when the mod unloads (another thread):
    # the question it then asks is cancelled at once, not left to wait out its timeout.
    from moonbox import BindingError, HostCall

    asker = Asker(30)
    api = asker.api
    binding = asker.registry.get("spawn")
    api.close()
    with pytest.raises(BindingError) as refused:
        api._ask(binding, SpawnArgs(prefab="orc"), HostCall(None, None, "spawn"), 1)  # type: ignore[arg-type]
    assert refused.value.reason == "approval_cancelled"
    assert "the mod was unloaded" in str(refused.value)
    assert asker.requests == []
    asker.registry.close()
