"""Game.snapshot() / Game.restore(): a whole game at a tick boundary, and back.

The property: restoring a snapshot and running N more ticks gives what running on gives
(the world's content hash, and every mod's state, timers, tasks, quarantine and reports),
in process and isolated.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moonbox import Budget
from moonbox.bindings import Binding, Registry, default_bindings
from moonbox.engine import EngineError, Game, GameSnapshot, ModLimits
from moonbox.engine._snapshot import SNAPSHOT_VERSION

# Each keeps what must survive in state_set or declares resume points, as the docs ask.
WALKER = """
local me = MOD .. "-walker"
on("tick", function(t)
  if not coreai_world_exists(me) then
    if not state_get("spawned") then
      state_set("spawned", true)
      coreai_world_spawn{prefab = "sphere", name = me, x = math.random(-50, 50)}
    end
    return
  end
  local x, y, z = coreai_world_pos(me)
  coreai_world_change(me, {x = x + math.random(-3, 3), z = z + math.random() * 2 - 1})
  if math.random() < 0.2 then
    local n = (state_get("drops") or 0) + 1
    state_set("drops", n)
    coreai_world_spawn{prefab = "cube", name = me .. "-drop-" .. n, x = math.random(0, 99)}
  end
end)
on("poke", function(data)
  coreai_world_spawn{prefab = "marker", name = me .. "-poke-" .. data.id, y = data.y}
end)
"""

CLOCK = """
local me = MOD .. "-clock"
every(3, function(t)
  coreai_world_spawn{prefab = "cube", name = me .. "-" .. t, x = math.random(-9, 9)}
end)
local boom
boom = function(t)
  coreai_world_spawn{prefab = "marker", name = me .. "-boom-" .. t, z = math.random(1, 5)}
  after(math.random(2, 5), boom)   -- registered after loading: through its resume point
end
resume_point("boom", boom)
after(2, boom)
"""

WAITER = """
local me = MOD .. "-waiter"
local function walk(n)
  while true do
    coreai_world_spawn{prefab = "cube", name = me .. "-" .. n, y = math.random(0, 9)}
    n = n + 1
    wait(math.random(1, 3), "walk", n)   -- after a restore: walk(n), the same as going on
  end
end
resume_point("walk", walk)
spawn(function() walk(1) end)
"""

# A handler that pauses: its first pause turns the dispatcher's own coroutine into the
# task (a handler runs there until it once pauses), the later ones pause in a worker.
PAUSER = """
local me = MOD .. "-pauser"
local function later(d)
  coreai_world_spawn{prefab = "cube", name = me .. "-" .. d.t, x = d.t % 10}
end
resume_point("later", later)
on("tick", function(t)
  if t % 3 == 1 then
    local d = {t = t}
    wait(math.random(1, 4), "later", d)   -- after a restore: later(d), as going on does
    later(d)
  end
end)
"""

TALKER = """
on("tick", function(t)
  if t % 2 == 0 then emit("chat", {n = t, r = math.random(100)}) end
  if t % 3 == 0 then coreai_world_change("nobody", {x = 1}) end  -- refused next tick
  export("heard", state_get("heard") or 0)
end)
on("chat", function(data, event, from)
  state_set("heard", (state_get("heard") or 0) + 1)
  coreai_world_spawn{prefab = "marker", name = MOD .. "-heard-" .. from .. "-" .. data.n,
                     x = data.r}
end)
on("world:refused", function(data)
  state_set("refused", (state_get("refused") or 0) + 1)
  report("refused " .. data.reason)
end)
"""

FAULTY = """
on("tick", function(t)
  if math.random() < 0.5 then error("bad luck at " .. t) end
  coreai_world_spawn{prefab = "cube", name = MOD .. "-ok-" .. t}
end)
"""

EXPORTER = """
export("bump", function(n)
  state_set("bumps", (state_get("bumps") or 0) + n)
  return state_get("bumps")
end)
"""

IMPORTER = """
on("tick", function(t)
  local bump = import("exp", "bump")
  local v = bump(math.random(1, 3))
  coreai_world_spawn{prefab = "cube", name = MOD .. "-b-" .. t, x = v % 100}
end)
"""

POOL = {"walker": WALKER, "clock": CLOCK, "waiter": WAITER, "talker": TALKER,
        "faulty": FAULTY, "talker2": TALKER, "pauser": PAUSER}
LIMITS = ModLimits(max_failures=3)
# Steps bound the mods' calls; the wall budget is the default's ten times, for a loaded
# machine: a host pause inside a main chunk's build once passed the default 0.25 s.
BUDGET = Budget(steps=200_000, wall_s=2.5, alloc_bytes=4 << 20, max_memory=32 << 20)


def load(game: Game, names: list[str]) -> None:
    for name in names:
        game.load_mod(name, f'local MOD = "{name}"\n' + POOL[name])
    if "talker" in names:  # an exporter and its caller come together
        game.load_mod("exp", EXPORTER)
        game.load_mod("imp", 'local MOD = "imp"\n' + IMPORTER)


def host_inputs(game: Game, tick: int, pokes: dict[int, list[int]]) -> None:
    for k, y in enumerate(pokes.get(tick, [])):
        game.emit("poke", {"id": f"{tick}-{k}", "y": y})


def fingerprint(game: Game) -> dict:
    """Everything a run can be told apart by, besides the world."""
    out = {"tick": game.tick_count, "world": game.world.content_hash(),
           "pending": len(game.world.pending)}
    for mod in game.mods:
        out[mod.id] = (
            mod.state,
            sorted((t.id, t.due, t.point, repr(t.data)) for t in mod.tasks.values()),
            sorted((c.id, c.kind, c.event, c.due) for c in mod.callbacks.values()),
            None if mod.quarantine is None else (mod.quarantine.kind, mod.quarantine.tick),
            mod.failures_in_a_row, mod.stats.calls, mod.stats.errors,
            sorted(mod.exports), len(mod.queue),
        )
    return out


def run_on(game: Game, ticks: int, pokes: dict[int, list[int]]) -> list:
    seen = []
    for _ in range(ticks):
        host_inputs(game, game.tick_count, pokes)
        report = game.tick()
        seen.append((report.calls, [str(f) for f in report.failures], report.reports,
                     [(r.id, r.status, r.reason) for r in report.results],
                     report.quarantined))
    return seen


def check_restores_alike(seed: int, names: list[str], before: int, after: int,
                         pokes: dict[int, list[int]], **restored_options) -> None:
    with Game(seed=seed, limits=LIMITS, budget=BUDGET) as live:
        load(live, names)
        run_on(live, before, pokes)
        snapshot = live.snapshot()
        assert snapshot.unresumable == ()
        data = snapshot.to_bytes()
        on = run_on(live, after, pokes)
        with Game(seed=seed, limits=LIMITS, budget=BUDGET, **restored_options) as copy:
            report = copy.restore(data)
            assert report.lost == [] and report.quarantined == []
            again = run_on(copy, after, pokes)
            assert again == on
            assert fingerprint(copy) == fingerprint(live)


POKES = st.dictionaries(st.integers(0, 20), st.lists(st.integers(-9, 9), max_size=2),
                        max_size=4)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1),
       names=st.lists(st.sampled_from(sorted(POOL)), min_size=1, max_size=4, unique=True),
       before=st.integers(0, 9), after=st.integers(1, 9), pokes=POKES)
def test_restore_then_run_on_is_running_on(seed, names, before, after, pokes):
    check_restores_alike(seed, names, before, after, pokes)


@pytest.mark.usefixtures("no_workers_left_behind")
@settings(max_examples=2, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), before=st.integers(1, 6), after=st.integers(1, 6))
def test_restore_into_an_isolated_game_is_running_on(seed, before, after):
    check_restores_alike(seed, ["walker", "waiter", "clock", "talker", "pauser"], before,
                         after, {}, isolation="process", workers=2, spare_workers=0)


@pytest.mark.usefixtures("no_workers_left_behind")
def test_an_isolated_game_snapshots_and_restores_in_process():
    with Game(seed=3, limits=LIMITS, isolation="process", workers=2,
              spare_workers=0) as live:
        load(live, ["walker", "waiter", "clock", "faulty", "pauser"])
        live.run(5)
        data = live.snapshot().to_bytes()
        on = run_on(live, 6, {})
        with Game(seed=3, limits=LIMITS) as copy:
            assert copy.restore(data).lost == []
            assert run_on(copy, 6, {}) == on
            assert fingerprint(copy) == fingerprint(live)


def test_a_game_restores_into_itself(make_game):
    game = make_game(seed=11, limits=LIMITS)
    load(game, ["walker", "clock", "waiter", "faulty"])
    game.run(4)
    snapshot = game.snapshot()
    first = run_on(game, 5, {})
    mark = fingerprint(game)
    game.restore(snapshot)
    assert game.tick_count == 4
    assert run_on(game, 5, {}) == first
    assert fingerprint(game) == mark


def test_the_bytes_round_trip_and_are_checked(game):
    load(game, ["walker", "talker"])
    game.run(3)
    snapshot = game.snapshot()
    data = snapshot.to_bytes()
    assert GameSnapshot.from_bytes(data) == snapshot
    assert [m.id for m in snapshot.mods] == ["walker", "talker", "exp", "imp"]
    assert snapshot.mods[0].revision == snapshot.mods[0].revision.lower()
    for bad in (b"nonsense", data[:-7]):
        with pytest.raises(EngineError) as info:
            GameSnapshot.from_bytes(bad)
        assert info.value.code == "bad_snapshot"
    import msgpack
    doc = msgpack.unpackb(data, raw=False, strict_map_key=False)
    doc["version"] = SNAPSHOT_VERSION + 1
    with pytest.raises(EngineError, match="version"):
        GameSnapshot.from_bytes(msgpack.packb(doc, use_bin_type=True))
    # A source that does not match its revision is refused before anything changes.
    doc["version"] = SNAPSHOT_VERSION
    doc["mods"][0]["source"] = "on('tick', function() end)"
    with pytest.raises(EngineError) as info:
        game.restore(msgpack.packb(doc, use_bin_type=True))
    assert info.value.code == "bad_snapshot" and len(game.mods) == 4


def test_queued_events_timers_and_commands_survive(make_game):
    game = make_game()
    game.load_mod("a", """
      on("ping", function(data) report("ping " .. data.n) end)
      after(5, function() report("five") end)
    """)
    game.tick()
    game.emit("ping", {"n": 1})                       # in the outbox
    game.world.submit("spawn", {"prefab": "cube", "name": "host-cube"})  # queued
    snapshot = game.snapshot()
    copy = make_game()
    copy.restore(snapshot)
    assert copy.world.pending and copy.tick_count == 1
    lines = [line for r in copy.run(5) for _, line in r.reports]
    assert lines == ["ping 1", "five"]
    assert copy.world.exists("host-cube")


def test_a_wait_without_a_resume_point_is_reported_never_dropped(make_game):
    game = make_game()
    game.load_mod("w", """
      on("game:restored", function(data)
        report("restored at " .. data.tick .. ", lost " .. #data.lost .. ": "
               .. data.lost[1].kind .. " " .. data.lost[1].label)
        state_set("restarted", true)
      end)
      spawn(function() wait(10) report("never after a restore") end)
      on("tick", function(t)
        if t == 3 then after(4, function() end) end   -- a plain function: no point
      end)
    """)
    game.run(3)
    snapshot = game.snapshot()
    kinds = sorted(lost.kind for lost in snapshot.unresumable)
    assert kinds == ["callback", "task"]
    task = next(lost for lost in snapshot.unresumable if lost.kind == "task")
    assert task.mod == "w" and task.label == "spawn" and task.where == "mods/w/main.lua:7"
    assert "resume point" in task.reason
    copy = make_game()
    report = copy.restore(snapshot)
    assert sorted(lost.kind for lost in report.lost) == ["callback", "task"]
    mod = copy.mod("w")
    assert mod.tasks == {} and all(c.kind != "after" for c in mod.callbacks.values())
    (tick,) = copy.run(1)
    assert tick.reports == [("w", "restored at 3, lost 2: callback after(4)")] or \
        tick.reports == [("w", "restored at 3, lost 2: task after(1)")]
    assert mod.state == {"restarted": True}


def test_a_resume_point_the_main_chunk_no_longer_declares_is_reported(make_game):
    game = make_game()
    game.load_mod("m", """
      if DECLARE ~= false then resume_point("p", function() report("p") end) end
      spawn(function() wait(5, "p") end)
    """)
    game.run(2)
    snapshot = game.snapshot()
    assert snapshot.unresumable == ()
    # The same revision, built with a preparation that keeps it from declaring the point.
    snapshot = replace(snapshot, mods=(replace(snapshot.mods[0], prepared=True),))
    copy = make_game()
    report = copy.restore(snapshot, prepare=lambda mod_id: lambda sandbox: sandbox.run(
        "DECLARE = false", "=prep"))
    assert [(lost.kind, "'p' is not declared" in lost.reason) for lost in report.lost] == [
        ("task", True)]
    assert copy.mod("m").tasks == {}


def test_a_main_chunk_that_registers_otherwise_is_quarantined(make_game):
    game = make_game()
    game.load_mod("m", """
      on("tick", function() end)
      if state_get("twice") then on("tick", function() end) end
    """)
    game.run(1)
    snapshot = game.snapshot()
    copy = make_game()
    copy.load_mod("m", "")  # replaced by the restore
    copy.set_state("m", {"twice": True})
    # A host that changes the state the main chunk sees at load: other registrations.
    m = snapshot.mods[0]
    changed = replace(m, load_signature=[*m.load_signature, [9, "on", "tick", 0, "x:1"]])
    report = copy.restore(replace(snapshot, mods=(changed,)))
    assert report.quarantined == ["m"] and report.lost[0].kind == "mod"
    assert copy.mod("m").quarantine.kind == "runtime"
    assert "other handlers" in copy.mod("m").quarantine.reason


def test_quarantine_records_and_failure_counts_survive(make_game):
    game = make_game(limits=ModLimits(max_failures=2))
    game.load_mod("bad", 'on("tick", function(t) error("no " .. t) end)')
    game.load_mod("shaky", 'on("tick", function(t) if t == 1 then error("once") end end)')
    game.load_mod("broken", "this is not lua")
    game.run(2)
    snapshot = game.snapshot()
    copy = make_game(limits=ModLimits(max_failures=2))
    copy.restore(snapshot)
    bad, broken = copy.mod("bad"), copy.mod("broken")
    assert bad.quarantine.kind == "failures" and bad.quarantine.tick == 2
    assert bad.quarantine.failure.error.line == 1
    assert "no 2" in bad.quarantine.failure.error.message
    assert broken.quarantine.kind == "load"
    assert copy.mod("shaky").quarantine is None
    copy.lift_quarantine("bad")
    (tick,) = copy.run(1)
    assert [f.mod for f in tick.failures] == ["bad"]


def test_random_numbers_go_on_where_they_were(make_game):
    draw = 'on("tick", function() report(tostring(math.random(1, 1e9))) end)'
    game = make_game(seed=21)
    game.load_mod("r", draw)
    game.run(2)
    snapshot = game.snapshot()
    on = [line for r in game.run(4) for _, line in r.reports]
    copy = make_game(seed=99)  # another seed: the snapshot's generator state wins
    copy.restore(snapshot)
    assert [line for r in copy.run(4) for _, line in r.reports] == on


DRAWS = """
local out = {}
for _, seed in ipairs({0, 1, 42, 2^31 - 1, -7, 0.5, 3.75, 1e300, 1e308, -2.5e-310}) do
  math.randomseed(seed)
  for _ = 1, 3 do
    out[#out + 1] = math.random()
    out[#out + 1] = math.random(6)
    out[#out + 1] = math.random(-3, 3)
    out[#out + 1] = math.random(2.5, 7.25)
    out[#out + 1] = math.random(1, 2^40)
  end
end
return table.concat(out, " ")
"""


def test_the_engine_generator_draws_what_the_runtime_draws(game):
    """The engine library's math.random is LuaJIT's own generator written out: the same
    numbers for every seed, so mods draw what they drew before it took over."""
    from moonbox.sandbox import Sandbox

    with Sandbox() as plain:
        expected = plain.run(DRAWS).value
    game.load_mod("r", 'on("tick", function() report((function() ' + DRAWS + ' end)()) end)')
    (line,) = [text for _, text in game.tick().reports]
    assert line == expected and len(line.split()) == 150


def test_the_engine_generator_checks_its_arguments(game):
    game.load_mod("r", """
      on("tick", function()
        report(tostring(math.random("6") <= 6))
        report(select(2, pcall(math.random, "x")))
        report(select(2, pcall(math.randomseed)))
      end)
    """)
    assert [line for _, line in game.tick().reports] == [
        "true", "bad argument #1 to 'random' (number expected, got string)",
        "bad argument #1 to 'randomseed' (number expected, got no value)"]


def test_data_and_function_exports_come_back(make_game):
    game = make_game()
    game.load_mod("lib", """
      local function twice(n) return 2 * n end
      resume_point("twice", twice)
      export("version", 1)
      on("tick", function(t)
        export("version", t)                    -- data, changed after loading
        if t == 2 then export("double", twice) end   -- a function, through its point
      end)
    """)
    game.load_mod("user", """
      on("tick", function(t)
        if t > 3 then report(import("lib", "version") .. " " .. import("lib", "double")(t)) end
      end)
    """)
    game.run(3)
    snapshot = game.snapshot()
    on = [line for r in game.run(2) for _, line in r.reports]
    copy = make_game()
    assert copy.restore(snapshot).lost == []
    assert [line for r in copy.run(2) for _, line in r.reports] == on == ["4 8", "5 10"]


def test_restore_asks_for_what_the_host_gave(make_game):
    game = make_game()
    game.load_mod("p", "x = 1", prepare=lambda sandbox: None)
    game.load_mod("a", "x = 1", access={"owner": "me"})
    snapshot = game.snapshot()
    copy = make_game()
    with pytest.raises(EngineError) as info:
        copy.restore(snapshot)
    assert info.value.code == "needs_prepare"
    with pytest.raises(EngineError) as info:
        copy.restore(snapshot, prepare=lambda mod_id: lambda sandbox: None)
    assert info.value.code == "needs_access"
    copy.restore(snapshot, prepare=lambda mod_id: lambda sandbox: None,
                 access={"a": {"owner": "me"}})
    assert [m.id for m in copy.mods] == ["p", "a"]
    assert copy.mod("a").api.access == {"owner": "me"}


def test_permissions_and_budgets_come_back(make_game):
    from moonbox.bindings import Permissions

    game = make_game()
    game.load_mod("ro", "x = 1", permissions=Permissions(mode="readonly"),
                  budget=Budget(steps=1234, wall_s=1.0))
    copy = make_game()
    copy.restore(game.snapshot())
    mod = copy.mod("ro")
    assert mod.permissions == Permissions(mode="readonly") and mod.budget.steps == 1234


def test_no_snapshot_during_a_tick():
    outcome = []
    registry = Registry(default_bindings())

    def snap(call, args):
        try:
            game.snapshot()
        except EngineError as exc:
            outcome.append(exc.code)

    from pydantic import BaseModel

    class NoArgs(BaseModel):
        pass

    registry.register(Binding("host_snapshot", NoArgs, snap))
    with Game(registry=registry, seed=1) as game:
        game.load_mod("m", 'on("tick", function() host_snapshot() end)')
        game.tick()
    registry.close()
    assert outcome == ["busy"]
