"""The task inbox of a running dev session: a task given from outside the process, its
attempts run while the game ticks (forks and the swap between two ticks), shown as they
run, and the companion command that gives the task and follows it."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from moonbox.agent import InboxRunner, ScriptedClient, TaskInbox
from moonbox.cli import cli
from moonbox.mods import DevSession, ModHost
from moonbox.mods._dev import arena_game, render
from moonbox.store import Store

WAIT_S = 60

V1 = """
local n = state_get("n") or 0
every(1, function() n = n + 1; state_set("n", n) end)
"""

SPAWNS = """
coreai_world_spawn{prefab = "enemy", name = "e1", x = 3, y = 4}
"""

UNKNOWN_PREFAB = """
coreai_world_spawn{prefab = "dragon", name = "d1"}
"""


def lua(code: str) -> str:
    return f"```lua\n{code}\n```"


@pytest.fixture
def dev(tmp_path):
    mods = tmp_path / "mods"
    (mods / "waves").mkdir(parents=True)
    (mods / "waves" / "mod.toml").write_text('id = "waves"\nversion = "1.0.0"\n'
                                            '[permissions]\nmode = "auto"\n')
    (mods / "waves" / "main.lua").write_text(V1)
    store = Store(tmp_path / "versions.db")
    game = arena_game()
    host = ModHost(game, mods, store=store)
    session = DevSession(host, tick_s=0.0, watch=False)
    assert all(r.ok for r in session.start())
    yield mods, host, session
    session.close()
    game.close()
    store.close()


def step_until(session: DevSession, done) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, "the task never finished"
        session.step()


def records(inbox: TaskInbox, task_id: str) -> list[dict]:
    return [json.loads(line) for line in
            inbox.events_path(task_id).read_text().splitlines()]


def test_a_task_from_the_inbox_is_worked_on_while_the_game_runs_and_goes_live(dev):
    mods, host, session = dev
    client = ScriptedClient([lua(UNKNOWN_PREFAB), lua(SPAWNS)])
    inbox = TaskInbox.of(mods)
    runner = InboxRunner(inbox, host, session, client)
    session.on_step = runner.poll_now
    try:
        task_id = inbox.submit("waves", "spawn an enemy", owner="alice")
        step_until(session, lambda: task_id in runner.tickets and
                   runner.tickets[task_id].done())
        result = runner.tickets[task_id].result()
    finally:
        runner.close()
    assert result.solved and [a.ok for a in result.attempts] == [False, True]
    names = [r["event"] for r in records(inbox, task_id)]
    assert names[0] == "task_claimed" and names[-1] == "task_finished"
    assert "execution_failed" in names and "went_live" in names
    finished = records(inbox, task_id)[-1]
    assert finished["result"]["status"] == "solved"
    assert finished["result"]["attempts"][0]["refused"][0]["reason"] == "unknown_prefab"
    # The live game: the new version runs, nothing of the failed attempt is in the world.
    assert host.store.scripts.current("mods/waves/main.lua").content == SPAWNS
    session.step()
    assert host.game.world.get("e1") is not None and host.game.world.get("d1") is None
    # The view shows the attempts as they ran.
    lines = [line for _, _, line in session.notes]
    assert any("attempt 1 failed: refused" in line for line in lines)
    assert any("attempt 2 is live" in line for line in lines)
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(render(session))
    assert "programmer" in console.export_text()
    # A task is taken once.
    assert inbox.unclaimed() == []


def test_a_task_for_a_mod_that_is_not_running_fails_plainly(dev):
    mods, host, session = dev
    inbox = TaskInbox.of(mods)
    runner = InboxRunner(inbox, host, session, ScriptedClient([lua(SPAWNS)]))
    try:
        task_id = inbox.submit("nobody", "spawn an enemy")
        assert runner.poll_now() == [task_id]
    finally:
        runner.close()
    last = records(inbox, task_id)[-1]
    assert last["event"] == "task_failed" and "nobody" in last["error"]


def test_the_companion_command_gives_the_task_and_follows_it(dev):
    mods, host, session = dev
    client = ScriptedClient([lua(UNKNOWN_PREFAB), lua(SPAWNS)])
    runner = InboxRunner(TaskInbox.of(mods), host, session, client)
    session.on_step = runner.poll_now
    stop = threading.Event()

    def serve() -> None:  # the dev session's thread: it alone touches the game
        while not stop.is_set():
            session.step()
            time.sleep(0.002)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        result = CliRunner().invoke(cli, ["agent", "spawn an enemy", "--mods", str(mods),
                                          "--mod", "waves", "--dev"])
        assert result.exit_code == 0, result.output
        assert "failed refused" in result.output and "live" in result.output
        assert "solved after 2 attempt(s)" in result.output
        result = CliRunner().invoke(cli, ["agent", "spawn an enemy", "--mods", str(mods),
                                          "--mod", "nobody", "--dev", "--json"])
        assert result.exit_code == 2 and "nobody" in result.output
    finally:
        stop.set()
        thread.join(WAIT_S)
        runner.close()


def test_the_companion_command_says_when_no_session_serves_the_inbox(tmp_path: Path):
    result = CliRunner().invoke(cli, ["agent", "t", "--mods", str(tmp_path), "--mod", "m",
                                      "--dev", "--wait", "0.3"])
    assert result.exit_code == 2 and "agent-config running?" in result.output


def test_dev_serves_the_inbox_with_agent_options(dev, tmp_path):
    mods, _, _ = dev
    replay = tmp_path / "replies.jsonl"
    replay.write_text(json.dumps({"content": lua(SPAWNS)}) + "\n")
    inbox = TaskInbox.of(mods)
    task_id = inbox.submit("waves", "spawn an enemy")
    result = CliRunner().invoke(cli, ["dev", str(mods), "--no-store", "--ticks", "1",
                                      "--agent-replay", str(replay)])
    assert result.exit_code == 0, result.output
    # Taken on the session's first step, before its first tick.
    assert records(inbox, task_id)[0]["event"] == "task_claimed"
    result = CliRunner().invoke(cli, ["dev", str(mods), "--no-store", "--ticks", "1",
                                      "--agent-replay", str(replay), "--agent-config",
                                      str(replay)])
    assert result.exit_code == 2 and "not both" in result.output
