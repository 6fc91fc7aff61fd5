"""An isolated game (``Game(isolation="process")``): the same mods, the same world, and what
kills a worker costs one call of one mod.

Budget tests assert kinds and counts; wall bounds are generous (a shared 2-core machine).
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from moonbox import Budget, ConfigError
from moonbox.engine import DEFAULT_BUDGET, Game, ModLimits
from moonbox.isolation import IsolatedSandbox, WorkerCrashed, WorkerPool
from moonbox.mods import arena_mods, load_packages

pytestmark = pytest.mark.usefixtures("no_workers_left_behind")


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture
def hooked_pool():
    """A pool whose workers offer the test-only hooks (test_abort, test_sleep, ...)."""
    with WorkerPool(4, memory_limit_bytes=512 << 20, _test_hooks=True) as pool:
        yield pool


def _isolated(make_game, pool, **options):
    options.setdefault("wall_margin_s", 0.3)
    return make_game(isolation="process", pool=pool, **options)


# -- the same game, isolated ---------------------------------------------------------------


def test_the_arena_replays_to_the_same_world_isolated(arena_example):
    arena = arena_example
    outcomes = {}
    # The default budget's steps (the glitch trips on them), with a wall budget no load
    # reaches: a call a busy machine descheduled would be a time trip in one run only.
    budget = Budget(steps=DEFAULT_BUDGET.steps, wall_s=60, alloc_bytes=DEFAULT_BUDGET.alloc_bytes,
                    max_memory=DEFAULT_BUDGET.max_memory)
    for isolation in ("none", "process"):
        with Game(arena.make_world(), seed=1, isolation=isolation, budget=budget) as game, \
                arena_mods() as mods_dir:
            load_packages(game, mods_dir)
            reports = []
            for _ in range(40):
                reports += game.tick().reports
            outcomes[isolation] = (
                game.world.content_hash(), reports,
                {m.id: (m.stats.calls, m.stats.errors, m.stats.trips, m.stats.commands_applied,
                        m.stats.commands_refused, m.quarantine and m.quarantine.kind)
                 for m in game.mods},
                game.mod("scoreboard").state,
            )
            if isolation == "process":
                assert len(game.pool.pids) == 4  # DEFAULT_WORKERS: five mods, four workers
                assert all(isinstance(m.sandbox, IsolatedSandbox) for m in game.mods)
    assert outcomes["process"] == outcomes["none"]
    assert outcomes["none"][2]["glitch"][-1] == "trips"


LIFECYCLE = """
local seen = {}
on("tick", function(t)
  if t == 1 then
    spawn(function()
      report("task waits")
      wait(2)
      report("task back at " .. now())
    end)
  end
  state_set("ticks", t)
end)
after(2, function(t) report("after at " .. t) end)
local every_id = every(2, function(t) report("every at " .. t) end)
on("ping", function(data, event, from)
  report("ping " .. data.n .. " from " .. tostring(from))
  if data.n == 2 then cancel(every_id) end
end)
export("twice", function(x) return x * 2 end)
export("info", {name = "lifecycle"})
"""

CALLER = """
local twice = import("lifecycle", "twice")
on("tick", function(t)
  if t <= 2 then emit("ping", {n = t}) end
  report("twice " .. twice(t) .. " " .. import("lifecycle", "info").name)
end)
"""


def _lifecycle(make_game, **options):
    game = make_game(**options)
    game.load_mod("lifecycle", LIFECYCLE)
    game.load_mod("caller", CALLER)
    reports = [(r.tick, mod, line) for r in game.run(8) for mod, line in r.reports]
    stats = {m.id: (m.stats.calls, m.stats.errors, m.stats.trips) for m in game.mods}
    return reports, stats, game.mod("lifecycle").state


def test_handlers_timers_waits_events_and_exports_behave_alike(make_game):
    in_process = _lifecycle(make_game)
    reports, stats, state = in_process
    lines = {line for _, _, line in reports}
    assert {"task waits", "task back at 4", "after at 2", "every at 2", "ping 1 from caller",
            "ping 2 from caller", "twice 16 lifecycle"} <= lines
    assert "every at 4" not in lines  # cancelled by the second ping
    assert state == {"ticks": 8} and all(e == t == 0 for _, e, t in stats.values())
    assert _lifecycle(make_game, isolation="process", workers=2) == in_process
    # One worker for both: the cross-mod calls are nested requests to the same worker.
    assert _lifecycle(make_game, isolation="process", workers=1) == in_process


def test_isolation_options_are_checked():
    with pytest.raises(ConfigError):
        Game(isolation="thread")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Game(workers=2)
    with pytest.raises(ConfigError):
        Game(isolation="process", workers=0)
    with WorkerPool(1) as pool, pytest.raises(ConfigError):
        Game(isolation="process", pool=pool, workers=2)


def test_each_mod_shows_its_workers_memory_and_cpu(make_game):
    game = make_game(isolation="process", workers=2)
    for name in ("a", "b", "c"):
        game.load_mod(name, 'on("tick", function() local t = {} for i = 1, 1000 do t[i] = i end end)')
    game.run(3)
    stats = game.worker_stats()
    assert len(stats) == 2 and all(s.rss_bytes > 1 << 20 for s in stats)
    a, c = game.mod("a").stats, game.mod("c").stats
    assert a.worker is not None and a.worker.pid == game.mod("a").sandbox.pid
    assert c.worker.pid == a.worker.pid and set(a.worker.mods) == {"a", "c"}  # shared
    data = a.to_dict()
    assert data["worker"]["rss_bytes"] > 0 and data["restores"] == 0
    assert game.mod("a").memory_bytes > 0
    assert Game().worker_stats() == []


# -- what kills a worker, through the engine -----------------------------------------------

COUNTER = """
state_set("loads", (state_get("loads") or 0) + 1)
on("tick", function(t)
  state_set("n", (state_get("n") or 0) + 1)
  {bad}
end)
"""


@pytest.mark.parametrize(("bad", "kind", "budget"), [
    ("test_alloc(2e9)", "budget", "memory"),
    ("test_sleep(30)", "budget", "time"),
    ("test_abort()", "crashed", None),
    ("test_segfault()", "crashed", None),
])
def test_a_killed_worker_costs_one_call_and_the_mod_goes_on(make_game, hooked_pool, bad, kind,
                                                            budget):
    game = _isolated(make_game, hooked_pool, budget=Budget(wall_s=0.1, steps=200_000),
                    wall_margin_s=1.0)
    source = COUNTER.replace("{bad}", f"if t == 3 then {bad} end")
    mod = game.load_mod("victim", source)
    pid = mod.sandbox.pid
    reports = game.run(2)
    assert not any(r.failures for r in reports)
    started = time.monotonic()
    report = game.tick()  # tick 3: the worker is killed
    assert time.monotonic() - started < 20
    (failure,) = report.failures
    assert failure.mod == "victim" and failure.handler == "on('tick')"
    assert failure.error.kind == kind
    if budget is not None:
        assert failure.error.budget == budget and mod.stats.trips == 1
    else:
        assert isinstance(failure.error, WorkerCrashed) and mod.stats.errors == 1
        assert failure.error.signal in ("SIGABRT", "SIGSEGV")
    assert mod.quarantine is None
    report = game.tick()  # tick 4: a fresh worker, the mod built again, its handler runs
    assert report.restored == ["victim"] and not report.failures
    assert mod.stats.restores == 1 and mod.sandbox.pid not in (None, pid)
    # Its key/value state is what it was; the main chunk's own writes did not clobber it.
    assert mod.state == {"loads": 1, "n": 4}
    game.run(2)
    assert mod.state["n"] == 6 and mod.failures_in_a_row == mod.trips_in_a_row == 0


def test_a_worker_lost_while_idle_after_a_trip_is_replaced_not_quarantined(make_game,
                                                                          hooked_pool):
    """A trip ends the mod's dispatcher; its worker then dies with no request in flight
    (killed from outside). Starting the dispatcher again finds the worker gone: that call
    fails as a crash, and the mod is built again before its next call."""
    game = _isolated(make_game, hooked_pool, budget=Budget(wall_s=5, steps=100_000))
    mod = game.load_mod("victim", COUNTER.replace("{bad}", "if t == 2 then while true do end end"))
    game.run(1)
    (trip,) = game.tick().failures  # tick 2: the trip ends the dispatcher
    assert trip.error.kind == "budget"
    pid = mod.sandbox.pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:  # dead: a zombie, or already reaped by its parent
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        assert time.monotonic() < deadline
        time.sleep(0.01)
    report = game.tick()  # tick 3: the dead worker is found when the dispatcher starts
    assert [f.error.kind for f in report.failures] == ["crashed"]
    assert mod.quarantine is None
    report = game.tick()  # tick 4: built again in a fresh worker, and it goes on
    assert report.restored == ["victim"] and not report.failures
    assert mod.quarantine is None and mod.sandbox.pid not in (None, pid)
    assert mod.state["n"] == 3  # ticks 1, 2 (then its trip) and 4: tick 3's call was lost


def test_a_rebuilt_mod_does_not_repeat_what_its_main_chunk_did(make_game, hooked_pool):
    game = _isolated(make_game, hooked_pool)
    mod = game.load_mod("builder", """
        coreai_world_spawn{prefab = "cube", name = "beacon"}
        coreai_world_spawn{prefab = "cube"}
        emit("hello", {from_load = true})
        local calls = 0
        on("tick", function(t)
          calls = calls + 1
          report("call " .. calls)
          if t == 2 then test_abort() end
        end)
        on("world:refused", function(r) report("refused " .. r.reason) end)
    """)
    listener = game.load_mod("listener", 'on("hello", function() report("hello") end)')
    reports = [line for r in game.run(5) for _, line in r.reports]
    # Locals start over (the lost runtime held them); nothing of the load is done twice:
    # no second beacon (refused) or cube (spawned), no second hello.
    assert reports == ["call 1", "hello", "call 2", "call 1", "call 2", "call 3"]
    assert len(game.world) == 2
    assert mod.stats.commands_refused == 0 and mod.stats.restores == 1
    assert listener.stats.errors == 0


_SERVICE = """
export("bump", function()
  state_set("n", (state_get("n") or 0) + 1)
  emit("bumped", {})
  coreai_world_spawn{prefab = "cube"}
  return state_get("n")
end)
"""


@pytest.mark.parametrize("shared", [True, False], ids=["shared-worker", "own-workers"])
def test_a_rebuilt_mod_does_not_repeat_calls_into_other_mods(make_game, shared):
    # What the main chunk did through another mod's export happened in that mod (its Lua
    # state, its events, its commands), where the rebuild cannot take it back: refused.
    with WorkerPool(1 if shared else 3, memory_limit_bytes=512 << 20,
                    _test_hooks=True) as pool:
        game = _isolated(make_game, pool)
        service = game.load_mod("service", _SERVICE)
        game.load_mod("listener", 'on("bumped", function() report("bumped") end)')
        client = game.load_mod("client", """
            local bump = import("service", "bump")
            bump()                              -- a side effect at load, through another mod
            on("tick", function(t) if t == 2 then test_abort() end end)
        """)
        reports = game.run(4)
        assert "client" in reports[2].restored
        assert service.state == {"n": 1}  # the client's load ran once
        assert [(r.tick, line) for r in reports for _, line in r.reports] == [(1, "bumped")]
        assert len(game.world) == 1
        # The main chunk failed on the refusal: the mod could not be built again.
        assert client.quarantine is not None and client.quarantine.kind == "runtime"
        assert "[rebuilding]" in client.quarantine.reason


def test_a_rebuilt_mod_that_guards_its_calls_into_other_mods_goes_on(make_game, hooked_pool):
    game = _isolated(make_game, hooked_pool)
    service = game.load_mod("service", _SERVICE)
    client = game.load_mod("client", """
        local ok, err = pcall(import("service", "bump"))
        if not ok then report(err) end
        on("tick", function(t)
          if t == 2 then test_abort() end
          report("tick " .. t .. ": " .. import("service", "bump")())
        end)
    """)
    lines = [line for r in game.run(4) for _, line in r.reports]
    assert len(lines) == 4 and "[rebuilding]" in lines[1]
    assert [lines[0], *lines[2:]] == ["tick 1: 2", "tick 3: 3", "tick 4: 4"]
    assert client.quarantine is None and client.stats.restores == 1
    assert service.state == {"n": 4}  # load, ticks 1, 3 and 4: no call repeated


def test_repeated_crashes_quarantine_the_mod_and_the_others_never_notice(make_game, hooked_pool):
    game = _isolated(make_game, hooked_pool, limits=ModLimits(max_failures=2))
    others = [game.load_mod(name, 'on("tick", function(t) state_set("t", t) end)')
              for name in ("calm", "steady")]
    pids = [m.sandbox.pid for m in others]
    bad = game.load_mod("crasher", 'on("tick", function() test_segfault() end)')
    game.run(4)
    assert bad.quarantine is not None and bad.quarantine.kind == "failures"
    assert bad.stats.errors == 2 and bad.stats.restores == 1
    for mod, pid in zip(others, pids, strict=True):
        assert mod.state == {"t": 4} and mod.sandbox.pid == pid
        assert mod.stats.errors == mod.stats.trips == mod.stats.restores == 0
    # Lifting the quarantine: built again, it crashes again.
    game.lift_quarantine("crasher")
    report = game.tick()
    assert report.restored == ["crasher"] and report.failures[0].error.kind == "crashed"


def test_a_pool_under_load_with_one_bad_mod(make_game):
    with WorkerPool(2, memory_limit_bytes=512 << 20, _test_hooks=True) as pool:
        game = make_game(isolation="process", pool=pool, wall_margin_s=1.0,
                         budget=Budget(wall_s=0.1, steps=200_000))
        good = [game.load_mod(f"good{i}", 'on("tick", function(t) state_set("n", t) end)')
                for i in range(5)]
        bad = game.load_mod("bad", """
            on("tick", function(t)
              if t % 2 == 0 then return end
              local which = math.floor(t / 2) % 3
              if which == 0 then test_abort()
              elseif which == 1 then test_sleep(30)
              else test_segfault() end
            end)
        """)
        ticks = 8
        reports = game.run(ticks)
        for mod in good:  # never missed a tick, never failed, even when rebuilt
            assert mod.state == {"n": ticks}, mod.id
            assert mod.stats.errors == mod.stats.trips == 0
        assert sum(len(r.failures) for r in reports) == 4
        assert {f.mod for r in reports for f in r.failures} == {"bad"}
        assert bad.quarantine is None  # a success in between resets the count
        assert sum(s.respawns for s in pool.stats()) == 4
        assert any(m.stats.restores for m in good)  # pinned with the bad one: rebuilt
        assert len(pool.pids) == 2


def test_a_call_into_a_crashed_mod_fails_only_that_call(make_game, hooked_pool):
    game = _isolated(make_game, hooked_pool, budget=Budget(wall_s=0.25, steps=200_000))
    game.load_mod("service", """
        export("serve", function(x)
          if x == "crash" then test_abort() end
          return x .. " served"
        end)
    """)
    caller = game.load_mod("client", """
        local serve = import("service", "serve")
        on("tick", function(t)
          local ok, result = pcall(serve, t == 2 and "crash" or "t" .. t)
          report(tostring(ok) .. " " .. tostring(result))
          -- Called again at once: the service is built again first, on the host's time.
          if t == 2 then report(serve("again")) end
        end)
    """)
    reports = [line for r in game.run(3) for _, line in r.reports]
    assert reports[0] == "true t1 served"
    assert reports[1].startswith("false ") and "[export_failed]" in reports[1]
    assert reports[2:] == ["again served", "true t3 served"]
    assert caller.stats.errors == caller.stats.trips == 0
    service = game.mod("service")
    assert service.stats.errors == 1 and service.stats.restores == 1


def test_closing_an_isolated_game_reaps_its_workers():
    before = _children()
    game = Game(isolation="process", workers=2)
    game.load_mod("a", 'on("tick", function() end)')
    game.load_mod("b", 'on("tick", function() end)')
    pids = set(game.pool.pids)
    assert len(pids) == 2 and pids <= _children() - before
    procs = [w._proc for w in game.pool._workers]
    game.tick()
    game.close()
    assert _children() <= before
    assert [p.returncode for p in procs] == [0, 0]  # each saw the end of its input and left
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                   for pid in pids)
    game.close()  # idempotent


def test_a_mod_that_crashes_its_worker_at_load_is_quarantined_and_can_load_again(
        make_game, hooked_pool):
    game = _isolated(make_game, hooked_pool)
    calm = game.load_mod("calm", 'on("tick", function(t) state_set("t", t) end)')
    bad = game.load_mod("bad", 'test_abort()')
    assert bad.quarantine.kind == "load" and bad.quarantine.failure.error.kind == "crashed"
    game.run(2)
    assert calm.state == {"t": 2} and calm.stats.errors == 0
    game.unload_mod("bad")
    again = game.load_mod("bad", 'on("tick", function(t) report("fine " .. t) end)')
    assert again.quarantine is None
    assert [line for _, line in game.tick().reports] == ["fine 3"]


def test_a_mod_that_cannot_be_built_again_is_quarantined_runtime(make_game, hooked_pool):
    game = _isolated(make_game, hooked_pool)
    mod = game.load_mod("fragile", """
        if state_get("seen") then test_segfault() end   -- only when built again
        on("tick", function(t)
          state_set("seen", true)
          if t == 2 then test_abort() end
        end)
    """)
    reports = game.run(3)
    assert reports[1].failures[0].error.kind == "crashed"  # tick 2: the handler
    assert mod.quarantine is not None and mod.quarantine.kind == "runtime"
    assert "could not be built again" in mod.quarantine.reason
    assert reports[2].restored == ["fragile"]
    with pytest.raises(Exception, match="unload it"):
        game.lift_quarantine("fragile")


def test_a_malformed_answer_while_loading_quarantines_the_mod(scripted_worker, make_game):
    # A worker that answers the mod's first call with an error whose fields have the wrong
    # types is killed as crashed: the load fails, it does not raise into the host.
    scripted_worker("w.send(['r', 'error', [], 0, 0, 0.0, {'kind': 'runtime', 'message': "
                    "'boom', 'chunk': 5, 'line': 1, 'traceback': []}, None, 0])")
    game = make_game(isolation="process", workers=1)
    mod = game.load_mod("m", "x = 1")
    assert mod.quarantine is not None and mod.quarantine.kind == "load"
    assert mod.quarantine.failure.error.kind == "crashed"
    assert "broke the protocol" in mod.quarantine.reason
