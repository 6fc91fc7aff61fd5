"""The registry and per-mod environments: what a mod sees, asks for, and is refused."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from pydantic import BaseModel, ConfigDict

from moonbox import Budget, ConfigError
from moonbox.bindings import (
    Answer,
    ApprovalRequest,
    Binding,
    LuaNumber,
    Permissions,
    Registry,
    default_bindings,
)


class SpawnArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prefab: str
    x: LuaNumber = 0.0


class Point(BaseModel):
    x: float
    y: float


class Empty(BaseModel):
    pass


def _spawn(call, args):
    return f"spawned {args.prefab} at {args.x:g}"


def make_registry(**kwargs) -> Registry:
    reg = Registry(default_bindings())
    reg.register(Binding("spawn", SpawnArgs, _spawn, risk="write", group="world", **kwargs))
    reg.register(Binding("nuke", Empty, lambda call, args: "boom", risk="danger"))
    return reg


@pytest.fixture
def registry():
    reg = make_registry()
    yield reg
    reg.close()


# -- the registry --------------------------------------------------------------------------


def test_registry_lists_bindings_by_name_and_always_has_query(registry):
    assert [b.name for b in registry] == ["add", "nuke", "query", "query_reading", "report",
                                          "spawn"]
    assert "spawn" in registry and registry.get("spawn").risk == "write"
    assert len(registry) == 6


def test_duplicate_names_are_an_error(registry):
    with pytest.raises(ConfigError, match="already registered"):
        registry.register(Binding("spawn", Empty, lambda c, a: None))
    with pytest.raises(ConfigError, match="already registered"):
        registry.register(Binding("query", Empty, lambda c, a: None))


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a b", "x" * 65, "é"])
def test_binding_names_are_validated(name):
    with pytest.raises(ValueError, match="binding name"):
        Binding(name, Empty, lambda c, a: None)


def test_binding_fields_are_validated():
    with pytest.raises(ValueError, match="risk"):
        Binding("x", Empty, lambda c, a: None, risk="root")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cost"):
        Binding("x", Empty, lambda c, a: None, cost=-1)
    with pytest.raises(ValueError, match="group"):
        Binding("x", Empty, lambda c, a: None, group="two words")
    with pytest.raises(ValueError, match="args"):
        Binding("x", dict, lambda c, a: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="result"):
        Binding("x", Empty, lambda c, a: None, result=int)  # type: ignore[arg-type]


def test_registering_a_non_binding_is_an_error(registry):
    with pytest.raises(ConfigError):
        registry.register(lambda c, a: None)  # type: ignore[arg-type]


def test_decorator_registers_with_the_docstring_as_description(registry):
    @registry.binding("greet", Point, risk="read", group="demo")
    def greet(call, args):
        """Say where the point is.

        More text that is not the summary.
        """
        return f"{args.x},{args.y}"

    assert registry.get("greet") is greet
    assert greet.description == "Say where the point is."
    with registry.mod("m").sandbox() as sb:
        assert sb.run("return greet(1, 2)").value == "1.0,2.0"


def test_granted_lists_decisions(registry):
    granted = {b.name: d for b, d in registry.granted(Permissions(mode="readonly"))}
    assert granted == {"add": "allow", "nuke": "deny", "query": "allow",
                       "query_reading": "allow", "report": "allow", "spawn": "deny"}


# -- what a mod sees -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "names"),
    [
        ("readonly", ("add", "query", "query_reading", "report")),
        ("ask", ("add", "nuke", "query", "query_reading", "report", "spawn")),
        ("auto", ("add", "nuke", "query", "query_reading", "report", "spawn")),
        ("full", ("add", "nuke", "query", "query_reading", "report", "spawn")),
    ],
)
def test_a_mod_sees_only_what_its_mode_grants(registry, mode, names):
    assert registry.mod("m", Permissions(mode=mode)).names == names


def test_a_denied_binding_is_absent_with_the_usual_error(registry, jit):
    api = registry.mod("m", Permissions(mode="readonly"))
    with api.sandbox(jit=jit) as sb:
        out = sb.run("local a = 1\nreturn spawn('goblin')", "@mods/m/main.lua")
    assert out.status == "error"
    assert out.error.chunk == "@mods/m/main.lua" and out.error.line == 2
    assert "attempt to call global 'spawn' (a nil value)" in out.error.message
    with api.sandbox(jit=jit) as sb:
        assert sb.run("return spawn == nil, nuke == nil, add ~= nil").values == (True, True, True)


def test_a_denied_binding_marked_to_explain_is_a_stub_that_says_why(jit):
    reg = make_registry(explain_denial=True)
    api = reg.mod("waves", Permissions(mode="readonly"))
    with api.sandbox(jit=jit) as sb:
        out = sb.run("spawn('goblin')", "@mods/waves/main.lua")
        assert out.status == "error" and out.error.kind == "denied"
        assert out.error.message == "spawn: denied by the permissions of mod 'waves' [denied]"
        assert out.error.line == 1
        caught = sb.run("local ok, e = pcall(spawn, 'x') return ok, e").values
        assert caught == (False, "(mod):1: spawn: denied by the permissions of mod 'waves' [denied]")
    reg.close()


def test_rules_refine_the_mode(registry):
    api = registry.mod("m", Permissions(mode="readonly", rules={"spawn": "allow", "re*": "deny"}))
    assert api.names == ("add", "query", "query_reading", "spawn")
    with api.sandbox() as sb:
        assert sb.run("return spawn{prefab = 'orc', x = 2}").value == "spawned orc at 2"


def test_a_binding_registered_later_is_not_seen_and_one_removed_is_unavailable(registry, jit):
    api = registry.mod("m", Permissions(mode="full"))
    registry.register(Binding("late", Empty, lambda c, a: 1))
    assert "late" not in api.names
    registry.unregister("spawn")
    with api.sandbox(jit=jit) as sb:
        out = sb.run("return spawn('orc')")
    assert out.status == "error"
    assert out.error.message == "spawn: is no longer available [unavailable]"


def test_unregistering_an_unknown_name_raises(registry):
    with pytest.raises(KeyError):
        registry.unregister("nope")


def test_validation_errors_name_binding_argument_and_problem(registry, jit):
    with registry.mod("m", Permissions(mode="full")).sandbox(jit=jit) as sb:
        assert sb.run("return spawn(1)").error.message == (
            "spawn: argument prefab: expected a string, got number"
        )
        assert sb.run("return spawn{prefab='a', y=1}").error.message == (
            "spawn: argument y: unexpected argument"
        )
        assert sb.run("return spawn()").error.message == "spawn: argument prefab: missing"
        assert sb.run("return spawn('a', 1, 2)").error.message == (
            "spawn: expected at most 2 arguments, got 3"
        )


def test_a_host_exception_is_one_neutral_line_and_the_traceback_is_logged(caplog, jit):
    reg = Registry()
    reg.register(Binding("boom", Empty, lambda c, a: 1 / 0))
    with reg.mod("m").sandbox(jit=jit) as sb, caplog.at_level(logging.ERROR):
        out = sb.run("return boom()")
    assert out.status == "error"
    assert "boom" in out.error.message and "ZeroDivisionError" not in out.error.message
    assert "\n" not in out.error.message
    assert any("ZeroDivisionError" in (r.exc_text or "") for r in caplog.records)
    reg.close()


def test_result_models_validate_and_cross_as_tables(jit):
    reg = Registry()
    reg.register(Binding("where", Empty, lambda c, a: {"x": 1, "y": 2.5}, result=Point))
    reg.register(Binding("bad", Empty, lambda c, a: {"x": "far"}, result=Point))
    with reg.mod("m").sandbox(jit=jit) as sb:
        assert sb.run("local p = where() return p.x + p.y").value == 3.5
        out = sb.run("return bad()")
        assert out.status == "error" and "bad" in out.error.message
        assert "validation" not in out.error.message.lower()
    reg.close()


def test_the_call_knows_its_mod(jit):
    reg = Registry()
    seen = []
    reg.register(Binding("who", Empty, lambda c, a: seen.append(c.mod.mod_id) or c.mod.mod_id))
    for mod_id in ("a", "b"):
        with reg.mod(mod_id).sandbox(jit=jit) as sb:
            assert sb.run("return who()").value == mod_id
    assert seen == ["a", "b"]
    reg.close()


def test_binding_cost_is_charged_through_the_registry(jit):
    reg = Registry()
    reg.register(Binding("heavy", Empty, lambda c, a: None, cost=1000))
    with reg.mod("m").sandbox(Budget(steps=10_000), jit=jit) as sb:
        out = sb.run("for i = 1, 100 do heavy() end")
    assert out.status == "budget" and out.error.budget == "steps"
    reg.close()


# -- asking --------------------------------------------------------------------------------


def test_ask_calls_the_approver_with_the_validated_arguments(registry, jit):
    requests: list[ApprovalRequest] = []

    def approve(request):
        requests.append(request)
        return True

    api = registry.mod("waves", Permissions(mode="ask"), approve=approve)
    with api.sandbox(jit=jit) as sb:
        assert sb.run("return spawn('orc', 3), add(1, 2)").values == ("spawned orc at 3", 3)
        assert sb.run("return spawn('orc')").ok
    ids = [r.call_id for r in requests]
    assert ids[0] > 0 and ids[1] > ids[0]  # each call has its own id
    assert requests == [
        ApprovalRequest("waves", "spawn", "write", {"prefab": "orc", "x": 3.0}, ids[0]),
        ApprovalRequest("waves", "spawn", "write", {"prefab": "orc", "x": 0.0}, ids[1]),
    ]


def test_no_approver_denies(registry, jit):
    with registry.mod("m", Permissions(mode="ask")).sandbox(jit=jit) as sb:
        out = sb.run("return spawn('orc')")
    assert out.error.kind == "denied"
    assert out.error.message == "spawn: needs approval and the host has no approver [not_approved]"


@pytest.mark.parametrize("answer", [False, Answer.DENY])
def test_a_no_denies_with_a_stable_code(registry, jit, answer):
    with registry.mod("m", Permissions(mode="ask"), approve=lambda r: answer).sandbox(jit=jit) as sb:
        out = sb.run("return spawn('orc')")
    assert out.error.kind == "denied"
    assert out.error.message == "spawn: not approved for this mod [not_approved]"


def test_always_answers_are_remembered_for_the_mod(registry):
    calls = []

    def approve(request):
        calls.append(request.binding)
        return Answer.ALLOW_ALWAYS if request.binding == "spawn" else Answer.DENY_ALWAYS

    api = registry.mod("m", Permissions(mode="ask"), approve=approve)
    with api.sandbox() as sb:
        assert sb.run("for i = 1, 5 do spawn('x') end return 1").value == 1
        out = sb.run("for i = 1, 5 do pcall(nuke) end return nuke()")
        assert out.error.message == "nuke: not approved for this mod [not_approved]"
    assert calls == ["spawn", "nuke"]
    # Another mod's answers are its own.
    other = registry.mod("n", Permissions(mode="ask"), approve=lambda r: False)
    with other.sandbox() as sb:
        assert sb.run("return spawn('x')").error.kind == "denied"


def test_an_approver_that_raises_denies_and_is_logged(registry, caplog):
    def approve(request):
        raise RuntimeError("approver bug")

    with registry.mod("m", Permissions(mode="ask"), approve=approve).sandbox() as sb, \
            caplog.at_level(logging.ERROR):
        out = sb.run("return spawn('x')")
    assert out.error.kind == "denied"
    assert any("approver bug" in (r.exc_text or "") for r in caplog.records)


def test_no_answer_within_the_timeout_denies(registry):
    release = threading.Event()
    api = registry.mod("m", Permissions(mode="ask"), approve=lambda r: release.wait(5) or True,
                       approval_timeout_s=0.2)
    with api.sandbox(Budget(wall_s=30)) as sb:
        out = sb.run("return spawn('x')")
    release.set()
    assert out.error.kind == "denied"
    assert out.error.message == "spawn: no approval within 0.2 s [approval_timed_out]"


def test_the_wait_for_an_answer_does_not_count_against_the_wall_budget(registry, jit):
    def approve(request):
        time.sleep(0.8)
        return True

    # The wait (0.8 s) is past the budget (0.5 s), which leaves room for a loaded machine.
    api = registry.mod("m", Permissions(mode="ask"), approve=approve, approval_timeout_s=5)
    with api.sandbox(Budget(wall_s=0.5), jit=jit) as sb:
        out = sb.run("return spawn('x')")
    assert out.status == "done", out.error
    assert out.stats.wall_s >= 0.8  # the wall time is real; only the budget excludes it


def test_excluded_waiting_is_capped_per_resume(registry):
    # Each ask waits 0.15 s; at most approval_timeout_s (0.4 s) per resume is excluded, so
    # a mod asking again and again still runs out of time.
    def approve(request):
        time.sleep(0.15)
        return Answer.ALLOW

    api = registry.mod("m", Permissions(mode="ask"), approve=approve, approval_timeout_s=0.4)
    with api.sandbox(Budget(wall_s=0.2)) as sb:
        out = sb.run("for i = 1, 100 do spawn('x') end")
    # Out of time: a time trip, or the next ask refused at once for want of time.
    assert (out.status == "budget" and out.error.budget == "time") or (
        out.error.message.endswith("[approval_timed_out]")), out
    assert out.stats.wall_s < 5


def test_ask_mode_never_asks_for_read_bindings(registry):
    def approve(request):
        raise AssertionError("asked for a read binding")

    with registry.mod("m", Permissions(mode="ask"), approve=approve).sandbox() as sb:
        assert sb.run("return add(2, 3)").value == 5


# Found in review: every call of an 'ask' binding sent a new question while earlier ones
# were still out; their threads, shared with query reads, starved every other mod.
def test_one_question_at_a_time_and_queries_are_not_starved():
    from moonbox.bindings import QuerySource

    class Score(BaseModel):
        v: int

    registry = make_registry()
    registry.add_source(QuerySource("score", Empty, Score, read=lambda info, a: {"v": 42}))
    release = threading.Event()
    asked = []

    def approve(request):
        asked.append(request.binding)
        release.wait(10)
        return True

    bad = registry.mod("bad", Permissions(mode="ask"), approve=approve, approval_timeout_s=0.2)
    with bad.sandbox(Budget(wall_s=30)) as sb:
        out = sb.run("local r = {} for i = 1, 12 do local ok, e = pcall(nuke) r[i] = e end "
                     "return r")
    messages = out.value
    assert messages[0].endswith("nuke: no approval within 0.2 s [approval_timed_out]")
    assert all(m.endswith("an earlier approval is still pending [not_approved]")
               for m in messages[1:])
    assert asked == ["nuke"]
    with registry.mod("good", access="x").sandbox() as sb:
        assert sb.run("return query('score').v").value == 42
    release.set()
    registry.close()


def test_a_wait_never_outlasts_what_the_resume_has_left():
    # Wall budget 0.1 s, approval timeout 1 s, an approver that never answers: the first
    # ask may wait its excluded second, and nothing more waits after it.
    registry = make_registry()
    never = threading.Event()
    api = registry.mod("m", Permissions(mode="ask"), approve=lambda r: never.wait(10),
                       approval_timeout_s=1.0)
    with api.sandbox(Budget(wall_s=0.1)) as sb:
        t0 = time.perf_counter()
        out = sb.run("for i = 1, 5 do pcall(nuke) end for i = 1, 10 do end")
        elapsed = time.perf_counter() - t0
    never.set()
    assert out.status in ("done", "budget"), out
    assert elapsed < 2.5
    registry.close()


def test_an_approver_sees_a_callback_as_where_it_was_defined():
    from moonbox.bindings import LuaFunction

    class OnArgs(BaseModel):
        event: str
        fn: LuaFunction

    registry = Registry()
    registry.register(Binding("on_admin", OnArgs, lambda c, a: "registered", risk="danger"))
    requests = []
    api = registry.mod("m", Permissions(mode="auto"),
                       approve=lambda r: requests.append(r) or True)
    with api.sandbox() as sb:
        out = sb.run("return on_admin('tick', function() end)", "@mods/m/main.lua")
    assert out.value == "registered"
    assert requests[0].args == {"event": "tick", "fn": "mods/m/main.lua:1"}
    registry.close()


# -- risk and call ids -----------------------------------------------------------------------


def test_risk_defaults_to_write_so_read_only_mods_never_get_a_forgotten_one():
    registry = Registry()
    registry.register(Binding("paint", Empty, lambda c, a: None))

    @registry.binding("wipe", Empty)
    def wipe(call, args):
        """Wipe."""

    assert registry.get("paint").risk == "write" and wipe.risk == "write"
    assert "paint" not in registry.mod("m", Permissions(mode="readonly")).names
    assert "wipe" not in registry.mod("m", Permissions(mode="readonly")).names
    assert {"paint", "wipe"} <= set(registry.mod("m", Permissions(mode="auto")).names)
    registry.close()


def test_every_call_has_its_own_id_which_its_hooks_and_approval_share(caplog):
    from moonbox.bindings import Hook

    registry = make_registry()
    seen: list[tuple[str, int]] = []
    registry.add_hook(Hook("ids", pre_call=lambda info: seen.append(("pre", info.call_id)),
                           post_call=lambda info, r: seen.append(("post", info.call_id)) or r))
    registry.add_hook(Hook("broken", pre_call=lambda info: 1 / 0, match="spawn"))
    api = registry.mod("m", Permissions(mode="ask"),
                       approve=lambda r: seen.append(("ask", r.call_id)) or True)
    with api.sandbox() as sb, caplog.at_level(logging.ERROR):
        assert sb.run("spawn('a') spawn('b') return add(1, 2)").value == 3
    spawn_ids = [i for kind, i in seen if kind == "ask"]
    assert len(set(spawn_ids)) == 2
    for call_id in spawn_ids:
        assert [k for k, i in seen if i == call_id] == ["ask", "pre", "post"]
    add_ids = {i for _, i in seen} - set(spawn_ids)
    assert len(add_ids) == 1  # add has the hooks too, and no approval
    # The log line of the failing hook names the call.
    assert any(f"(call {spawn_ids[0]})" in r.getMessage() for r in caplog.records)
    registry.close()


def test_a_refusal_carries_its_calls_id():
    from moonbox import BindingError, HostCall

    registry = make_registry()
    api = registry.mod("m", Permissions(mode="ask"))
    (spawn,) = [f for f in api.host_functions if f.name == "spawn"]
    with pytest.raises(BindingError) as first:
        spawn(HostCall(None, None, "spawn"), ("orc",))  # type: ignore[arg-type]
    with pytest.raises(BindingError) as second:
        spawn(HostCall(None, None, "spawn"), ("orc",))  # type: ignore[arg-type]
    assert first.value.reason == "not_approved"
    assert first.value.call_id is not None and second.value.call_id > first.value.call_id
    registry.close()


@pytest.mark.parametrize("unpack", [False, True], ids=["short path", "lane"])
def test_a_call_nothing_observes_has_its_id_too(unpack):
    from moonbox import BindingError, HostCall

    class Pair(BaseModel):
        a: LuaNumber
        b: LuaNumber

    seen: list[int] = []

    def add(call, *args):
        seen.append(call.call_id)
        return 1.0

    registry = Registry()
    registry.register(Binding("pair", Pair, add if unpack else (lambda c, a: add(c)),
                              unpack=unpack))
    api = registry.mod("m")
    (pair,) = [f for f in api.host_functions if f.name == "pair"]
    assert (pair.lane is not None) == unpack  # the lane is the path under test
    with api.sandbox() as sb:
        assert sb.run("pair(1, 2) pair(3, 4) return pair(5, 6)").value == 1.0
    assert len(set(seen)) == 3 and all(i > 0 for i in seen) and seen == sorted(seen)
    # A refusal on the short path carries its id.
    with pytest.raises(BindingError) as refused:
        pair(HostCall(None, None, "pair"), ("x", 2))  # type: ignore[arg-type]
    assert refused.value.call_id is not None and refused.value.call_id > seen[-1]
    registry.close()


def test_the_call_history_keeps_the_last_calls_of_each_mod_with_their_trace_id():
    from moonbox.bindings import CallRecord, Hook, Veto

    registry = make_registry()
    registry.add_hook(Hook("no-orcs", match="spawn", pre_call=lambda info: Veto("no orcs")
                           if info.args.prefab == "orc" else None))
    seen_traces = []
    registry.add_hook(Hook("trace", pre_call=lambda info: seen_traces.append(info.trace_id)))
    api = registry.mod("m", Permissions(mode="full"))
    other = registry.mod("n", Permissions(mode="full"))
    assert api.calls == ()  # off unless asked for
    registry.record_calls(3)
    api.trace_id = "t-1"
    with api.sandbox() as sb:
        sb.run("add(1, 2) spawn('elf') pcall(spawn, 'orc') pcall(add, 'x') add(3, 4)")
    calls = api.calls
    assert [(c.binding, c.outcome, c.reason) for c in calls] == [
        ("spawn", "refused", "vetoed"), ("add", "refused", "invalid_arguments"),
        ("add", "ok", None)]
    assert all(isinstance(c, CallRecord) and c.trace_id == "t-1" for c in calls)
    assert [c.call_id for c in calls] == sorted(c.call_id for c in calls)
    assert calls[0].to_dict()["message"] == "no orcs [vetoed]"
    assert other.calls == ()  # per mod
    registry.trace_id = "t-all"  # the registry's trace, for mods without their own
    with other.sandbox() as sb:
        sb.run("add(1, 2)")
    assert [c.trace_id for c in other.calls] == ["t-all"]
    assert "t-1" in seen_traces and seen_traces[-1] == "t-all"
    registry.record_calls(0)
    assert api.calls == ()
    with pytest.raises(ConfigError):
        registry.record_calls(-1)
    registry.close()


def test_recording_calls_takes_the_lane_away_and_gives_it_back():
    class Pair(BaseModel):
        a: LuaNumber
        b: LuaNumber

    registry = Registry()
    registry.register(Binding("pair", Pair, lambda call, a, b: a + b, unpack=True))
    api = registry.mod("m")
    with api.sandbox() as sb:
        registry.record_calls(8)
        assert sb.run("return pair(1, 2)").value == 3
        assert [c.binding for c in api.calls] == ["pair"]
        registry.record_calls(0)
        assert sb.run("return pair(1, 2)").value == 3
    (pair,) = [f for f in api.host_functions if f.name == "pair"]
    assert pair._lane_version == registry._version  # the lane runs again
    registry.close()


def test_a_closed_mod_calls_nothing():
    registry = make_registry()
    api = registry.mod("m")
    with api.sandbox() as sb:
        assert sb.run("return add(1, 2)").value == 3
        api.close()
        assert api.closed
        assert sb.run("return add(1, 2)").error.message == \
            "add: is no longer available [unavailable]"
    registry.close()


def test_a_registry_copies_another_ones_bindings_but_keeps_its_own_query():
    first = make_registry()
    second = Registry(first)
    assert [b.name for b in second] == [b.name for b in first]
    assert second.get("query") is not first.get("query")
    first.close()
    second.close()
