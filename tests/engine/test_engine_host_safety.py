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
