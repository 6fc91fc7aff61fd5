"""The dashboard's JSON API and event stream, against a live server on loopback."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from running_game import SPINNER, SPINNER_LINE, STEADY, versioned, wait_for, write_mod

from moonbox.dashboard import Dashboard
from moonbox.engine import Game


def _log(r, **params):
    return r.get("/api/log", params=params)["entries"]


def test_mods_cost_and_health(running, mods_dir):
    write_mod(mods_dir, "steady", STEADY)
    write_mod(mods_dir, "spinner", SPINNER)
    r = running(mods_dir)
    mods = wait_for(lambda: (m := {x["id"]: x for x in r.get("/api/mods")["mods"]})
                    and m["spinner"]["status"] == "quarantined" and m, "spinner quarantined")
    assert mods["steady"]["status"] == "running" and mods["steady"]["quarantine"] is None
    q = mods["spinner"]["quarantine"]
    assert q["kind"] == "trips" and q["liftable"] and q["where"] == SPINNER_LINE
    assert q["reason"].startswith("tripped its budget 3 times in a row")
    stats = r.get("/api/stats")
    cost = {row["mod"]: row for row in stats["cost"]}
    assert cost["spinner"]["trips"] == 3 and cost["spinner"]["errors"] == 0
    assert cost["steady"]["calls"] >= 1 and cost["steady"]["memory_peak_bytes"] > 0
    health = stats["health"]
    assert health["budget_ms"] == 50.0 and health["ticks"] >= 1 and health["series"]
    assert health["p50_ms"] <= health["p90_ms"] <= health["max_ms"]


def test_the_log_has_trips_with_their_chunk_line_and_the_errors_are_grouped(running, mods_dir):
    write_mod(mods_dir, "spinner", SPINNER)
    r = running(mods_dir)
    trips = wait_for(lambda: len(t := _log(r, kind="trip")) >= 3 and t, "three trips")
    assert {t["where"] for t in trips} == {SPINNER_LINE}
    assert {t["handler"] for t in trips} == {"on('tick')"}
    assert {t["budget"] for t in trips} == {"steps"} and {t["mod"] for t in trips} == {"spinner"}
    quarantine = wait_for(lambda: _log(r, kind="quarantine"), "the quarantine entry")
    assert quarantine[0]["mod"] == "spinner" and quarantine[0]["where"] == SPINNER_LINE
    # published at most 0.2 s after the tick
    groups = wait_for(lambda: (g := r.get("/api/errors")["errors"]) and g[0]["count"] >= 3
                      and g, "the trips grouped")
    assert len(groups) == 1 and groups[0]["count"] == 3 and groups[0]["kind"] == "trip"
    group = r.get(f"/api/errors/{groups[0]['id']}")
    source = group["source"]
    assert source["line"] == 2 and group["where"] == SPINNER_LINE
    assert {"line": 2, "text": "  if t >= 3 then while true do end end"} in source["lines"]
    assert r.post("/api/errors/999").status_code == 405
    with r.client() as c:
        assert c.get("/api/errors/999").status_code == 404
    # filters: by mod and by several kinds at once
    assert all(e["mod"] == "spinner" for e in _log(r, mod="spinner"))
    kinds = {e["kind"] for e in _log(r, kind="trip,quarantine")}
    assert kinds == {"trip", "quarantine"}


def test_actions_lift_quarantine_and_reload(running, mods_dir):
    write_mod(mods_dir, "spinner", SPINNER)
    folder = write_mod(mods_dir, "steady", STEADY)
    r = running(mods_dir)
    wait_for(lambda: any(m["status"] == "quarantined" for m in r.get("/api/mods")["mods"]),
             "a quarantine")
    answer = r.post("/api/mods/spinner/lift")
    assert answer.status_code == 200, answer.text
    assert answer.json()["ok"] and "lifted" in answer.json()["message"]
    assert any(e["action"] == "lift" and e["ok"] for e in _log(r, kind="action"))
    # it trips again and is quarantined again
    wait_for(lambda: len(_log(r, kind="quarantine")) >= 2, "a second quarantine")

    answer = r.post("/api/mods/steady/quarantine", {"reason": "looked odd"})
    assert answer.status_code == 200
    steady = next(m for m in r.get("/api/mods")["mods"] if m["id"] == "steady")
    assert steady["status"] == "quarantined" and steady["quarantine"]["reason"] == "looked odd"

    (folder / "main.lua").write_text('every(1, function() report("reloaded") end)\n')
    answer = r.post("/api/mods/steady/reload")
    assert answer.status_code == 200 and answer.json()["message"].startswith("live ")
    wait_for(lambda: any(e["message"] == "reloaded" for e in _log(r, mod="steady")),
             "the new version's report")
    (folder / "main.lua").write_text("every(1, function(\n")
    answer = r.post("/api/mods/steady/reload")
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "refused"
    assert "mods/steady/main.lua:" in answer.json()["error"]["message"]
    steady = next(m for m in r.get("/api/mods")["mods"] if m["id"] == "steady")
    assert steady["change_refused"] and steady["status"] == "running"
    refused = [g for g in r.get("/api/errors")["errors"] if g["kind"] == "reload"]
    assert refused and refused[0]["where"] == "mods/steady/main.lua:2"
    assert refused[0]["source"]["lines"][0]["text"] == "every(1, function("

    assert r.post("/api/mods/nobody/lift").status_code == 404
    assert r.post("/api/mods/steady/explode").status_code == 404


def test_versions_history_diff_rollback_and_reset(running, mods_dir):
    folder = write_mod(mods_dir, "versioned", versioned(1))
    r = running(mods_dir)
    (folder / "main.lua").write_text(versioned(2))
    assert r.post("/api/mods/versioned/reload").status_code == 200
    wait_for(lambda: any(e["message"] == "version 2" for e in _log(r, mod="versioned")),
             "version 2 running")
    keys = {k["key"]: k for k in r.get("/api/versions")["keys"]}
    key = "mods/versioned/main.lua"
    assert keys[key]["current"] == 2 and keys[key]["original"] == 1
    assert "mods:active" in keys
    history = r.get("/api/versions/history", params={"key": key})
    assert [rev["rev"] for rev in history["revisions"]] == [2, 1]
    assert {rev["author"] for rev in history["revisions"]} == {"modder"}
    assert "source" not in history["revisions"][0]
    assert r.get("/api/versions/revision", params={"key": key, "rev": 1})["source"] == \
        versioned(1)
    diff = r.get("/api/versions/diff", params={"key": key, "a": 1, "b": "current"})["diff"]
    assert '-every(1, function() report("version 1") end)' in diff
    assert '+every(1, function() report("version 2") end)' in diff

    answer = r.post("/api/versions/rollback", {"kind": "script", "key": key, "rev": 1})
    assert answer.status_code == 200, answer.text
    assert answer.json()["rev"] == 1 and answer.json()["previous"] == 2
    since = r.get("/api/log")["last_seq"]
    wait_for(lambda: any(e["message"] == "version 1"
                         for e in _log(r, mod="versioned", since=since)),
             "the rolled-back version running")
    assert (folder / "main.lua").read_text() == versioned(2)  # the disk is not touched

    r.post("/api/versions/rollback", {"kind": "script", "key": key, "rev": 2})
    answer = r.post("/api/versions/reset", {"kind": "script", "key": key})
    assert answer.status_code == 200 and answer.json()["rev"] == 1

    missing = r.post("/api/versions/rollback", {"kind": "script", "key": key, "rev": 99})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_revision"
    bad = r.post("/api/versions/rollback", {"kind": "script", "key": key, "rev": "x"})
    assert bad.status_code == 400
    with r.client() as c:
        assert c.get("/api/versions/history", params={"key": "nope"}).status_code == 404
        assert c.get("/api/versions/diff", params={"key": key, "a": "z"}).status_code == 400


def test_a_version_the_game_refuses_puts_the_store_back(running, mods_dir):
    folder = write_mod(mods_dir, "versioned", versioned(1))
    r = running(mods_dir)
    # A version that goes live, then one that cannot load in the game any more: the store
    # holds both as successes, as if recorded elsewhere.
    (folder / "main.lua").write_text(versioned(2))
    assert r.post("/api/mods/versioned/reload").status_code == 200
    key = "mods/versioned/main.lua"
    r.store.scripts.record_success(key, "error('no longer loads')", author="someone")
    r.store.scripts.rollback(key, 2)
    answer = r.post("/api/versions/rollback", {"kind": "script", "key": key, "rev": 3})
    assert answer.status_code == 409, answer.text
    assert "store was put back" in answer.json()["error"]["message"]
    assert r.get("/api/versions/history", params={"key": key})["info"]["current"] == 2


def test_world_and_events(running, mods_dir):
    write_mod(mods_dir, "spawner", """
coreai_world_spawn{prefab = "cube", name = "box", x = 3, z = -4}
coreai_world_change("nobody", {x = 1})
every(1, function(t) emit("pulse", {t = t}) end)
""")
    r = running(mods_dir)
    world = wait_for(lambda: (w := r.get("/api/world"))["count"] and w, "the box")
    assert world["bound"] > 0 and world["entities"][0]["name"] == "box"
    box = r.get("/api/world/entities/box")
    assert (box["x"], box["z"], box["owner"]) == (3, -4, "spawner")
    with r.client() as c:
        assert c.get("/api/world/entities/nothing").status_code == 404
    events = wait_for(lambda: (q := r.get("/api/events")["queues"])["events"] and q,
                      "an event")
    assert events["events"][0]["name"] == "pulse" and events["events"][0]["source"] == "spawner"
    assert events["refused_by_reason"] == {"not_found": 1}
    assert events["refused"][0]["command"] == "change"
    assert "no entity" in events["reasons"]["not_found"]
    assert {m["mod"] for m in events["mods"]} == {"spawner"}
    assert any(e["reason"] == "not_found" for e in _log(r, kind="refused"))
    assert r.get("/api/workers")["workers"]["isolated"] is False


def test_the_event_stream(running, mods_dir):
    write_mod(mods_dir, "steady", STEADY)
    r = running(mods_dir)
    seen: dict[str, object] = {}
    with r.client() as c, c.stream("GET", "/api/stream") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event:
                seen[event] = json.loads(line[6:])
            if {"summary", "log", "world", "errors"} <= set(seen) and \
                    seen["summary"]["tick"] > 0 and \
                    any(e["kind"] == "report" for e in seen["log"]):
                break
    assert seen["summary"]["mods"][0]["id"] == "steady"
    assert isinstance(seen["errors"], list) and "entities" in seen["world"]


def test_closing_ends_the_stream_and_the_server(running, mods_dir):
    write_mod(mods_dir, "steady", STEADY)
    r = running(mods_dir)
    ended = threading.Event()

    def listen() -> None:
        try:
            with r.client() as c, c.stream("GET", "/api/stream") as response:
                for _ in response.iter_lines():
                    pass
        except httpx.HTTPError:
            pass
        ended.set()

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    wait_for(lambda: r.get("/api/summary")["tick"] > 2, "ticks")
    r.dashboard.close()
    assert ended.wait(15), "the stream went on after close()"
    with pytest.raises(httpx.ConnectError):
        httpx.get(r.base + "/api/summary", timeout=5)
    listener.join(5)


def test_an_action_waits_for_a_tick(running, mods_dir, monkeypatch):
    monkeypatch.setattr("moonbox.dashboard._app.ACTION_TIMEOUT_S", 0.3)
    write_mod(mods_dir, "steady", STEADY)
    r = running(mods_dir, tick=False)  # nobody ticks this game
    answer = r.post("/api/mods/steady/quarantine")
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "timed_out"
    assert r.dashboard.actions.apply_pending() == []  # given up: not done later
    assert r.game.mod("steady").quarantine is None


def test_without_a_store(running, mods_dir):
    write_mod(mods_dir, "steady", STEADY)
    r = running(mods_dir, store=False)
    assert r.get("/api/summary")["store"] is False
    with r.client() as c:
        assert c.get("/api/versions").status_code == 404
    answer = r.post("/api/versions/reset", {"kind": "script", "key": "mods/steady/main.lua"})
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "no_store"


def test_a_game_without_a_mod_host(tmp_path):
    """Any Game: the host ticks it through the dashboard, and names its sources."""
    source = 'on("tick", function(t) if t == 2 then error("boom") end end)\n'
    with Game(seed=1) as game, Dashboard(game, sources={"@mods/m/main.lua": source}) as board:
        game.load_mod("m", source)
        url = board.start()
        assert url.startswith("http://127.0.0.1:") and board.port > 0
        for _ in range(3):
            board.tick()
        board.publish()  # at once, not at most 0.2 s later
        summary = httpx.get(url + "api/summary", timeout=10).json()
        assert summary["mods"][0]["reloadable"] is False and summary["mods_dir"] is None
        errors = httpx.get(url + "api/errors", timeout=10).json()["errors"]
        assert errors[0]["where"] == "mods/m/main.lua:1" and errors[0]["kind"] == "error"
        assert errors[0]["source"]["lines"][0]["text"] == source.strip()
        answers = []
        asking = threading.Thread(target=lambda: answers.append(
            httpx.post(url + "api/mods/m/reload", json={}, timeout=20)))
        asking.start()
        while asking.is_alive():  # the game thread: actions are done between its ticks
            board.tick()
            time.sleep(0.01)
        assert answers[0].status_code == 409
        assert answers[0].json()["error"]["code"] == "no_mods"
    assert board.internal_errors == 0


def test_a_fault_of_the_dashboard_never_reaches_the_game_loop(tmp_path, monkeypatch, capsys):
    with Game(seed=1) as game, Dashboard(game) as board:
        def broken(report, elapsed_s):
            raise RuntimeError("broken recorder")
        monkeypatch.setattr(board.recorder, "record", broken)
        board.tick()
        board.tick()
        assert board.internal_errors == 2
        entries = board.recorder.log_since(0, kind="dashboard")
        assert "RuntimeError: broken recorder" in entries[0]["message"]
    assert "broken recorder" in capsys.readouterr().err


def test_isolated_workers(no_workers_left_behind, running, mods_dir):
    write_mod(mods_dir, "steady", STEADY)
    game = Game(seed=1, isolation="process", workers=1, spare_workers=0)
    r = running(mods_dir, game=game)
    workers = wait_for(lambda: (w := r.get("/api/workers")["workers"])["workers"] and w,
                       "the worker's figures")
    assert workers["isolated"] is True
    (worker,) = workers["workers"]
    assert worker["pid"] and worker["rss_bytes"] > 0 and worker["mods"] == ["steady"]
    assert worker["restores"] == 0 and worker["respawns"] == 0


def test_a_sharded_games_shards(running, mods_dir, tmp_path):
    from moonbox.cluster import ModSpec, ShardedGame

    write_mod(mods_dir, "steady", STEADY)
    mods = [ModSpec(f"m{k}", 'on("tick", function(t) end)') for k in range(3)]
    with ShardedGame(mods, 2, seed=1, checkpoint_dir=tmp_path / "cp",
                     checkpoint_every=2) as sharded:
        r = running(mods_dir, tick=False, shards=sharded)  # this thread ticks both games

        def ticked() -> dict | None:
            sharded.tick()
            r.dashboard.tick()
            r.dashboard.publish()
            shards = r.get("/api/shards")["shards"]
            return shards if shards["tick"] >= 3 else None

        shards = wait_for(ticked, "the shards' figures")  # read once a second
        assert shards["sharded"] is True and shards["backend"] == "local"
        assert [(s["shard"], s["status"], s["mod_ids"]) for s in shards["shards"]] == [
            (0, "running", ["m0", "m2"]), (1, "running", ["m1"])]
        assert all(s["ms_per_tick"] > 0 and s["restarts"] == 0 for s in shards["shards"])
        assert shards["last_checkpoint"]["bytes"] > 0 and not shards["lost"]
        assert r.get("/api/summary")["shards"]["backend"] == "local"
        r.close()
