"""The Programmer in a running game: attempts in a fork, only a verified success goes live."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chat_server import ChatServer, completion, reply_json
from click.testing import CliRunner

from moonbox import ConfigError
from moonbox.agent import (
    GameRun,
    LiveMod,
    ScriptedClient,
    game_corpus_path,
    load_corpus,
    run_repair_eval,
)
from moonbox.agent._eval import checks_from_spec
from moonbox.cli import cli
from moonbox.cli._agent import eval_game_host
from moonbox.mods import ModHost
from moonbox.mods._dev import arena_game
from moonbox.store import Store
from moonbox.world import World

V1 = """
local n = state_get("n") or 0
every(1, function() n = n + 1; state_set("n", n) end)
"""

SPAWNS = """
coreai_world_spawn{prefab = "enemy", name = "e1", x = 3, y = 4}
every(1, function() state_set("n", (state_get("n") or 0) + 100) end)
function on_reload(old) state_set("from", old.n) end
"""

UNKNOWN_PREFAB = """
state_set("n", -1)
coreai_world_spawn{prefab = "dragon", name = "d1"}
"""

RUNTIME = """
state_set("n", -2)
coreai_world_spawn{prefab = "enemy", name = "e9"}
local t = nil
every(1, function() return t.x end)
"""


def lua(code: str) -> str:
    return f"```lua\n{code}\n```"


def write_mod(root: Path, mod_id: str, main: str) -> None:
    folder = root / mod_id
    folder.mkdir(parents=True)
    (folder / "mod.toml").write_text(f'id = "{mod_id}"\nversion = "1.0.0"\n'
                                     '[permissions]\nmode = "auto"\n')
    (folder / "main.lua").write_text(main)


@pytest.fixture
def live(tmp_path):
    mods = tmp_path / "mods"
    mods.mkdir()
    write_mod(mods, "waves", V1)
    store = Store(tmp_path / "versions.db")
    game = arena_game()
    host = ModHost(game, mods, store=store)
    assert all(r.ok for r in host.load_all())
    for _ in range(3):
        game.tick()
    yield host
    host.close()
    game.close()
    store.close()


def _fingerprint(host: ModHost) -> tuple[str, dict, int]:
    game = host.game
    return game.world.content_hash(), dict(game.mod("waves").state), game.tick_count


def test_failed_attempts_leave_the_live_world_and_state_unchanged(live):
    before = _fingerprint(live)
    target = LiveMod(live, "waves")
    client = ScriptedClient([lua(UNKNOWN_PREFAB), lua(RUNTIME)])
    result = target.programmer(client, max_repairs=1).run(target.task("spawn an enemy"))
    assert result.status == "exhausted"
    assert [a.failure.kind for a in result.attempts] == ["refused", "runtime"]
    assert _fingerprint(live) == before
    assert live.game.world.get("d1") is None and live.game.world.get("e9") is None
    # the old version runs on, and the store says the attempts failed
    assert result.source == V1
    history = live.store.scripts.history("mods/waves/main.lua")
    assert [r.outcome for r in history][:2] == ["failed", "failed"]
    assert live.store.scripts.current("mods/waves/main.lua").content == V1
    live.game.tick()
    assert live.game.mod("waves").state["n"] == before[1]["n"] + 1


def test_a_refused_command_fails_the_attempt_and_reaches_the_next_prompt(live):
    target = LiveMod(live, "waves")
    client = ScriptedClient([lua(UNKNOWN_PREFAB), lua(SPAWNS)])
    result = target.programmer(client).run(target.task("spawn an enemy"))
    assert result.solved
    first = result.attempts[0].failure
    assert first.kind == "refused" and first.refused[0].reason == "unknown_prefab"
    repair = client.requests[1][-1].content
    assert "unknown_prefab" in repair and "World commands refused" in repair
    assert "## World state" in repair and "Prefabs that may be spawned" in repair


def test_a_success_goes_live_through_the_reload_path_and_is_recorded(live):
    n_before = live.game.mod("waves").state["n"]
    target = LiveMod(live, "waves")
    client = ScriptedClient([lua(RUNTIME), lua(SPAWNS)], model="m1")
    result = target.programmer(client).run(target.task("spawn an enemy"))
    assert result.solved and result.revision is not None
    current = live.store.scripts.current("mods/waves/main.lua")
    assert current.content == SPAWNS and current.rev == result.revision
    assert current.role == "programmer" and current.trace_id == result.trace_id
    assert current.author == "m1"
    state = live.game.mod("waves").state
    assert state["from"] == n_before  # the state carried, on_reload called
    live.game.tick()  # the spawn the main chunk issued is applied on the live tick
    assert live.game.world.get("e1") is not None
    assert live.game.mod("waves").state["n"] == n_before + 100  # old timer cancelled
    assert live.mods["waves"].reloads == 1


def test_the_fork_sees_the_world_and_state_of_the_current_tick(live):
    seen = {}

    def check(run):
        seen["n"] = run.state.get("from")
        seen["e1"] = run.world.get("e1") is not None
        return True

    n_now = live.game.mod("waves").state["n"]
    target = LiveMod(live, "waves")
    result = target.programmer(ScriptedClient([lua(SPAWNS)])).run(
        target.task("spawn", checks=(check,)))
    assert result.solved
    assert seen == {"n": n_now, "e1": True}


def test_a_failed_acceptance_check_shows_its_message_and_keeps_the_old_version(live):
    def two_enemies(run):
        count = sum(1 for e in run.world.entities() if e.prefab == "enemy")
        return None if count >= 2 else f"want 2 enemies, found {count}"

    before = _fingerprint(live)
    target = LiveMod(live, "waves")
    client = ScriptedClient([lua(SPAWNS)] * 2)
    result = target.programmer(client, max_repairs=1).run(
        target.task("spawn two enemies", checks=(two_enemies,)))
    assert result.status == "exhausted" and result.source == V1
    assert "want 2 enemies, found 1" in client.requests[1][-1].content
    assert _fingerprint(live) == before


# -- moonbox agent --mods DIR --mod ID ------------------------------------------------------

def _replay(tmp_path: Path, *codes: str) -> str:
    path = tmp_path / "replies.jsonl"
    path.write_text("".join(json.dumps({"content": lua(c)}) + "\n" for c in codes))
    return str(path)


def _mods(tmp_path: Path) -> Path:
    mods = tmp_path / "mods"
    mods.mkdir()
    write_mod(mods, "waves", V1)
    return mods


def test_agent_cli_for_a_mod_with_a_replay(tmp_path):
    mods = _mods(tmp_path)
    world_file = tmp_path / "world.bin"
    result = CliRunner().invoke(cli, [
        "agent", "spawn an enemy", "--mods", str(mods), "--mod", "waves",
        "--replay", _replay(tmp_path, UNKNOWN_PREFAB, RUNTIME, SPAWNS), "--json",
        "--save-world", str(world_file)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["status"] == "solved" and data["key"] == "mods/waves/main.lua"
    outcomes = [(a["outcome"], a["kind"]) for a in data["attempts"]]
    assert outcomes == [("failed", "refused"), ("failed", "runtime"), ("passed", None)]
    assert data["attempts"][0]["refused"][0]["reason"] == "unknown_prefab"
    assert data["attempts"][1]["where"] == "mods/waves/main.lua:5"
    with Store(mods / ".moonbox-versions.db") as store:
        current = store.scripts.current("mods/waves/main.lua")
        assert current.content == SPAWNS and current.rev == data["revision"]
    # The live world: the success's spawn is queued for the next tick, and no failed
    # attempt left a trace.
    world = World.load(world_file.read_bytes(), arena_game().world.prefabs)
    assert world.get("d1") is None and world.get("e9") is None


def test_agent_cli_for_a_mod_exhausted_keeps_the_old_version(tmp_path):
    mods = _mods(tmp_path)
    result = CliRunner().invoke(cli, [
        "agent", "spawn", "--mods", str(mods), "--mod", "waves", "--repairs", "0",
        "--replay", _replay(tmp_path, UNKNOWN_PREFAB), "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)
    assert data["status"] == "exhausted" and data["source"] == V1
    with Store(mods / ".moonbox-versions.db") as store:
        assert store.scripts.current("mods/waves/main.lua").content == V1


def test_agent_cli_for_a_mod_needs_both_options_and_a_running_mod(tmp_path):
    mods = _mods(tmp_path)
    replay = _replay(tmp_path, SPAWNS)
    result = CliRunner().invoke(cli, ["agent", "t", "--mods", str(mods), "--replay", replay])
    assert result.exit_code == 2 and "--mod ID" in result.output
    result = CliRunner().invoke(cli, ["agent", "t", "--mods", str(mods), "--mod", "nope",
                                      "--replay", replay])
    assert result.exit_code == 2
    result = CliRunner().invoke(cli, ["agent", "t", "--replay", replay, "--save-world", "w"])
    assert result.exit_code == 2 and "--mods" in result.output


def test_agent_cli_for_a_mod_against_a_loopback_server(tmp_path):
    mods = _mods(tmp_path)
    with ChatServer() as server:
        server.push(reply_json(completion(lua(UNKNOWN_PREFAB))))
        server.push(reply_json(completion(lua(SPAWNS))))
        result = CliRunner().invoke(cli, ["agent", "spawn an enemy", "--mods", str(mods),
                                          "--mod", "waves", "--base-url", server.url,
                                          "--model", "m", "--json"])
        assert result.exit_code == 0, result.output
        second = server.requests[1]["body"]["messages"][-1]["content"]
    assert "[unknown_prefab]" in second
    data = json.loads(result.output)
    assert data["status"] == "solved" and data["revision"] >= 2


# -- game tasks of the repair evaluation -------------------------------------------------------

def test_the_game_tasks_spawn_move_and_react_in_forks():
    tasks = load_corpus(game_corpus_path())
    assert {t.id for t in tasks} == {"game_spawn_guard", "game_move_runner",
                                     "game_count_pings"}
    report = run_repair_eval(tasks, game_host=eval_game_host)
    outcomes = {t.id: (t.solved_at, t.kinds) for t in report.tasks}
    assert outcomes == {"game_spawn_guard": (2, ("refused",)),
                        "game_move_runner": (2, ("runtime",)),
                        "game_count_pings": (2, ("runtime",))}
    spawn = next(r for r in report.results if r.key == "mods/eval/main.lua"
                 and "guard" in r.task)
    assert spawn.attempts[0].failure.refused[0].reason == "unknown_prefab"


def test_a_game_task_needs_a_game_host():
    with pytest.raises(ConfigError, match="game task"):
        run_repair_eval(load_corpus(game_corpus_path())[:1])


def test_the_game_checks_explain_what_they_found():
    world = arena_game().world
    world.submit("spawn", {"prefab": "enemy", "name": "guard", "x": 1, "y": 5}, None)
    world.apply()
    run = GameRun("done", world=world, state={"pings": 1})
    entity, = checks_from_spec({"entity": {"name": "guard", "prefab": "enemy", "x": 5}})
    assert "expected x = 5" in entity(run)
    missing, = checks_from_spec({"entity": {"name": "nobody"}})
    assert "there is none" in missing(run)
    at_least, = checks_from_spec({"state_at_least": {"pings": 2}})
    assert at_least(run) == "expected state 'pings' >= 2, it is 1"
    exact, = checks_from_spec({"state": {"pings": 1}})
    assert exact(run) is None


def test_an_isolated_game_forks_in_the_hosts_own_worker(tmp_path):
    mods = _mods(tmp_path)
    game = arena_game(isolation="process", workers=1)
    host = ModHost(game, mods)
    try:
        assert all(r.ok for r in host.load_all())
        game.tick()
        before = _fingerprint(host)
        target = LiveMod(host, "waves")
        result = target.programmer(ScriptedClient([lua(UNKNOWN_PREFAB), lua(SPAWNS)])).run(
            target.task("spawn an enemy"))
        assert result.solved, [a.failure for a in result.attempts]
        assert result.attempts[0].failure.kind == "refused"
        assert game.mod("waves").state["from"] == before[1]["n"]
        game.tick()
        assert game.world.get("e1") is not None and game.world.get("d1") is None
    finally:
        host.close()
        game.close()
