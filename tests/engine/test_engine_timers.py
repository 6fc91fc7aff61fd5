"""Timers: cancelled ones leave nothing behind, the limit counts what the host holds, and
the heap keeps its order when it is rebuilt in the middle of a dispatch."""

from __future__ import annotations

from moonbox import Budget
from moonbox.engine import ModLimits


def test_cancelled_timers_do_not_pile_up_in_the_host(make_game):
    # after() then cancel() in a loop used to leave every (due, id) in the heap for good.
    game = make_game(budget=Budget(wall_s=5))  # 1,200 host calls a tick, on any machine
    game.load_mod("churn", """
      on("tick", function()
        for i = 1, 600 do cancel(after(1000000, function() end)) end
      end)
    """)
    mod = game.mod("churn")
    for _ in range(20):
        report = game.tick()
        assert report.failures == []
        assert len(mod.timers) <= game.limits.max_timers
    assert mod.timer_count == 0


def test_the_timer_limit_counts_heap_entries(make_game):
    game = make_game(limits=ModLimits(max_timers=4))
    game.load_mod("m", """
      on("tick", function()
        local ids = {}
        for i = 1, 4 do ids[i] = after(100, function() end) end
        local ok, err = pcall(after, 100, function() end)
        report(tostring(ok) .. " " .. err)
        cancel(ids[1])
        report(tostring(pcall(after, 100, function() end)))
        cancel(ids[2])
        for i = 1, 50 do cancel(after(100, function() end)) end  -- 3 pending all along
        report(tostring(pcall(after, 100, function() end)))
        report(tostring(pcall(after, 100, function() end)))
      end)
    """)
    mod = game.mod("m")
    (report,) = game.run(1)
    assert report.failures == []
    (full, freed, churned, full_again) = [line for _, line in report.reports]
    assert full.startswith("false ") and "[too_many]" in full
    assert (freed, churned, full_again) == ("true", "true", "false")
    assert mod.timer_count == 4 and len(mod.timers) == 4


def test_timers_fire_in_order_across_a_rebuild_during_dispatch(make_game):
    game = make_game()
    game.load_mod("m", """
      local fired = {}
      every(1, function(t)
        -- Churn inside the timer phase: the heap is rebuilt while dispatch walks it.
        for i = 1, 40 do cancel(after(3, function() end)) end
        fired[#fired + 1] = "every " .. t
      end)
      after(3, function(t) fired[#fired + 1] = "after " .. t end)
      every(2, function(t) fired[#fired + 1] = "two " .. t end)
      on("tick", function(t)
        if t == 5 then report(table.concat(fired, ", ")) end
      end)
    """)
    reports = game.run(5)
    assert all(r.failures == [] for r in reports)
    assert reports[4].reports == [("m", ", ".join([
        "every 1", "every 2", "two 2", "every 3", "after 3", "every 4", "two 4"]))]
    mod = game.mod("m")
    assert mod.timer_count == 2  # the two every() timers
    assert len(mod.timers) <= 2 * mod.timer_count  # cancelled entries: at most as many
