"""LLM routing by role, against real HTTP servers on loopback: the config file, the role ->
profile map, switching at run time, the readiness probe, usage and retries on the events;
and the control around requests: LLM hooks, stopping a task (a buffered generation too),
the queue's owners, budget trips as records, the binding calls of each attempt."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest
from chat_server import ChatServer, completion, reply_json

from moonbox import Budget, ConfigError
from moonbox.agent import (
    LLMHook,
    LLMRequest,
    Programmer,
    RequestQueue,
    Router,
    RoutingConfig,
    ScriptedClient,
    Task,
)
from moonbox.bindings import Registry, Veto, default_bindings

WAIT_S = 30
BUDGET = Budget(steps=50_000, alloc_bytes="1MB", wall_s=5, max_memory="16MB")
GOOD = "```lua\nreport('done')\nreturn add(1, 2)\n```"


def lua(code: str) -> str:
    return f"```lua\n{code}\n```"


def config_text(a: str, b: str, *, key_env: str | None = None) -> str:
    key = f'api_key_env = "{key_env}"\n' if key_env else ""
    return f"""
[endpoints.a]
base_url = "{a}"
{key}retry = {{ max_retries = 2, backoff_s = 0.0, max_backoff_s = 0.0 }}

[endpoints.b]
base_url = "{b}"
idle_timeout_s = 20

[profiles.small]
endpoint = "a"
model = "small-model"
temperature = 0.1

[profiles.large]
endpoint = "b"
model = "large-model"
max_tokens = 512

[roles]
programmer = "small"
reviewer = "large"
"""


@pytest.fixture
def registry():
    r = Registry(default_bindings())
    yield r
    r.close()


@pytest.fixture
def servers():
    with ChatServer() as a, ChatServer() as b:
        yield a, b


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llm.toml"
    path.write_text(text)
    return path


# -- the config --------------------------------------------------------------------------------


def test_the_config_file_names_endpoints_profiles_and_roles(tmp_path, servers):
    a, b = servers
    config = RoutingConfig.load(write_config(tmp_path, config_text(a.url, b.url)))
    assert config.roles == {"programmer": "small", "reviewer": "large"}
    assert config.endpoints["a"].retry.max_retries == 2
    assert config.endpoints["b"].idle_timeout_s == 20
    assert config.profiles["large"].max_tokens == 512


@pytest.mark.parametrize(("change", "says"), [
    (lambda t: t.replace('endpoint = "b"', 'endpoint = "c"'), "profile 'large' "
     "names the endpoint 'c'"),
    (lambda t: t.replace('reviewer = "large"', 'reviewer = "huge"'), "role 'reviewer' maps "
     "to the profile 'huge'"),
    (lambda t: t.replace('model = "small-model"', 'model = "small-model"\nmodle = 1'),
     "profiles.small.modle"),
    (lambda t: t.replace('base_url = "http', 'base_url = "ftp'), "endpoints.a.base_url"),
    (lambda t: t + "[[[", "not TOML"),
])
def test_a_bad_config_is_one_line_saying_where(tmp_path, change, says):
    path = write_config(tmp_path, change(config_text("http://127.0.0.1:1/v1",
                                                     "http://127.0.0.1:2/v1")))
    with pytest.raises(ConfigError) as info:
        RoutingConfig.load(path)
    assert says in str(info.value) and "\n" not in str(info.value)


# -- routing and switching -------------------------------------------------------------------


def test_each_role_goes_to_its_profile_and_a_switch_takes_the_next_request(
        tmp_path, servers, registry):
    a, b = servers
    a.push(reply_json(completion("no code here")))
    b.push(reply_json({**completion(GOOD), "usage": {"prompt_tokens": 40,
                                                      "completion_tokens": 9}}))
    router = Router.load(write_config(tmp_path, config_text(a.url, b.url)))
    events = []

    def listen(event):
        events.append(event)
        if event.name == "execution_failed":  # the operator moves the role meanwhile
            assert router.switch("programmer", "large") == "small"

    try:
        client = router.client("programmer")
        assert (client.profile, client.model) == ("small", "small-model")
        result = Programmer(client, registry, budget=BUDGET, on_event=listen).run("t")
    finally:
        router.close()
    assert result.solved and len(result.attempts) == 2
    assert [r["body"]["model"] for r in a.requests] == ["small-model"]
    assert [r["body"]["model"] for r in b.requests] == ["large-model"]
    # The profile's options went with its requests.
    assert a.requests[0]["body"]["temperature"] == 0.1
    assert b.requests[0]["body"]["max_tokens"] == 512
    finished = [e for e in events if e.name == "generation_finished"]
    assert [(e.data["profile"], e.data["model"]) for e in finished] == [
        ("small", "m"), ("large", "m")]  # the model the server said it used
    assert finished[1].data["usage"] == {"prompt_tokens": 40, "completion_tokens": 9}
    assert all(e.trace_id == result.trace_id for e in finished)
    assert result.attempts[1].usage["prompt_tokens"] == 40
    assert result.to_dict()["attempts"][0]["usage"] == {"prompt_tokens": 3,
                                                        "completion_tokens": 2}
    assert router.roles["programmer"] == "large"


def test_retries_are_recorded_on_the_attempt_and_its_events(tmp_path, servers, registry):
    a, b = servers
    a.push(reply_json({"error": {"message": "loading"}}, 503),
           reply_json({"error": {"message": "loading"}}, 503),
           reply_json(completion(GOOD)))
    events = []
    with Router.load(write_config(tmp_path, config_text(a.url, b.url))) as router:
        result = Programmer(router.client("programmer"), registry, budget=BUDGET,
                            on_event=events.append).run("t")
    assert result.solved and len(a.requests) == 3
    (finished,) = [e for e in events if e.name == "generation_finished"]
    assert finished.data["retries"] == 2 and finished.data["usage"]["prompt_tokens"] == 3
    assert result.attempts[0].retries == 2


def test_a_streamed_reply_records_its_usage_chunk(tmp_path, servers, registry):
    from chat_server import chunk, sse

    a, b = servers
    a.push(sse([chunk(GOOD), chunk(finish="stop"),
                {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}]))
    with Router.load(write_config(tmp_path, config_text(a.url, b.url))) as router:
        result = Programmer(router.client("programmer"), registry, budget=BUDGET,
                            stream=True).run("t")
    assert result.solved and result.attempts[0].usage == {"prompt_tokens": 7,
                                                          "completion_tokens": 5}


def test_switching_to_an_unknown_profile_or_asking_for_an_unmapped_role_is_refused(
        tmp_path, servers):
    a, b = servers
    router = Router.load(write_config(tmp_path, config_text(a.url, b.url)))
    with pytest.raises(ConfigError, match="no profile is named 'huge'"):
        router.switch("programmer", "huge")
    with pytest.raises(ConfigError, match="no profile serves the role 'tester'"):
        router.client("tester")
    assert router.switch("tester", "small") is None  # a new role may be mapped
    assert router.client("tester").model == "small-model"
    router.close()


# -- readiness ---------------------------------------------------------------------------------


def test_the_readiness_probe_reports_each_role(tmp_path, servers, monkeypatch):
    a, b = servers
    monkeypatch.setenv("ROUTING_TEST_KEY", "sekret")
    a.push(reply_json({"data": [{"id": "small-model"}, {"id": "other"}]}))
    b.push(reply_json({"data": [{"id": "other"}]}))
    with Router.load(write_config(tmp_path, config_text(
            a.url, b.url, key_env="ROUTING_TEST_KEY"))) as router:
        found = {r.role: r for r in router.check()}
    assert found["programmer"].ready and found["programmer"].code == "ok"
    assert a.requests[0]["path"] == "/v1/models"
    assert a.requests[0]["headers"]["Authorization"] == "Bearer sekret"
    assert not found["reviewer"].ready and found["reviewer"].code == "model_not_listed"
    assert "sekret" not in json.dumps([r.to_dict() for r in found.values()])


def test_the_probe_falls_back_to_a_one_token_request_and_sees_a_dead_server(
        tmp_path, servers, monkeypatch):
    a, b = servers
    monkeypatch.delenv("ROUTING_TEST_KEY", raising=False)
    b.push(reply_json({"error": "no such route"}, 404), reply_json(completion("p")))
    dead = "http://127.0.0.1:9/v1"  # the discard port: nothing listens
    with Router.load(write_config(tmp_path, config_text(dead, b.url))) as router:
        found = {r.role: r for r in router.check()}
    assert found["reviewer"].ready and b.requests[1]["body"]["max_tokens"] == 1
    assert not found["programmer"].ready
    assert found["programmer"].code == "backend_unavailable"
    # A key variable that is not set is a config problem, found without a request.
    with Router.load(write_config(tmp_path, config_text(
            a.url, b.url, key_env="ROUTING_TEST_KEY"))) as router:
        (programmer,) = router.check(["programmer"])
    assert (programmer.ready, programmer.code) == (False, "config")
    assert a.requests == []


def test_agent_check_cli(tmp_path, servers):
    a, b = servers
    a.push(reply_json({"data": [{"id": "small-model"}]}))
    b.push(reply_json({"data": [{"id": "large-model"}]}))
    path = write_config(tmp_path, config_text(a.url, b.url))
    from click.testing import CliRunner

    from moonbox.cli import cli as main

    result = CliRunner().invoke(main, ["agent", "--check", "--config", str(path), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [(r["role"], r["ready"]) for r in rows] == [("programmer", True),
                                                       ("reviewer", True)]
    b.push(reply_json({"data": [{"id": "other"}]}))
    result = CliRunner().invoke(main, ["agent", "--check", "--config", str(path),
                                       "--role", "reviewer"])
    assert result.exit_code == 1 and "model_not_listed" in result.output


def test_agent_cli_runs_a_task_through_the_config(tmp_path, servers):
    a, b = servers
    b.push(reply_json(completion(GOOD)))
    path = write_config(tmp_path, config_text(a.url, b.url))
    from click.testing import CliRunner

    from moonbox.cli import cli as main

    result = CliRunner().invoke(main, ["agent", "add one and two", "--config", str(path),
                                       "--profile", "large", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["status"] == "solved" and data["attempts"][0]["usage"]["prompt_tokens"] == 3
    assert a.requests == [] and b.requests[0]["body"]["model"] == "large-model"


# -- hooks around requests -------------------------------------------------------------------


def test_llm_hooks_amend_veto_and_see_usage(servers, registry, caplog):
    from moonbox.agent import ChatClient

    a, _ = servers
    a.push(reply_json(completion(GOOD)))
    seen: list[tuple[str, object]] = []

    def cooler(request: LLMRequest):
        seen.append(("before", request.trace_id))
        return LLMRequest(**{**{f: getattr(request, f) for f in request.__dataclass_fields__},
                             "temperature": 0.0})

    hooks = [LLMHook("broken", before=lambda r: 1 / 0),
             LLMHook("cooler", before=cooler),
             LLMHook("meter", after=lambda r, reply: seen.append(("after", reply.usage)))]
    with ChatClient(a.url, "m") as client, caplog.at_level(logging.ERROR):
        result = Programmer(client, registry, budget=BUDGET, llm_hooks=hooks,
                            temperature=0.7).run("t")
    assert result.solved
    assert a.requests[0]["body"]["temperature"] == 0.0  # amended by the hook
    assert seen == [("before", result.trace_id),
                    ("after", {"prompt_tokens": 3, "completion_tokens": 2})]
    assert any("LLM hook 'broken' failed" in r.getMessage() for r in caplog.records)

    # A veto: every before hook still runs, and no request is sent.
    ran = []
    vetoing = [LLMHook("budget", before=lambda r: Veto("the day's tokens are spent")),
               LLMHook("audit", before=lambda r: ran.append(r.attempt))]
    with ChatClient(a.url, "m") as client:
        vetoed = Programmer(client, registry, llm_hooks=vetoing).run("t")
    assert vetoed.status == "vetoed" and vetoed.error.code == "vetoed"
    assert "the day's tokens are spent" in str(vetoed.error)
    assert ran == [1] and len(a.requests) == 1


# -- control ---------------------------------------------------------------------------------


def held_reply(gate: threading.Event, body):
    def act(h, server):
        gate.wait(WAIT_S)
        reply_json(body)(h, server)
    return act


def wait_for(condition) -> None:
    done = threading.Event()
    for _ in range(WAIT_S * 1000):
        if condition():
            return
        done.wait(0.001)
    raise AssertionError("never happened")


def test_stopping_a_task_interrupts_its_buffered_generation(servers, registry):
    from moonbox.agent import ChatClient

    a, _ = servers
    gate = threading.Event()
    a.push(held_reply(gate, completion(GOOD)))
    client = ChatClient(a.url, "m")
    programmer = Programmer(client, registry, budget=BUDGET, new_trace_id=lambda: "tr-1")
    with RequestQueue() as queue:
        ticket = queue.submit(lambda token: programmer.run("t", cancel=token),
                              scope="npc", owner="alice")
        wait_for(lambda: a.requests)  # the request is at the server, which holds it
        assert programmer.running == ("tr-1",)
        assert programmer.stop("tr-1", "the operator stopped it") == 1
        result = ticket.result(WAIT_S)  # returns without the server having answered
        assert not gate.is_set()
        assert ticket.state == "cancelled"  # not "done"
        assert result.status == "cancelled" and result.error.reason == \
            "the operator stopped it"
        assert programmer.running == ()
    gate.set()
    client.close()


def test_a_cancelled_running_ticket_ends_cancelled_and_two_owners_keep_their_scopes():
    started = threading.Event()

    def work(token):
        started.set()
        token._event.wait(WAIT_S)
        return "stopped early" if token.cancelled else "finished"

    with RequestQueue(max_concurrent=3) as queue:
        alice = queue.submit(work, scope="npc", owner="alice")
        assert started.wait(WAIT_S)
        bob = queue.submit(lambda token: "bob's", scope="npc", owner="bob")
        assert bob.result(WAIT_S) == "bob's" and bob.state == "done"
        assert alice.state == "running"  # bob's request of the same scope left it alone
        assert [t.owner for t in queue.tickets()] == ["alice"]
        newer = queue.submit(lambda token: "alice's newer", scope="npc", owner="alice")
        assert alice.result(WAIT_S) == "stopped early"
        assert alice.state == "cancelled" and alice.token.reason == "superseded"
        assert newer.result(WAIT_S) == "alice's newer"
        assert queue.cancel_owner("alice") == 0


def test_clearing_a_roles_context_rebuilds_the_prompt_from_the_bindings_of_now(registry):
    from pydantic import BaseModel

    from moonbox.bindings import Binding

    class Args(BaseModel):
        name: str

    client = ScriptedClient([GOOD, GOOD, GOOD])
    programmer = Programmer(client, registry, budget=BUDGET)
    programmer.run("t")
    registry.register(Binding("greet", Args, lambda c, a: None, risk="read",
                              description="Greet someone."))
    programmer.run("t")
    assert "greet" not in client.requests[1][0].content  # the cached prefix
    programmer.clear_context()
    programmer.run("t")
    assert "greet" in client.requests[2][0].content


# -- what an attempt records -------------------------------------------------------------------


def test_a_budget_trip_is_a_structured_record_and_an_event(registry, caplog):
    client = ScriptedClient([lua("while true do end"), GOOD])
    events = []
    budget = Budget(steps=10_000, alloc_bytes="1MB", wall_s=30, max_memory="16MB")
    with caplog.at_level(logging.WARNING, logger="moonbox.agent"):
        result = Programmer(client, registry, budget=budget, on_event=events.append,
                            new_trace_id=lambda: "tr-9").run(Task("t", key="waves:main"))
    assert result.solved
    (record,) = [r for r in caplog.records if hasattr(r, "moonbox")]
    assert record.moonbox == {"event": "budget_tripped", "trace_id": "tr-9", "attempt": 1,
                              "mod": "waves", "key": "waves:main", "budget": "steps",
                              "limit": 10_000, "used": record.moonbox["used"],
                              "unit": "steps", "where": record.moonbox["where"]}
    assert record.moonbox["used"] >= 10_000
    (event,) = [e for e in events if e.name == "budget_tripped"]
    assert event.trace_id == "tr-9" and event.data["budget"] == "steps"


def test_each_attempt_keeps_its_binding_calls_with_their_ids_and_the_trace(registry):
    client = ScriptedClient([lua("add(1, 2)\nreturn add('x', 1)"), GOOD])
    result = Programmer(client, registry, budget=BUDGET,
                        new_trace_id=lambda: "tr-5").run("t")
    first, second = result.attempts
    assert [(c["binding"], c["outcome"], c["reason"]) for c in first.calls] == [
        ("add", "ok", None), ("add", "refused", "invalid_arguments")]
    assert [(c["binding"], c["outcome"]) for c in second.calls] == [("report", "ok"),
                                                                   ("add", "ok")]
    ids = [c["call_id"] for a in result.attempts for c in a.calls]
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert {c["trace_id"] for a in result.attempts for c in a.calls} == {"tr-5"}
    assert result.to_dict()["attempts"][1]["calls"][1]["binding"] == "add"
    # The registry itself still records nothing: the history was the attempt's mod's.
    assert registry.call_history == 0


def test_agent_check_cli_without_a_config_probes_one_endpoint(servers):
    from click.testing import CliRunner

    from moonbox.cli import cli as main

    a, _ = servers
    a.push(reply_json({"data": [{"id": "m"}]}))
    result = CliRunner().invoke(main, ["agent", "--check", "--base-url", a.url, "--model",
                                       "m", "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert row["ready"] and row["model"] == "m" and row["role"] == "programmer"
    result = CliRunner().invoke(main, ["agent", "--check", "--base-url",
                                       "http://127.0.0.1:9/v1", "--model", "m"])
    assert result.exit_code == 1 and "backend_unavailable" in result.output
    result = CliRunner().invoke(main, ["agent", "--check"])
    assert result.exit_code == 2
