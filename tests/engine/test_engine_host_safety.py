"""What one mod can make the engine hold or do: bounded error values, and no way for a
caller to get another mod quarantined. In process and isolated alike."""

from __future__ import annotations

import pytest

from moonbox.engine import ModLimits
from moonbox.engine._protocol import MAX_MESSAGE_CHARS
from moonbox.isolation import WorkerPool


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(2, memory_limit_bytes=512 << 20) as pool:
        yield pool


@pytest.fixture(params=["in_process", "isolated"])
def game_of(request, make_game, pool):
    def make(**options):
        if request.param == "isolated":
            options.update(isolation="process", pool=pool, wall_margin_s=1.0)
        return make_game(**options)

    return make


# -- error values cross as bounded strings -----------------------------------------------

# Found by an attack review: a handler's error value crossed as data and was printed whole.
# 31 handlers raising a 95k-entry table, alternating with handlers that succeed (so the mod
# is never quarantined), made each tick report hold 488M characters.
def test_a_table_raised_as_an_error_is_never_copied_to_the_host(game_of):
    game = game_of()
    game.load_mod("raiser", """
      local big = {}
      for i = 1, 95000 do big[i] = i end
      for i = 1, 31 do
        on("tick", function() error(big) end)
        on("tick", function() end)  -- one that succeeds: the mod is never quarantined
      end
    """)
    for _ in range(3):
        report = game.tick()
        assert len(report.failures) == 31
        assert {f.error.message for f in report.failures} == {"(error object is a table value)"}
        assert sum(len(str(f)) for f in report.failures) < 31 * 1000


@pytest.mark.parametrize("value", ["string.rep('x', 1e6)", "setmetatable({}, {__tostring = "
                                   "function() return string.rep('y', 1e6) end})",
                                   "function() end", "coroutine.create(print)"])
def test_every_error_value_crosses_bounded(game_of, value):
    game = game_of()
    game.load_mod("raiser", f'on("tick", function() error({value}) end)')
    (failure,) = game.tick().failures
    assert len(failure.error.message) <= MAX_MESSAGE_CHARS + 3
    assert "y" * 100 not in failure.error.message  # no __tostring ran for the host


# -- a caller's arguments count against the caller -----------------------------------------

EXPORTER = 'export("inc", function(x) return x.n + 1 end)'


# Found by an attack review: five bad calls inside pcall got the exporter quarantined at
# tick 2, in process and isolated, while the caller went untouched.
def test_bad_calls_of_an_export_count_against_the_caller(game_of):
    game = game_of(limits=ModLimits(max_failures=5))
    game.load_mod("exporter", EXPORTER)
    game.load_mod("good", """
      on("tick", function() report(import("exporter", "inc")({n = 1})) end)
    """)
    game.load_mod("caller", """
      on("tick", function()
        for i = 1, 5 do pcall(import("exporter", "inc"), "not a table") end
      end)
    """)
    report = game.tick()
    blamed = [f for f in report.failures if f.mod == "exporter"]
    assert len(blamed) == 5 and {f.caller for f in blamed} == {"caller"}
    assert "called by mod 'caller'" in str(blamed[0])
    assert game.mod("exporter").quarantine is None
    assert game.mod("caller").quarantine is not None
    for _ in range(3):  # the exporter serves its other callers on
        report = game.tick()
        assert ("good", "2") in report.reports
    assert game.mod("exporter").quarantine is None
    assert game.mod("exporter").stats.errors == 5  # where it happened, for the operator


def test_trips_in_an_export_count_against_the_caller(game_of):
    from moonbox import Budget

    game = game_of(limits=ModLimits(max_trips=2),
                   budget=Budget(steps=100_000, wall_s=5))
    game.load_mod("exporter", 'export("spin", function(n) for i = 1, n do end end)')
    game.load_mod("caller", """
      on("tick", function()
        for i = 1, 2 do pcall(import("exporter", "spin"), 1e12) end
      end)
    """)
    game.tick()
    assert game.mod("exporter").quarantine is None
    assert game.mod("caller").quarantine is not None
    assert game.mod("caller").quarantine.kind == "trips"


def test_an_exporters_own_failures_still_count_against_it(game_of):
    game = game_of(limits=ModLimits(max_failures=2))
    game.load_mod("broken", 'on("tick", function() error("mine") end)')
    for _ in range(2):
        game.tick()
    assert game.mod("broken").quarantine is not None


# -- what one operation keeps long ----------------------------------------------------------

def _blocking_registry(seconds: float):
    import threading

    from pydantic import BaseModel

    from moonbox import Binding, Registry, default_bindings

    class _NoArgs(BaseModel):
        pass

    release = threading.Event()

    def hold(call, args):
        release.wait(seconds)
        return ()

    registry = Registry([*default_bindings(), Binding("hold", _NoArgs, hold, risk="read")])
    return registry, release


def test_a_handler_that_ends_late_every_tick_is_quarantined(make_game):
    # Found by an attack review: every tick stalled ~3 s with no failure, no trip and no
    # quarantine recorded, forever. Late ends are time trips now, counted as any other.
    from moonbox import Budget
    from moonbox.sandbox import STALL_MARGIN_S

    registry, _ = _blocking_registry(STALL_MARGIN_S + 0.3)
    game = make_game(registry=registry, budget=Budget(wall_s=0.05),
                     limits=ModLimits(max_trips=2))
    game.load_mod("slow", 'on("tick", function() hold() end)')
    game.load_mod("fine", 'on("tick", function() report("ok") end)')
    for _ in range(2):
        report = game.tick()
        assert [(f.mod, f.error.budget) for f in report.failures] == [("slow", "time")]
        assert ("fine", "ok") in report.reports
    assert game.mod("slow").quarantine is not None
    assert game.mod("slow").quarantine.kind == "trips"
    assert game.tick().failures == []  # no more stalls


def test_with_a_watchdog_a_stuck_handler_costs_one_margin_and_its_runtime(make_game):
    import time

    from moonbox import Budget

    registry, release = _blocking_registry(60)
    game = make_game(registry=registry, budget=Budget(wall_s=0.05), watchdog=True)
    try:
        game.load_mod("stuck", 'on("tick", function() hold() end)')
        game.load_mod("fine", 'on("tick", function() report("ok") end)')
        started = time.perf_counter()
        report = game.tick()
        assert time.perf_counter() - started < 30  # not the binding's 60 s
        assert [(f.mod, f.error.budget) for f in report.failures] == [("stuck", "time")]
        assert ("fine", "ok") in report.reports
        report = game.tick()
        quarantine = game.mod("stuck").quarantine
        assert quarantine is not None and quarantine.kind == "runtime"
        assert "abandoned" in quarantine.reason
        assert ("fine", "ok") in report.reports
    finally:
        release.set()


def test_the_watchdog_is_an_option_of_in_process_games(make_game, pool):
    from moonbox import ConfigError

    with pytest.raises(ConfigError):
        make_game(isolation="process", pool=pool, watchdog=True)


# -- report caps are per call, and drops are counted ---------------------------------------

# Found by an attack review: the caps counted over a dispatcher's whole life, so after a
# mod's 1,000th line every later line was dropped silently and the mod acted unlogged.
def test_report_caps_are_per_call_and_drops_are_counted(game_of):
    from moonbox import Budget
    from moonbox.sandbox._run import MAX_REPORTS, REPORTS_DROPPED

    # 1,500 host calls a tick, each a round trip when isolated: time for a loaded machine.
    game = game_of(budget=Budget(wall_s=30))
    game.load_mod("chatty", """
      local n = 0
      on("tick", function()
        n = n + 1
        for i = 1, 1500 do report("tick " .. n .. " line " .. i) end
      end)
    """)
    for tick in range(1, 4):
        report = game.tick()
        lines = [line for mod, line in report.reports if mod == "chatty"]
        assert len(lines) == MAX_REPORTS + 1 and lines[-1] == REPORTS_DROPPED
        assert lines[0] == f"tick {tick} line 1"  # every call is logged anew
        assert report.reports_dropped == {"chatty": 500}


def test_a_quiet_tick_drops_nothing(game_of):
    game = game_of()
    game.load_mod("quiet", 'on("tick", function() report("one line") end)')
    for _ in range(1200):
        assert game.tick().reports_dropped == {}
