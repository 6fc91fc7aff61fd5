"""The dispatcher's protocol under attack: a mod cannot reach the engine library's worker
coroutines or forge what they yield, and whatever the dispatcher yields is checked, so a
bad value fails that mod only and the tick goes on."""

from __future__ import annotations

import pytest

from moonbox.engine import Game, ModLimits, _loading

GOOD = """
on("tick", function(t)
  coreai_world_spawn{prefab = "cube", name = "good-" .. t}
end)
"""


def test_a_mod_cannot_resume_its_worker_coroutines(game):
    # An idle worker, resumed by the mod, used to run the mod's function and hand it the
    # library's private WAIT value; yielding that with NaN ticks crashed Game.tick().
    game.load_mod("good", GOOD)
    game.load_mod("evil", """
      local worker, WAIT
      spawn(function()
        wait(2)
        local ok, tag = pcall(coroutine.resume, worker, function() wait(5) end)
        report("resume: " .. tostring(ok) .. " " .. type(tag))
        WAIT = tag
      end)
      on("tick", function(t)
        if t == 1 then report("running: " .. tostring(coroutine.running())) end
        if t == 2 then worker = coroutine.running() end
        if t == 4 and WAIT then coroutine.yield(WAIT, 0/0) end
      end)
    """)
    reports = game.run(6)
    lines = [line for r in reports for m, line in r.reports if m == "evil"]
    assert lines[0] == "running: nil"
    assert len(lines) == 2 and lines[1].startswith("resume: ") and "table" not in lines[1]
    assert len(game.world) == 6  # the good mod ran every tick


# Every place a mod's own coroutine could call wait: a wait there used to yield the
# library's private WAIT value to the mod, which resumed the coroutine.
OWN_COROUTINE_WAITS = """
resume_point("again", function(d) end)
local function try(where, f)
  local co = coroutine.create(f)
  local ok, a, b = coroutine.resume(co)
  report(where .. ": " .. tostring(ok) .. " " .. tostring(a) .. " " .. tostring(b))
  local w = coroutine.wrap(f)
  local ok2, c = pcall(w)
  report(where .. " wrap: " .. tostring(ok2) .. " " .. tostring(c))
end
local function attempts(where)
  try(where .. " plain", function() return wait(1) end)
  try(where .. " point", function() return wait(2, "again", {n = 1}) end)
  try(where .. " nested", function()
    local inner = coroutine.wrap(function() return wait(1) end)
    return inner()
  end)
  try(where .. " pcall", function() return select(2, pcall(wait, 1)) end)
end
attempts("load")
on("tick", function(t)
  if t == 2 then wait(1) end  -- from then on this handler runs in a worker
  attempts("tick " .. t)
end)
every(2, function() attempts("timer") end)
spawn(function() wait(1) attempts("task") end)
"""


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_a_coroutine_of_the_mods_own_cannot_wait(make_game, isolation):
    game = make_game(isolation=isolation)
    game.load_mod("m", OWN_COROUTINE_WAITS)
    assert game.mod("m").quarantine is None
    reports = game.run(4)
    lines = [line for r in reports for _, line in r.reports]
    assert not any(r.failures for r in reports)
    assert len(lines) >= 8 * 6
    for line in lines:
        assert "table" not in line, line
        assert "a coroutine the mod made cannot wait" in line, line
    game.load_mod("at_load", OWN_COROUTINE_WAITS.replace('attempts("load")',
                                                         'attempts("load") wait(1)'))
    assert game.mod("at_load").quarantine.kind == "load"  # the main chunk's own wait


def test_coroutines_of_the_mod_still_work_in_handlers(game):
    game.load_mod("m", """
      on("tick", function(t)
        local co = coroutine.create(function(a)
          local b = coroutine.yield(a + 1, coroutine.running() ~= nil)
          return b * 2
        end)
        local _, x, inside = coroutine.resume(co, t)
        local _, y = coroutine.resume(co, 10)
        report(x .. " " .. tostring(inside) .. " " .. y .. " " .. coroutine.status(co))
      end)
    """)
    (report,) = game.run(1)
    assert report.reports == [("m", "2 true 20 dead")]
    assert report.failures == []


LEAK = "local WAIT, DONE = {}, {}\n"
LUA_CHECK = ("  elseif type(y) ~= \"number\" or y ~= y or y == huge or y == -huge then\n"
             "    return 2, \"wait: ticks must be a number from 1 to \" .. MAX_WAIT"
             "   -- never from wait()\n"
             "  else\n"
             "    y = floor(min(max(y, 1), MAX_WAIT))\n")


def leaky_runtime(monkeypatch, *, lua_check: bool) -> None:
    """An engine library that hands the mod its WAIT value (as a leak would), with or
    without its own check of a wait's ticks: the host must hold either way."""
    runtime = _loading.RUNTIME
    assert LEAK in runtime
    runtime = runtime.replace(LEAK, LEAK + "env.LEAKED_WAIT = WAIT\n")
    if not lua_check:
        assert LUA_CHECK in runtime
        runtime = runtime.replace(LUA_CHECK, "")
    monkeypatch.setattr(_loading, "RUNTIME", runtime)


# Its handler pauses once first: a handler that never paused runs on the dispatcher's own
# coroutine, where any yield is a one-tick wait whatever it hands over (nothing to forge);
# from then on it runs in a worker, whose yields the dispatcher reads.
FORGER = """
local forged = { [2] = 0/0, [3] = 1/0, [4] = "soon", [5] = -1/0 }
on("tick", function(t)
  if t == 1 then return wait(1) end
  if forged[t] ~= nil then coroutine.yield(LEAKED_WAIT, forged[t]) end
  if t == 6 then coroutine.yield(LEAKED_WAIT, 1e12) end
end)
"""


@pytest.mark.parametrize("lua_check", [True, False], ids=["library", "host"])
def test_a_forged_wait_fails_only_that_mod(make_game, monkeypatch, lua_check):
    leaky_runtime(monkeypatch, lua_check=lua_check)
    game = make_game(limits=ModLimits(max_failures=10))
    game.load_mod("good", GOOD)
    game.load_mod("evil", FORGER)
    reports = game.run(6)  # never raises
    evil = game.mod("evil")
    failures = [f for r in reports for f in r.failures]
    assert [f.mod for f in failures] == ["evil"] * 4
    assert [f.tick for f in failures] == [2, 3, 4, 5]
    assert all(f.handler == "on('tick')" and f.error.kind == "runtime" for f in failures)
    assert evil.stats.errors == 4 and evil.quarantine is None
    # A finite wait past the maximum is clamped to it.
    (task,) = evil.tasks.values()
    assert task.due == 6 + 1_000_000
    assert len(game.world) == 6 and all(r.results[0].applied for r in reports)


def test_forged_waits_count_towards_quarantine(make_game, monkeypatch):
    leaky_runtime(monkeypatch, lua_check=False)
    game = make_game(limits=ModLimits(max_failures=3))
    game.load_mod("good", GOOD)
    game.load_mod("evil", FORGER)
    reports = game.run(6)
    evil = game.mod("evil")
    # (tick 2's failure is followed by its task's plain end: the third in a row is tick 5's)
    assert evil.quarantine.kind == "failures" and evil.quarantine.tick == 5
    assert evil.tasks == {}
    assert len(game.world) == 6 and game.mod("good").quarantine is None
    assert reports[4].quarantined == ["evil"]


def test_an_engine_fault_while_dispatching_a_mod_stops_that_mod_only(make_game,
                                                                     monkeypatch):
    game = make_game()
    game.load_mod("good", GOOD)
    game.load_mod("odd", 'on("tick", function() wait(1) end)')
    park = Game._park

    def faulty_park(self, mod, values, label, where):
        if mod.id == "odd":
            raise ValueError("a value the engine did not expect")
        park(self, mod, values, label, where)

    monkeypatch.setattr(Game, "_park", faulty_park)
    reports = game.run(3)  # never raises
    odd = game.mod("odd")
    assert odd.quarantine.kind == "runtime" and odd.quarantine.tick == 1
    assert "ValueError: a value the engine did not expect" in odd.quarantine.reason
    assert reports[0].quarantined == ["odd"]
    assert len(game.world) == 3 and game.mod("good").quarantine is None
