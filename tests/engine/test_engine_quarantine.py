"""Quarantine: consecutive failures or trips suspend one mod; the others never notice."""

from __future__ import annotations

import pytest

from moonbox import Budget
from moonbox.engine import EngineError, ModLimits

GOOD = """
on("tick", function(t)
  local name = "good-" .. t
  coreai_world_spawn{prefab = "cube", name = name, x = t}
  report("good " .. t)
end)
"""


def lines(reports, mod=None):
    """The report lines of some tick reports (of one mod)."""
    return [line for r in reports for m, line in r.reports if mod is None or m == mod]


def test_consecutive_errors_quarantine_and_others_carry_on(make_game):
    game = make_game(limits=ModLimits(max_failures=3))
    game.load_mod("good", GOOD)
    game.load_mod("bad", 'on("tick", function(t) error("nope " .. t) end)')
    reports = game.run(5)
    bad = game.mod("bad")
    assert bad.quarantine.kind == "failures" and bad.quarantine.tick == 3
    assert "failed 3 times in a row" in bad.quarantine.reason
    assert bad.quarantine.failure.error.message == "nope 3"
    assert reports[2].quarantined == ["bad"]
    assert bad.stats.errors == 3 and bad.stats.calls == 5  # library, main chunk, 3 handlers
    assert lines(reports, "good") == [f"good {t}" for t in range(1, 6)]
    assert len(game.world) == 5 and game.mod("good").quarantine is None


def test_consecutive_trips_quarantine(make_game):
    game = make_game(limits=ModLimits(max_trips=2),
                     budget=Budget(steps=10_000, wall_s=1.0, max_memory="16MB",
                                   alloc_bytes="4MB"))
    game.load_mod("good", GOOD)
    game.load_mod("spin", 'on("tick", function() while true do end end)')
    reports = game.run(4)
    spin = game.mod("spin")
    assert spin.quarantine.kind == "trips" and spin.stats.trips == 2
    assert spin.quarantine.failure.error.budget == "steps"
    assert lines(reports, "good") == [f"good {t}" for t in range(1, 5)]


def test_a_success_resets_the_count(make_game):
    game = make_game(limits=ModLimits(max_failures=2))
    game.load_mod("flaky", 'on("tick", function(t) if t % 2 == 1 then error("odd") end end)')
    game.run(10)
    assert game.mod("flaky").quarantine is None and game.mod("flaky").stats.errors == 5


def test_quarantined_mods_get_no_events_timers_or_calls(make_game):
    game = make_game(limits=ModLimits(max_failures=1))
    game.load_mod("bad", """
        on("tick", function(t) if t == 1 then error("once") end end)
        on("ping", function() report("ping") end)
        every(1, function(t) report("timer " .. t) end)
        export("f", function() return 1 end)
    """)
    game.load_mod("caller", """
        on("tick", function(t)
          emit("ping")
          local ok, err = pcall(function() return import("bad", "f")() end)
          report(tostring(ok) .. " " .. tostring(err))
        end)
    """)
    reports = game.run(3)
    assert lines(reports, "bad") == []
    assert all("[quarantined]" in line for line in lines(reports, "caller"))
    assert not game.mod("bad").queue


def test_the_host_lifts_a_quarantine(make_game):
    game = make_game(limits=ModLimits(max_failures=1))
    game.load_mod("m", """
        local fail = true
        on("tick", function(t) if fail then fail = false error("x") end report("ran " .. t) end)
        after(2, function(t) report("late timer " .. t) end)
    """)
    game.run(3)
    assert game.mod("m").quarantine is not None
    game.lift_quarantine("m")
    assert lines([game.tick()]) == ["ran 4", "late timer 4"]
    game.lift_quarantine("m")  # not quarantined: nothing to do


def test_host_quarantine(game):
    game.load_mod("m", 'on("tick", function(t) report("t" .. t) end)')
    game.quarantine("m", "an admin said so")
    assert lines(game.run(2)) == []
    assert game.mod("m").quarantine.kind == "host"
    game.lift_quarantine("m")
    assert lines([game.tick()]) == ["t3"]


def test_load_failures_cannot_be_lifted(game):
    game.load_mod("broken", "error('at load')")
    with pytest.raises(EngineError) as exc:
        game.lift_quarantine("broken")
    assert exc.value.code == "not_liftable"
    with pytest.raises(EngineError):
        game.lift_quarantine("nobody")


def test_a_memory_bomb_is_contained(make_game):
    game = make_game(budget=Budget(steps=10_000_000, wall_s=2.0, alloc_bytes="8MB",
                                   max_memory="8MB"))
    game.load_mod("good", GOOD)
    game.load_mod("bomb", """
        keep = {}
        on("tick", function()
          for i = 1, 1e9 do keep[#keep + 1] = string.rep("x", 1000) .. i end
        end)
    """)
    reports = game.run(5)
    bomb = game.mod("bomb")
    assert bomb.quarantine is not None and bomb.stats.trips >= 1
    assert any(f.error.budget == "memory" for r in reports for f in r.failures)
    assert lines(reports, "good") == [f"good {t}" for t in range(1, 6)]


def test_trips_inside_pcall_still_count(make_game):
    game = make_game(limits=ModLimits(max_trips=1),
                     budget=Budget(steps=5_000, wall_s=1.0, max_memory="16MB",
                                   alloc_bytes="4MB"))
    game.load_mod("sly", 'on("tick", function() pcall(function() while true do end end) end)')
    game.tick()
    assert game.mod("sly").quarantine.kind == "trips"


def test_quarantine_is_isolated_from_the_world_queue(make_game):
    game = make_game(limits=ModLimits(max_failures=1))
    game.load_mod("half", """
        on("tick", function(t)
          coreai_world_spawn{prefab = "cube", name = "half-" .. t}
          error("after queueing")
        end)
    """)
    game.run(2)
    # The command issued before the error still applies (commands are requests, not undo).
    assert game.world.exists("half-1") and not game.world.exists("half-2")
