"""``moonbox agent`` and ``moonbox eval-repair``, and the shipped repair corpus."""

from __future__ import annotations

import csv
import json

import pytest
from chat_server import ChatServer, chunk, reply_json, sse
from click.testing import CliRunner

from moonbox.agent import (
    ScriptedClient,
    eval_registry,
    load_corpus,
    load_replies,
    replies_path,
    run_repair_eval,
)
from moonbox.cli import cli
from moonbox.store import Store

KINDS = ("syntax", "runtime", "budget_steps", "budget_memory", "budget_time", "denied",
         "check", "no_code")


@pytest.fixture(scope="module")
def report():
    return run_repair_eval(load_corpus())


def test_the_corpus_has_twenty_tasks_each_with_replies():
    tasks = load_corpus()
    assert len(tasks) >= 20
    for task in tasks:
        assert task.check, task.id
        assert load_replies(replies_path(), task=task.id), task.id


def test_the_scripted_replies_exercise_every_failure_kind(report):
    first = report.rows()[0]
    for kind in KINDS:
        assert first[kind] >= 1, kind


def test_solved_per_round(report):
    assert [(r["round"], r["solved"]) for r in report.rows()] == [(0, 6), (1, 19), (2, 20),
                                                                 (3, 20)]
    assert report.total == 21
    unsolved = [t for t in report.tasks if t.solved_at is None]
    assert [t.id for t in unsolved] == ["tenth_prime"]
    assert unsolved[0].kinds == ("check", "check", "runtime", "syntax")


def test_the_eval_registry_covers_both_denial_paths():
    registry = eval_registry()
    assert registry.get("spawn").explain_denial and not registry.get("despawn").explain_denial
    registry.close()


def test_an_eval_with_a_client_for_every_task(report):
    # one client for all: the same replies in corpus order give the same outcome
    replies = []
    for task in load_corpus():
        replies += load_replies(replies_path(), task=task.id)
    again = run_repair_eval(load_corpus(), client=ScriptedClient(replies))
    assert again.rows() == report.rows()


def test_eval_repair_cli_prints_rounds_and_writes_csv(tmp_path):
    out = tmp_path / "rounds.csv"
    result = CliRunner().invoke(cli, ["eval-repair", "--csv", str(out)])
    assert result.exit_code == 0, result.output
    assert "solved per round" in result.output and "tenth_prime" in result.output
    rows = list(csv.DictReader(out.open()))
    assert [(r["round"], r["solved"], r["total"]) for r in rows] == [
        ("0", "6", "24"), ("1", "22", "24"), ("2", "23", "24"), ("3", "23", "24")]
    assert set(KINDS) <= set(rows[0])


def test_eval_repair_cli_json_and_fewer_repairs():
    result = CliRunner().invoke(cli, ["eval-repair", "--repairs", "1", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [r["solved"] for r in data["rounds"]] == [6, 22]
    result = CliRunner().invoke(cli, ["eval-repair", "--repairs", "1", "--json", "--no-game"])
    assert [r["solved"] for r in json.loads(result.output)["rounds"]] == [6, 19]


def _replay(tmp_path, *contents):
    path = tmp_path / "replies.jsonl"
    path.write_text("".join(json.dumps({"content": c}) + "\n" for c in contents))
    return str(path)


def test_agent_cli_replay_shows_attempts_and_the_script(tmp_path):
    replay = _replay(tmp_path, "```lua\nreturn +\n```", "```lua\nreport('hi')\nreturn 3\n```")
    store = tmp_path / "v.db"
    result = CliRunner().invoke(cli, ["agent", "say hi", "--replay", replay,
                                      "--store", str(store), "--key", "greet:main"])
    assert result.exit_code == 0, result.output
    assert "attempt 1" in result.output and "failed syntax at greet/main.lua:1" in result.output
    assert "report hi" in result.output and "solved after 2 attempt(s)" in result.output
    assert "recorded greet:main revision 1" in result.output
    with Store(store) as s:
        assert s.scripts.current("greet:main").role == "programmer"


def test_agent_cli_json_and_exit_status(tmp_path):
    replay = _replay(tmp_path, *["no code here"] * 2)
    result = CliRunner().invoke(cli, ["agent", "t", "--replay", replay, "--repairs", "1",
                                      "--json"])
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["status"] == "exhausted"
    assert [a["failure"]["kind"] for a in data["attempts"]] == ["no_code", "no_code"]


def test_agent_cli_needs_a_backend():
    result = CliRunner().invoke(cli, ["agent", "t"])
    assert result.exit_code == 2 and "--base-url" in result.output


def test_agent_cli_against_a_loopback_server(monkeypatch):
    monkeypatch.setenv("MOONBOX_CLI_KEY", "sk-cli-secret")
    with ChatServer() as server:
        server.push(sse([chunk(reasoning_content="hmm"), chunk("```lua\nreturn 7\n```")]))
        result = CliRunner().invoke(cli, ["agent", "seven", "--base-url", server.url,
                                          "--model", "m", "--api-key-env", "MOONBOX_CLI_KEY"])
        assert result.exit_code == 0, result.output
        assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-cli-secret"
    assert "sk-cli-secret" not in result.output and "hmm" not in result.output


def test_agent_cli_backend_failure_exits_2():
    with ChatServer() as server:
        server.push(reply_json({"error": {"message": "bad key"}}, 401))
        result = CliRunner().invoke(cli, ["agent", "t", "--base-url", server.url, "--model",
                                          "m", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.output)["error"]["code"] == "auth_failed"
