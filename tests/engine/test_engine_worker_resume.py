"""The engine library's resume of its workers and its call of a handler on the
dispatcher's own coroutine (``worker_resume``, ``worker_call``, protected.lua) against the
mod's own ``coroutine.resume`` of a worker for every call, which it used before and which
an isolated game's workers still use: handlers that fail, trip, nest coroutines, wait and
hand values back give the same reports either way (the library's own steps fewer), and no
mod can reach the resume."""

from __future__ import annotations

from typing import Any

import pytest

from moonbox import Budget
from moonbox.engine import Game
from moonbox.sandbox import Sandbox

HANDLERS = {
    "error": "error('boom')",
    "error_level": "local function f() error('up', 2) end f()",
    "error_table": "error({code = 1})",
    "memory": "local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end",
    "steps": "while true do end",
    "nested_trip": "local co = coroutine.create(function() while true do end end) "
                   "coroutine.resume(co)",
    "deep": "local function nest(n) local co = coroutine.create(function() "
            "return nest(n + 1) end) local ok, e = coroutine.resume(co) "
            "if not ok then error(e, 0) end return e end nest(1)",
    "pcall_memory": "pcall(function() local t = {} "
                    "for i = 1, 1e9 do t[i] = string.rep('y', 1000) .. i end end)",
    "many_values": "return 1, 2, 3, 4, 5, 6, 7",
    "wait_count": "report(select('#', wait(1)))",
    "yield": "coroutine.yield(1, 2, 3)",
    "running": "report(tostring(coroutine.running() == nil) .. ' '"
               " .. tostring(coroutine.isyieldable()))",
    "resume_self": "report(tostring(select(2, coroutine.resume(coroutine.running()))))",
    # Pauses of a handler that runs on the dispatcher's own coroutine: that coroutine
    # becomes its task, and the handler runs in a worker from then on.
    "wait_then_report": "wait(1) report('woke ' .. t)",
    "wait_odd_ticks": "if t % 2 == 1 then wait(1) end report('t' .. t)",
    "waits_in_a_row": "for i = 1, 3 do wait(1) end report('done ' .. t)",
    "error_after_wait": "wait(1) error('late')",
    "trip_after_wait": "wait(1) while true do end",
    "running_after_wait": "wait(1) report(tostring(coroutine.running() == nil) .. ' ' .. "
                          "tostring(select(2, coroutine.resume(coroutine.running()))))",
    "yield_forged": "report(select('#', coroutine.yield(4, 99, 1, 'point', {})))",
    "yield_in_pcall": "report(tostring(pcall(coroutine.yield, 4, 1)))",
    "wait_in_xpcall": "report(tostring(xpcall(wait, debug and debug.traceback or print, 2)))",
    "wait_in_coroutine": "local f = coroutine.wrap(function() wait(1) return 'in' end) "
                         "report(tostring(pcall(f)))",
    # A pause that cannot yield (inside a call from C) fails as it always did, on the
    # dispatcher's coroutine too, and the next call runs there as before.
    "wait_in_gsub": "report(tostring(pcall(string.gsub, 'ab', '%w', function(c) wait(1) end)))"
                    " report('after ' .. t)",
    "yield_in_sort": "local ok, e = pcall(table.sort, {3, 1, 2}, function(a, b) "
                     "coroutine.yield() return a < b end) report(tostring(ok) .. ' ' .. e)",
    "wait_in_gsub_uncaught": "string.gsub('ab', '%w', function(c) wait(1) end)",
    "pcall_wait_in_gsub": "report((string.gsub('a', '%w', function(c) "
                          "return select(2, pcall(wait, 1)) end)))",
}

def play(handler: str, worker_resume: bool, monkeypatch: Any) -> list[Any]:
    start = Sandbox.start

    def starting(self: Sandbox, *args: Any, **options: Any) -> Any:
        if not worker_resume:
            options.pop("worker_resume", None)
        return start(self, *args, **options)

    monkeypatch.setattr(Sandbox, "start", starting)
    game = Game(seed=5, budget=Budget(steps=200_000, wall_s=5.0, alloc_bytes="2MB",
                                      max_memory="24MB"))
    try:
        game.load_mod("m", f"on('tick', function(t) {HANDLERS[handler]} end)")
        seen = []
        for _ in range(6):
            r = game.tick()
            seen.append((r.calls, [(f.handler, f.where, f.error.kind, str(f.error))
                                   for f in r.failures], r.reports, r.quarantined))
        m = game.mod("m")
        seen.append((m.stats.calls, m.stats.steps, m.stats.errors, m.stats.trips))
        return seen
    finally:
        game.close()
        monkeypatch.setattr(Sandbox, "start", start)


@pytest.mark.parametrize("handler", sorted(HANDLERS))
def test_workers_resume_as_the_mods_resume_did(handler, monkeypatch):
    ours, before = play(handler, True, monkeypatch), play(handler, False, monkeypatch)
    assert ours[:-1] == before[:-1]
    # The same calls, errors and trips; the steps the engine library's own code took to
    # reach the handler (a worker's switch and back) are fewer or the same, but for a
    # few more where the dispatcher's coroutine turns into a task at a handler's first
    # pause and that handler's every call then pauses (a sort's comparator that yields).
    (calls, steps, errors, trips), (calls0, steps0, errors0, trips0) = ours[-1], before[-1]
    assert (calls, errors, trips) == (calls0, errors0, trips0)
    assert steps <= steps0 + 8


def test_no_mod_reaches_the_workers_resume(make_game):
    # What a mod can see: its globals, its libraries and its chunk's arguments; none of
    # them is a function of the prelude's that is not the mod's coroutine library.
    game = make_game()
    game.load_mod("m", """
local found = {}
local n = select('#', ...)
for i = 1, n do found[#found + 1] = 'arg ' .. type((select(i, ...))) end
local known = {}
for k, v in pairs(coroutine) do known[v] = true end
for k, v in pairs(_G) do
  if type(v) == 'table' then
    for k2, v2 in pairs(v) do
      if type(v2) == 'function' and tostring(k2):find('resume') and not known[v2]
         and k2 ~= 'resume_point' then
        found[#found + 1] = k .. '.' .. k2
      end
    end
  elseif type(v) == 'function' and tostring(k):find('resume') and k ~= 'resume_point' then
    found[#found + 1] = k
  end
end
report('found: ' .. table.concat(found, ','))
""")
    report = game.tick()
    assert ("m", "found: ") in report.reports


def test_a_mod_chunk_is_never_given_the_resume():
    with Sandbox() as sb:
        run = sb.start("return select('#', ...), ...")
        assert run.resume("x").values == (1, "x")
