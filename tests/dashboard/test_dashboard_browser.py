"""The dashboard's page in a real headless Chromium, against a running game.

Skipped, with how to install them, where Chromium or Playwright is missing.
"""

from __future__ import annotations

from running_game import SPINNER, SPINNER_LINE, STEADY, versioned, wait_for, write_mod


def test_a_quarantined_mod_shows_its_reason(running, mods_dir, page):
    write_mod(mods_dir, "steady", STEADY)
    write_mod(mods_dir, "spinner", SPINNER)
    r = running(mods_dir)
    page.goto(r.url)
    row = page.locator("#mods tr[data-mod=spinner][data-status=quarantined]")
    row.wait_for()
    why = row.locator("td.why").inner_text()
    assert "tripped its budget 3 times in a row" in why and SPINNER_LINE in why
    assert page.locator("#mods tr[data-mod=steady] .badge").inner_text() == "running"
    assert page.locator("#conn").inner_text() == "live"
    # The cost panel counts the trips; lifting the quarantine is done between ticks.
    page.locator("#cost tr[data-mod=spinner] td:nth-child(10)").filter(has_text="3").wait_for()
    row.locator("button[data-action=lift]").click()
    page.locator("#action-result[data-ok=yes]").filter(has_text="quarantine lifted").wait_for()
    wait_for(lambda: any(e["action"] == "lift" for e in
                         r.get("/api/log", params={"kind": "action"})["entries"]),
             "the lift in the log")


def test_the_live_log_shows_a_trips_chunk_line(running, mods_dir, page):
    write_mod(mods_dir, "steady", STEADY)
    write_mod(mods_dir, "spinner", SPINNER)
    r = running(mods_dir)
    page.goto(r.url)
    page.select_option("#log-kind", "trip")
    trip = page.locator("#log .entry.trip").first
    trip.wait_for()
    assert trip.locator(".where").inner_text() == SPINNER_LINE
    assert trip.locator(".m").inner_text() == "spinner"
    assert trip.locator(".h").inner_text() == "on('tick')"
    assert "steps budget exceeded" in trip.locator(".msg").inner_text()
    assert page.locator("#log .entry:not(.trip)").count() == 0  # the filter holds
    page.select_option("#log-kind", "")
    page.select_option("#log-mod", "steady")
    page.locator("#log .entry.report").first.wait_for()
    assert set(page.locator("#log .entry").evaluate_all(
        "rows => rows.map(r => r.dataset.mod)")) == {"steady"}
    # A trip opens its error: the failing line among its neighbours, and the repeats.
    page.select_option("#log-mod", "")
    page.select_option("#log-kind", "trip")
    page.locator("#log .entry.trip").first.click()
    hot = page.locator("#error-detail .source .line.hot")
    hot.wait_for()
    assert hot.inner_text().strip() == "2   if t >= 3 then while true do end end"
    page.locator("#error-list li.trip .count").filter(has_text="×3").wait_for()


def test_a_rollback_from_the_versions_panel_changes_the_running_mod(running, mods_dir, page):
    folder = write_mod(mods_dir, "versioned", versioned(1))
    r = running(mods_dir)
    page.goto(r.url)
    page.select_option("#log-mod", "versioned")
    page.locator("#log .entry.report", has_text="version 1").first.wait_for()
    # A save, swapped in with the panel's reload button.
    (folder / "main.lua").write_text(versioned(2))
    page.locator("#mods tr[data-mod=versioned] button[data-action=reload]").click()
    page.locator("#log .entry.report", has_text="version 2").first.wait_for()
    page.locator("#version-keys tr[data-key='mods/versioned/main.lua']").click()
    page.locator("#version-history tr[data-rev='2'].current").wait_for()
    page.click("#version-diff")
    page.locator("#diff .add", has_text='report("version 2")').wait_for()
    page.locator("#diff .del", has_text='report("version 1")').wait_for()
    since = r.get("/api/log")["last_seq"]
    page.locator("#version-history tr[data-rev='1'] button[data-action=rollback]").click()
    page.locator("#action-result[data-ok=yes]").filter(has_text="runs it now").wait_for()
    page.locator("#version-history tr[data-rev='1'].current").wait_for()
    wait_for(lambda: any(e["message"] == "version 1" for e in r.get(
        "/api/log", params={"mod": "versioned", "since": since})["entries"]),
        "the rolled-back version running")
    # The running mod reports version 1 again, and only that.
    seq = r.get("/api/log")["last_seq"]
    lines = wait_for(lambda: [e["message"] for e in r.get(
        "/api/log", params={"mod": "versioned", "since": seq, "kind": "report"})["entries"]],
        "reports after the rollback")
    assert set(lines) == {"version 1"}


def test_world_health_events_and_workers_panels(running, mods_dir, page):
    write_mod(mods_dir, "spawner", """
coreai_world_spawn{prefab = "cube", name = "box", x = 10, z = 20}
coreai_world_change("nobody", {x = 1})
every(1, function(t) emit("pulse", {t = t}) end)
""")
    r = running(mods_dir)
    page.goto(r.url)
    box = page.locator("#world-map circle[data-name=box]")
    box.wait_for()
    assert float(box.get_attribute("cx")) == 10 and float(box.get_attribute("cy")) == -20
    box.dispatch_event("click")  # redrawn twice a second: no pointer sequence needed
    page.locator("#inspector", has_text='owner: "spawner"').wait_for()
    page.locator("#health-chart polyline.mean").wait_for(state="attached")
    page.locator("#refused-reasons code", has_text="not_found").wait_for()
    page.locator("#events code", has_text="pulse").first.wait_for()
    page.locator("#mod-queues td.mod", has_text="spawner").wait_for()
    assert "no worker processes" in page.locator("#workers-none").inner_text()
    assert "not a sharded game" in page.locator("#shards-none").inner_text()


def test_an_isolated_game_without_a_store(running, mods_dir, page):
    import psutil

    from moonbox.engine import Game

    write_mod(mods_dir, "steady", STEADY)
    r = running(mods_dir, store=False,
                game=Game(seed=1, isolation="process", workers=1, spare_workers=0))
    page.goto(r.url)
    row = page.locator("#workers tbody tr").first
    row.wait_for()
    assert row.locator("td.mods").inner_text() == "steady"
    pid = int(row.locator("td").first.inner_text())  # the worker's process
    assert pid in {p.pid for p in psutil.Process().children(recursive=True)}
    page.locator("#versions-none", has_text="no versions store").wait_for()
    r.close()  # the game's workers go with it
    assert not psutil.pid_exists(pid)


def test_the_shards_panel(running, mods_dir, page, tmp_path):
    from moonbox.cluster import ModSpec, ShardedGame

    write_mod(mods_dir, "steady", STEADY)
    mods = [ModSpec(f"m{k}", 'on("tick", function(t) end)') for k in range(3)]
    with ShardedGame(mods, 2, seed=1, checkpoint_dir=tmp_path / "cp",
                     checkpoint_every=2) as sharded:
        sharded.run(3)  # then only the dashboard's game thread reads it
        r = running(mods_dir, shards=sharded)
        page.goto(r.url)
        row = page.locator("#shards tbody tr").nth(1)
        row.wait_for()
        cells = row.locator("td")
        assert cells.nth(0).inner_text() == "1" and cells.nth(2).inner_text() == "1"
        assert row.locator("td.mods").inner_text() == "m1"
        figures = page.locator("#shards-figures")
        figures.filter(has_text="last checkpoint: tick 2").wait_for()
        assert "local backend, tick 3" in figures.inner_text()
        r.close()
