"""The Programmer loop end to end with the scripted client: every failure kind, the repair
context, events, versions, the rate limit, cancellation, prompts and the dry-run hook."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from pydantic import BaseModel

from moonbox import Budget, ScriptError
from moonbox.agent import (
    CancelToken,
    ClientError,
    Programmer,
    PromptBuilder,
    RateLimit,
    ScriptedClient,
    ScriptedReply,
    Task,
)
from moonbox.bindings import Binding, Permissions, Registry, default_bindings
from moonbox.store import Store

BUDGET = Budget(steps=50_000, alloc_bytes="1MB", wall_s=0.5, max_memory="16MB")
GOOD = "```lua\nreport('done')\nreturn 42\n```"


class SpawnArgs(BaseModel):
    prefab: str


@pytest.fixture
def registry():
    r = Registry(default_bindings())
    r.register(Binding("spawn", SpawnArgs, lambda call, a: 1, risk="write", group="world",
                       description="Spawn a prefab.", explain_denial=True))
    r.register(Binding("nuke", SpawnArgs, lambda call, a: 1, risk="danger", group="world",
                       description="Destroy everything."))
    yield r
    r.close()


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "versions.db") as s:
        yield s


def lua(code: str) -> str:
    return f"```lua\n{code}\n```"


def programmer(client, registry, **options):
    options.setdefault("budget", BUDGET)
    options.setdefault("new_trace_id", lambda: "trace-1")
    return Programmer(client, registry, **options)


def repair_prompt(client: ScriptedClient, request: int) -> str:
    return client.requests[request][1].content


# -- every failure kind, fed back -----------------------------------------------------------

FAILURES = {
    "syntax": (lua("local x = \nreturn x +"), Task("t"), "syntax"),
    "runtime": (lua("local t = nil\nreturn t.x"), Task("t"), "runtime"),
    "steps": (lua("local n = 0\nwhile true do\n  n = n + 1\nend"), Task("t"), "budget"),
    "memory": (lua("local s = string.rep('x', 40000)\nfor i = 1, 8 do s = s .. s end\nreturn #s"), Task("t"), "budget"),
    "time": (lua("while true do end"),
             Task("t", budget=Budget(steps=1 << 50, wall_s=0.3, alloc_bytes="1MB")),
             "budget"),
    "denied_stub": (lua("spawn('goblin')"), Task("t", permissions=Permissions(mode="readonly")),
                    "denied"),
    "denied_absent": (lua("nuke('all')"), Task("t"), "denied"),
    "check": (lua("return 41"), Task("t", checks=(lambda r: r.values == (42,) or "want 42",)),
              "check"),
    "no_code": ("I would return forty-two.", Task("t"), "no_code"),
}


@pytest.mark.parametrize("name", list(FAILURES))
def test_each_failure_kind_is_fed_back_and_repaired(registry, name):
    bad, task, kind = FAILURES[name]
    client = ScriptedClient([bad, GOOD])
    result = programmer(client, registry).run(task)
    assert result.status == "solved", result.to_dict()
    first, second = result.attempts
    assert first.failure.kind == kind and second.ok
    assert result.source == "report('done')\nreturn 42"
    context = repair_prompt(client, 1)
    assert "## Attempt 1 of 4 failed" in context
    assert f"Error kind: {kind}" in context
    if kind != "no_code":
        assert "The script that failed:" in context
    if name in ("steps", "memory", "time"):
        assert first.failure.budget == name
        assert f"Budget that ran out: {name} (limit" in context
    if name == "steps":
        assert "limit 50,000" in context
    if name.startswith("denied"):
        assert first.failure.binding == ("spawn" if name == "denied_stub" else "nuke")
        assert f"Permission that refused it: {first.failure.binding} is denied" in context
    if name == "check":
        assert "Acceptance checks that failed:" in context and "want 42" in context
    if name == "no_code":
        assert "no ```lua block" in context


def test_an_empty_reply_counts_as_no_code(registry):
    client = ScriptedClient([ScriptedReply(content="", reasoning="only thoughts"), GOOD])
    result = programmer(client, registry).run("t")
    assert result.solved and result.attempts[0].failure.kind == "no_code"


def test_repair_context_has_place_frames_numbered_code_and_reports(registry):
    bad = lua("report('starting')\nlocal function boom()\n  error('kaboom')\nend\nboom()")
    client = ScriptedClient([bad, GOOD])
    result = programmer(client, registry).run(Task("t", key="waves:main"))
    failure = result.attempts[0].failure
    assert (failure.kind, failure.chunk, failure.line) == ("runtime", "@waves/main.lua", 3)
    assert failure.reports == ("starting",)
    context = repair_prompt(client, 1)
    assert "Where: waves/main.lua:3" in context
    assert "Traceback (innermost first):" in context and "waves/main.lua:5" in context
    assert ">> 3 |   error('kaboom')" in context
    assert "   1 | report('starting')" in context
    assert "report() output:\n  starting" in context
    # the task stays in the tail, after the world state
    assert context.index("## Task") < context.index("## Attempt 1")


def test_exhaustion_reports_every_attempt(registry):
    client = ScriptedClient([lua("return +"), lua("error('x')"), "no code", lua("return +")])
    events = []
    result = programmer(client, registry, on_event=events.append).run("t")
    assert result.status == "exhausted" and len(result.attempts) == 4
    assert [a.failure.kind for a in result.attempts] == ["syntax", "runtime", "no_code",
                                                         "syntax"]
    assert events[-1].name == "repair_exhausted"
    assert "## Attempt 3 of 4 failed" in repair_prompt(client, 3)


def test_max_repairs_is_configurable(registry):
    client = ScriptedClient([lua("return +"), GOOD])
    result = programmer(client, registry, max_repairs=0).run("t")
    assert result.status == "exhausted" and len(result.attempts) == 1
    assert client.remaining == 1


def test_events_in_order_with_the_trace_id(registry):
    events = []
    client = ScriptedClient([lua("return +"), GOOD])
    programmer(client, registry, on_event=events.append).run("t")
    assert [e.name for e in events] == [
        "generation_started", "generation_finished", "execution_failed",
        "repair_requested", "generation_started", "generation_finished",
        "execution_succeeded",
    ]
    assert {e.trace_id for e in events} == {"trace-1"}
    assert [e.attempt for e in events] == [1, 1, 1, 2, 2, 2, 2]


def test_streaming_emits_deltas_and_gives_the_same_result(registry):
    events = []
    client = ScriptedClient([GOOD])
    result = programmer(client, registry, stream=True, on_event=events.append).run("t")
    assert result.solved and result.source == "report('done')\nreturn 42"
    text = "".join(e.data["text"] for e in events if e.name == "generation_delta")
    assert text == GOOD


def test_a_failing_listener_does_not_stop_the_loop(registry):
    def listener(event):
        raise RuntimeError("display broke")

    assert programmer(ScriptedClient([GOOD]), registry, on_event=listener).run("t").solved


def test_backend_failure_ends_with_client_error(registry):
    client = ScriptedClient([ScriptedReply(error="auth_failed")])
    result = programmer(client, registry).run("t")
    assert result.status == "client_error" and isinstance(result.error, ClientError)
    assert result.error.code == "auth_failed" and result.attempts == ()


# -- reasoning stays out --------------------------------------------------------------------

def test_reasoning_never_reaches_extraction_history_or_store(registry, store):
    thought = "SECRET-THOUGHT ```lua\nreturn 'from reasoning'\n```"
    client = ScriptedClient([
        ScriptedReply(content=f"<think>{thought}</think>{GOOD}", reasoning=thought),
    ])
    result = programmer(client, registry, store=store, stream=True).run(
        Task("t", key="waves:main"))
    assert result.solved and result.source == "report('done')\nreturn 42"
    assert "SECRET-THOUGHT" not in json.dumps(result.to_dict())
    exported = store.scripts.current("waves:main")
    assert "SECRET-THOUGHT" not in exported.content


# -- versions -------------------------------------------------------------------------------

def test_success_records_a_version_with_trace_id_and_role(registry, store):
    client = ScriptedClient([GOOD], model="model-x")
    result = programmer(client, registry, store=store).run(Task("t", key="waves:main"))
    current = store.scripts.current("waves:main")
    assert result.revision == current.rev == 1
    assert (current.author, current.role, current.trace_id) == ("model-x", "programmer",
                                                                 "trace-1")
    assert current.content == result.source


def test_failures_are_recorded_and_success_becomes_current(registry, store):
    store.scripts.record_success("waves:main", "return 'shipped'", author="human")
    client = ScriptedClient([lua("return +"), GOOD])
    result = programmer(client, registry, store=store).run(Task("t", key="waves:main"))
    history = store.scripts.history("waves:main")
    assert [(r.rev, r.outcome) for r in history] == [(3, "ok"), (2, "failed"), (1, "ok")]
    failed = history[1]
    assert failed.trace_id == "trace-1" and failed.role == "programmer"
    assert failed.error.startswith("syntax at waves/main.lua:1")
    assert result.revision == 3 and store.scripts.current("waves:main").rev == 3


def test_exhaustion_keeps_the_last_good_version(registry, store):
    store.scripts.record_success("waves:main", "return 'shipped'", author="human")
    client = ScriptedClient([lua("return +")] * 4)
    result = programmer(client, registry, store=store).run(Task("t", key="waves:main"))
    assert result.status == "exhausted"
    assert result.source == "return 'shipped'" and result.revision == 1
    assert store.scripts.current("waves:main").rev == 1
    assert store.scripts.info("waves:main").latest == 5


def test_failures_on_a_new_key_stay_in_the_result(registry, store):
    client = ScriptedClient([lua("return +"), GOOD])
    result = programmer(client, registry, store=store).run(Task("t", key="new:main"))
    assert [r.outcome for r in store.scripts.history("new:main")] == ["ok"]
    assert store.scripts.original("new:main").content == result.source
    assert not result.attempts[0].ok


# -- rate limit -----------------------------------------------------------------------------

def test_rate_limit_stops_a_runaway_cycle(registry):
    now = [0.0]
    limit = RateLimit(3, 60.0, clock=lambda: now[0])
    client = ScriptedClient([lua("return +")] * 10)
    events = []
    result = programmer(client, registry, rate_limit=limit, max_repairs=9,
                        on_event=events.append).run("t")
    assert result.status == "rate_limited" and len(result.attempts) == 3
    assert result.error.code == "generation_limit"
    assert events[-1].name == "rate_limited"
    now[0] = 61.0
    again = programmer(ScriptedClient([GOOD]), registry, rate_limit=limit).run("t")
    assert again.solved


def test_the_rate_limit_is_per_role_and_shared(registry):
    limit = RateLimit(1, 60.0, clock=lambda: 0.0)
    assert programmer(ScriptedClient([GOOD]), registry, rate_limit=limit).run("t").solved
    assert programmer(ScriptedClient([GOOD]), registry,
                      rate_limit=limit).run("t").status == "rate_limited"
    reviewer = programmer(ScriptedClient([GOOD]), registry, rate_limit=limit, role="reviewer",
                          role_text="You review scripts.")
    assert reviewer.run("t").solved
    assert "You review scripts." in reviewer.client.requests[0][0].content


def test_a_role_without_a_prompt_is_a_config_error(registry):
    from moonbox import ConfigError

    with pytest.raises(ConfigError, match="reviewer"):
        programmer(ScriptedClient([]), registry, role="reviewer")


def test_rate_limit_default_is_twenty_per_minute():
    limit = RateLimit()
    assert (limit.max_generations, limit.window_s) == (20, 60.0)


# -- cancellation ---------------------------------------------------------------------------

def test_cancelled_before_start(registry):
    token = CancelToken()
    token.cancel()
    client = ScriptedClient([GOOD])
    result = programmer(client, registry).run("t", cancel=token)
    assert result.status == "cancelled" and client.requests == []


def test_cancelled_while_streaming(registry):
    token = CancelToken()

    def on_event(event):
        if event.name == "generation_delta":
            token.cancel()

    result = programmer(ScriptedClient([GOOD]), registry, stream=True,
                        on_event=on_event).run("t", cancel=token)
    assert result.status == "cancelled" and result.attempts == ()


# -- the dry-run hook and checks ------------------------------------------------------------

@dataclass
class HostResult:
    status: str
    values: tuple
    error: ScriptError | None
    reports: tuple
    world: dict


def test_a_host_dry_run_hook_and_checks_on_its_result(registry):
    seen = []

    def dry_run(script):
        seen.append(script)
        if "boom" in script.source:
            raise ScriptError("host refused", chunk=script.chunk, line=1)
        return HostResult("done", (), None, ("ran",), {"goblins": script.source.count("goblin")})

    def five_goblins(result):
        return result.world["goblins"] == 5 or f"{result.world['goblins']} goblins, want 5"

    client = ScriptedClient([lua("-- boom"), lua("-- goblin goblin"),
                             lua("-- " + "goblin " * 5)])
    task = Task("t", key="waves:main", checks=(five_goblins,))
    result = programmer(client, registry, dry_run=dry_run).run(task)
    assert result.solved and len(seen) == 3
    assert [a.failure.kind for a in result.attempts[:2]] == ["runtime", "check"]
    assert "2 goblins, want 5" in repair_prompt(client, 2)
    assert (seen[0].chunk, seen[0].mod_id, seen[0].attempt) == ("@waves/main.lua", "waves", 1)


def test_a_check_that_raises_fails_the_attempt(registry):
    def broken(result):
        raise KeyError("oops")

    client = ScriptedClient([GOOD, GOOD])
    result = programmer(client, registry, max_repairs=1).run(Task("t", checks=(broken,)))
    assert result.status == "exhausted"
    assert "the check raised KeyError" in result.attempts[0].failure.message


# -- prompts --------------------------------------------------------------------------------

def test_the_prefix_is_byte_identical_across_rounds_and_tasks(registry):
    client = ScriptedClient([lua("return +"), lua("error('x')"), GOOD, GOOD])
    p = programmer(client, registry)
    p.run(Task("first", world_summary="3 goblins"))
    p.run(Task("second"))
    systems = {request[0].content for request in client.requests}
    assert len(systems) == 1
    tails = [request[1].content for request in client.requests]
    assert "## World state\n\n3 goblins" in tails[0] and "## Task\n\nfirst" in tails[0]
    assert "## Task\n\nsecond" in tails[3] and "World state" not in tails[3]


def test_the_mod_api_follows_the_permissions(registry):
    auto = PromptBuilder(registry, Permissions(mode="auto"), budget=BUDGET).prefix
    readonly = PromptBuilder(registry, Permissions(mode="readonly"), budget=BUDGET).prefix
    assert "- spawn(prefab: string): Spawn a prefab. [write; 1 step]" in auto
    assert "- nuke(prefab: string): Destroy everything. [danger; 1 step; asks the host" in auto
    assert "asks the host first and may be refused: [not_approved], [approval_timed_out], " \
           "[approval_cancelled]" in auto
    assert "its own codes: [unknown_source]" in auto  # query's
    # Every prompt names the codes any call may meet.
    for code in ("[invalid_arguments]", "[vetoed]", "[unavailable]", "[aborted]", "[failed]"):
        assert code in auto and code in readonly
    assert "- spawn(" not in readonly
    assert "Denied to this script (do not call): nuke, spawn." in readonly
    assert "- add(a: number, b: number)" in readonly
    assert "steps: 50,000" in auto and "new memory: 1 MiB" in auto


def test_host_rules_and_stub_style(registry):
    builder = PromptBuilder(registry, Permissions(), budget=BUDGET, host_rules="Goblins are green.",
                            api_style="stubs")
    assert "## Host rules\n\nGoblins are green." in builder.prefix
    assert "---@meta" in builder.prefix and "function spawn(prefab) end" in builder.prefix
    assert builder.prefix == PromptBuilder(registry, Permissions(), budget=BUDGET,
                                           host_rules="Goblins are green.",
                                           api_style="stubs").prefix
