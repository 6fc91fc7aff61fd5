"""Handlers, events, timers, waits and world commands, tick by tick."""

from __future__ import annotations

import pytest

from moonbox.engine import EngineError, ModLimits


def lines(reports, mod=None):
    """The report lines of some tick reports (of one mod)."""
    return [line for r in reports for m, line in r.reports if mod is None or m == mod]


def test_tick_handlers_get_the_tick_and_commands_apply_at_the_boundary(game):
    game.load_mod("a", """
        on("tick", function(t)
          if t == 1 then
            coreai_world_spawn{prefab = "cube", name = "box"}
            report("exists during tick 1: " .. tostring(coreai_world_exists("box")))
          else
            report("tick " .. t .. " now " .. now() .. " exists " .. tostring(coreai_world_exists("box")))
          end
        end)
    """)
    reports = game.run(2)
    assert lines(reports) == ["exists during tick 1: false", "tick 2 now 2 exists true"]
    assert [r.status for r in reports[0].results] == ["applied"]
    assert game.world.get("box").owner == "a"


def test_mods_run_in_load_order_and_handlers_in_registration_order(game):
    game.load_mod("b", 'on("tick", function() report("b1") end) on("tick", function() report("b2") end)')
    game.load_mod("a", 'on("tick", function() report("a1") end)')
    assert lines([game.tick()]) == ["b1", "b2", "a1"]


def test_events_fan_out_to_other_mods_next_tick_by_copy(game):
    game.load_mod("sender", """
        on("tick", function(t)
          if t == 1 then
            local data = {hp = 3, tags = {"x"}}
            emit("hit", data)
            data.hp = 99 -- changing it afterwards changes nobody's copy
          end
        end)
        on("hit", function() report("sender heard itself") end)
    """)
    for name in ("r1", "r2"):
        game.load_mod(name, """
            on("hit", function(data, event, from)
              data.tags[1] = "mine"
              report(event .. " from " .. from .. " hp " .. data.hp .. " tag " .. data.tags[1])
            end)
        """)
    game.load_mod("deaf", 'on("tick", function() end)')
    first = game.tick()
    assert lines([first]) == [] and [e.name for e in first.events] == ["hit"]
    assert first.events[0].data == {"hp": 3, "tags": ["x"]}
    assert lines([game.tick()]) == ["hit from sender hp 3 tag mine"] * 2


def test_host_events(game):
    game.load_mod("a", 'on("wave", function(d, e, from) report(d.n .. " " .. tostring(from)) end)')
    game.emit("wave", {"n": 4})
    assert lines([game.tick()]) == ["4 nil"]
    with pytest.raises(EngineError) as exc:
        game.emit("tick")
    assert exc.value.code == "reserved_event"
    with pytest.raises(EngineError) as exc:
        game.emit("x", {"f": object()})
    assert exc.value.code == "invalid_event"


@pytest.mark.parametrize("event", ["tick", "world:spawned", "game:over"])
def test_reserved_events_cannot_be_emitted(game, event):
    mod = game.load_mod("a", f'emit("{event}")')
    assert mod.quarantine is not None and "reserved_event" in mod.quarantine.reason


def test_queue_is_bounded_oldest_dropped_and_counted(make_game):
    game = make_game(limits=ModLimits(max_queued_events=3, max_emits_per_tick=10))
    game.load_mod("loud", 'on("tick", function() for i = 1, 5 do emit("n", i) end end)')
    game.load_mod("quiet", 'on("n", function(d) report(tostring(d)) end)')
    game.run(2)
    assert lines([game.tick()], "quiet") == ["3", "4", "5"] * 1
    assert game.mod("quiet").stats.events_dropped == 4


def test_emits_per_tick_are_bounded(make_game):
    game = make_game(limits=ModLimits(max_emits_per_tick=2))
    game.load_mod("a", """
        on("tick", function() emit("x") emit("x") local ok, e = pcall(emit, "x") report(e) end)
    """)
    assert "at most 2 emits per tick [too_many]" in lines([game.tick()])[0]


def test_timers_after_every_cancel_spawn(game):
    game.load_mod("a", """
        after(2, function(t) report("after " .. t) end)
        local id = every(3, function(t) report("every " .. t) end)
        local gone = after(1, function() report("never") end)
        report("cancel " .. tostring(cancel(gone)) .. " " .. tostring(cancel(gone)))
        every(4, function(t) if t >= 8 then cancel(id) end end)
        spawn(function() report("spawned at " .. now()) end)
    """)
    out = lines(game.run(10))
    # cancel(id) ran at tick 8 (every 4), before tick 9's turn; the load's line comes first
    assert out == ["cancel true false", "spawned at 1", "after 2", "every 3", "every 6"]


def test_a_spawned_tasks_failures_are_named_spawn(game):
    game.load_mod("a", """
        spawn(function() error("at once") end)
        spawn(function() wait(2) error("after a wait") end)
        after(1, function() error("a timer") end)
    """)
    failures = [f for r in game.run(3) for f in r.failures]
    assert [(f.handler, f.error.message, f.tick) for f in failures] == [
        ("spawn", "at once", 1), ("after(1)", "a timer", 1), ("spawn", "after a wait", 3)]
    assert failures[0].where == "mods/a/main.lua:2"


def test_cancel_from_load_is_reported_in_the_load_run(game):
    mod = game.load_mod("a", 'report(tostring(cancel(12345)))')
    assert mod.quarantine is None


def test_wait_in_handlers_timers_and_tasks(game):
    game.load_mod("a", """
        on("tick", function(t)
          if t == 1 then
            report("start " .. now())
            wait(2)
            report("after wait " .. now())
            wait()
            report("after wait() " .. now())
          end
        end)
        spawn(function()
          for i = 1, 3 do report("task " .. now()) wait(1) end
        end)
    """)
    out = lines(game.run(6))
    assert out == ["start 1", "task 1", "task 2", "after wait 3", "task 3", "after wait() 4"]
    assert not game.mod("a").tasks


def test_bad_wait_arguments(game):
    game.load_mod("a", 'on("tick", function() wait(0) end)')
    (failure,) = game.tick().failures
    assert "wait: ticks must be a number" in failure.error.message
    assert failure.error.line == 1


def test_waiting_tasks_are_bounded(make_game):
    game = make_game(limits=ModLimits(max_tasks=2))
    game.load_mod("a", 'on("tick", function() wait(100) end)')
    game.run(2)
    report = game.tick()
    assert len(game.mod("a").tasks) == 2
    assert "too many handlers are waiting" in report.failures[0].error.message


def test_handler_and_timer_limits(make_game):
    game = make_game(limits=ModLimits(max_handlers=2, max_timers=1))
    mod = game.load_mod("a", """
        on("a", function() end) on("b", function() end)
        local ok1, e1 = pcall(on, "c", function() end)
        every(1, function() end)
        local ok2, e2 = pcall(after, 1, function() end)
        assert(not ok1 and not ok2)
        assert(e1:find("at most 2 handlers") and e2:find("at most 1 timers"))
    """)
    assert mod.quarantine is None
    assert mod.handler_count == 2 and mod.timer_count == 1


@pytest.mark.parametrize(("source", "message"), [
    ('on("tick")', "argument fn: missing"),
    ('on("tick", 5)', "argument fn: expected a function"),
    ('on(5, function() end)', "argument event: expected a string"),
    ('on("tick", print)', "only a function defined by the mod"),
    ('after(0, function() end)', "argument ticks"),
    ('every(1.5, function() end)', "argument ticks"),
    ('on("world:nope", function() end)', "unknown_event"),
    ('on("x", {f = function() end})', "function cannot cross"),
])
def test_registration_errors_name_the_mods_line(game, source, message):
    mod = game.load_mod("a", "\n\n" + source)
    assert mod.quarantine is not None and mod.quarantine.kind == "load"
    error = mod.quarantine.failure.error
    assert message in error.message, error.message
    assert error.line == 3 and error.chunk == "@mods/a/main.lua"


def test_raw_engine_bindings_are_hidden(game):
    game.load_mod("a", """
        report(tostring(engine_ready) .. " " .. tostring(engine_call))
        report(type(on) .. " " .. type(wait) .. " " .. type(spawn))
    """)
    # what the main chunk reports goes in the next tick's report, before the tick's own
    game.load_mod("b", 'on("tick", function() report(tostring(engine_ready)) end)')
    assert lines([game.tick()]) == ["nil nil", "function function function", "nil"]
    assert lines([game.tick()]) == ["nil"]  # once


def test_what_the_engine_lends_the_preparation_is_gone_before_the_main_chunk(game):
    seen = []

    def prepare(sandbox):
        seen.append(sandbox.run("return type(engine_dispatcher_starts)").values)

    game.load_mod("a", 'state_set("main", tostring(engine_dispatcher_starts))\n'
                  'on("tick", function() report(tostring(engine_dispatcher_starts)) end)',
                  prepare=prepare)
    assert seen == [("function",)]
    assert game.mod("a").state["main"] == "nil"
    assert lines([game.tick()]) == ["nil"]


def test_refusals_reach_the_issuing_mod_only(game):
    game.load_mod("a", """
        on("tick", function(t) if t == 1 then coreai_world_spawn{prefab = "dragon", name = "d"} end end)
        on("world:refused", function(e) report(e.command .. " " .. e.reason .. " " .. e.names[1]) end)
    """)
    game.load_mod("b", 'on("world:refused", function(e) report("b saw it") end)')
    game.tick()
    assert lines([game.tick()]) == ["spawn unknown_prefab d"]
    assert game.mod("a").stats.commands_refused == 1


def test_spawn_and_destroy_events(game):
    game.load_mod("a", """
        on("tick", function(t)
          if t == 1 then coreai_world_spawn{prefab = "cube", name = "c"} end
          if t == 2 then coreai_world_destroy("c") end
        end)
    """)
    game.load_mod("watch", """
        on("world:spawned", function(e) report("spawned " .. e.name .. " by " .. e.mod) end)
        on("world:destroyed", function(e) report("destroyed " .. e.name) end)
    """)
    assert lines(game.run(3), "watch") == ["spawned c by a", "destroyed c"]


def test_failures_are_attributed(game):
    game.load_mod("a", """
        local function helper()
          error("broken")
        end

        every(2, function()
          helper()
        end)
    """)
    reports = game.run(2)
    (failure,) = reports[1].failures
    assert failure.mod == "a" and failure.handler == "every(2)"
    assert failure.where == "mods/a/main.lua:6"
    assert failure.error.line == 3 and failure.error.message == "broken"
    assert failure.tick == 2 and "mods/a/main.lua:6" in str(failure)


def test_budget_trips_are_attributed_and_the_mod_carries_on(game):
    game.load_mod("a", """
        on("tick", function(t)
          if t == 1 then while true do end end
          report("alive " .. t)
        end)
        every(1, function(t) report("timer " .. t) end)
    """)
    first = game.tick()
    (failure,) = first.failures
    assert failure.trip and failure.error.budget == "steps" and failure.error.line == 3
    assert lines([first]) == ["timer 1"]
    assert lines([game.tick()]) == ["alive 2", "timer 2"]


def test_stats(game):
    game.load_mod("a", 'on("tick", function() local s = 0 for i = 1, 100 do s = s + i end end)')
    game.run(3)
    stats = game.mod("a").stats
    assert stats.calls >= 4 and stats.steps > 300 and stats.wall_s > 0
    assert stats.memory_peak_bytes > 0 and game.mod("a").memory_bytes > 0
    assert stats.errors == stats.trips == 0
    assert set(stats.to_dict()) >= {"calls", "steps", "wall_s", "errors", "trips"}


def test_state_store(game):
    game.load_mod("a", """
        on("tick", function(t)
          local s = state_get("s") or {n = 0}
          s.n = s.n + 1
          state_set("s", s)
          report(tostring(s.n))
        end)
    """)
    assert lines(game.run(3)) == ["1", "2", "3"]
    assert game.mod("a").state == {"s": {"n": 3}}


def test_state_store_is_bounded_and_data_only(make_game):
    game = make_game(limits=ModLimits(max_state_keys=2, max_value_bytes=100,
                                      max_state_bytes=150))
    game.load_mod("a", """
        on("tick", function()
          report(select(2, pcall(state_set, "f", print)))
          report(select(2, pcall(state_set, "big", string.rep("x", 200))))
          state_set("a", string.rep("x", 60))
          report(select(2, pcall(state_set, "b", string.rep("x", 90))))
          state_set("b", 1)
          report(select(2, pcall(state_set, "c", 1)))
          state_set("a", nil)
          state_set("c", 1)
          report("ok")
        end)
    """)
    out = lines([game.tick()])
    assert "cannot cross" in out[0] and "too_large" in out[1] and "too_large" in out[2]
    assert "too_many" in out[3] and out[4] == "ok"


def test_unload_keeps_entities(game):
    game.load_mod("a", 'coreai_world_spawn{prefab = "cube", name = "left"}')
    game.tick()
    game.unload_mod("a")
    assert game.world.exists("left") and not game.mods
    game.tick()


def test_load_errors(game):
    game.load_mod("a", "")
    with pytest.raises(EngineError) as exc:
        game.load_mod("a", "")
    assert exc.value.code == "duplicate_mod"
    for bad in ("A", "", "1x", "x" * 65, "a b"):
        with pytest.raises(EngineError):
            game.load_mod(bad, "")
    mod = game.load_mod("syntax", "on(")
    assert mod.quarantine.kind == "load" and mod.quarantine.failure.error.kind == "syntax"
    mod = game.load_mod("waits", "wait(1)")
    assert mod.quarantine.kind == "load"


def test_a_closed_game_refuses(make_game):
    game = make_game()
    game.load_mod("a", 'on("tick", function() end)')
    game.close()
    game.close()
    with pytest.raises(EngineError):
        game.tick()


def test_zero_mods_tick(game):
    report = game.tick()
    assert report.tick == 1 and report.calls == 0 and not report.results
