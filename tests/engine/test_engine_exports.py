"""Exports cross by copy; cross-mod calls are bounded and attributed."""

from __future__ import annotations

from moonbox.engine import ModLimits


def lines(reports, mod=None):
    """The report lines of some tick reports (of one mod)."""
    return [line for r in reports for m, line in r.reports if mod is None or m == mod]


def test_exported_data_cannot_share_mutable_state(game):
    game.load_mod("owner", """
        local config = {size = 3, list = {1, 2}}
        export("config", config)
        config.size = 100 -- after the export: the export is a copy
        on("tick", function(t) report("owner sees " .. config.size) end)
    """)
    game.load_mod("user", """
        on("tick", function(t)
          local a = import("owner", "config")
          local b = import("owner", "config")
          a.size = 42
          a.list[1] = "changed"
          report(b.size .. " " .. b.list[1] .. " " .. tostring(a ~= b))
        end)
    """)
    out = lines([game.tick()])
    assert out == ["owner sees 100", "3 1 true"]


def test_exported_functions_are_called_with_copies(game):
    game.load_mod("scores", """
        local total = 0
        export("add", function(arg)
          total = total + arg.points
          arg.points = -1 -- the caller never sees this
          return {total = total, echo = arg}
        end)
    """)
    game.load_mod("player", """
        local add = import("scores", "add")
        on("tick", function(t)
          local arg = {points = 5}
          local r = add(arg)
          report(r.total .. " " .. arg.points .. " " .. r.echo.points)
        end)
    """)
    assert lines(game.run(2)) == ["5 5 -1", "10 5 -1"]


def test_export_errors_are_the_exporters_failures(game):
    game.load_mod("lib", """
        export("boom", function() error("inside lib") end)
        export("data", 1)
        export("waits", function() wait(1) end)
    """)
    game.load_mod("app", """
        on("tick", function()
          local ok, err = pcall(import("lib", "boom"))
          report(err)
          report(select(2, pcall(import("lib", "waits"))))
          report(select(2, pcall(import, "lib", "missing")))
          report(select(2, pcall(import, "ghost", "x")))
          report(tostring(import("lib", "data")))
        end)
    """)
    report = game.tick()
    out = lines([report])
    assert "lib.boom failed: inside lib [export_failed]" in out[0]
    assert "lib.waits failed: an exported function cannot wait [export_failed]" in out[1]
    assert "unknown_export" in out[2] and "unknown_mod" in out[3] and out[4] == "1"
    blamed = {(f.mod, f.handler) for f in report.failures}
    assert blamed == {("lib", "export 'boom'"), ("lib", "export 'waits'")}
    assert game.mod("app").stats.errors == 0


def test_call_chains_are_bounded_and_not_reentrant(make_game):
    game = make_game(limits=ModLimits(max_call_depth=3))
    game.load_mod("a", """
        export("ping", function(n) return import("b", "ping")(n + 1) end)
        on("tick", function()
          report(select(2, pcall(import("b", "ping"), 1)))
          report(select(2, pcall(import("b", "back"), 1)))
        end)
    """)
    game.load_mod("b", """
        export("ping", function(n) return import("c", "ping")(n + 1) end)
        export("back", function(n) return import("a", "ping")(n) end)
    """)
    game.load_mod("c", 'export("ping", function(n) return import("d", "ping")(n + 1) end)')
    game.load_mod("d", 'export("ping", function(n) return n end)')
    out = lines([game.tick()], "a")
    assert "call_depth" in out[0]
    assert "reentrant" in out[1]


def test_values_crossing_mods_have_bounded_depth(make_game):
    game = make_game(limits=ModLimits(max_export_depth=3))
    game.load_mod("lib", """
        report(select(2, pcall(export, "deep", {{{{1}}}})))
        export("ok", {{{1}}})
        export("echo", function(x) return x end)
    """)
    game.load_mod("app", """
        on("tick", function()
          report(select(2, pcall(import("lib", "echo"), {{{{1}}}})))
          report(tostring(import("lib", "ok")[1][1][1]))
        end)
    """)
    out = lines([game.tick()], "app")
    assert "nests deeper than 3" in out[0] and out[1] == "1"


def test_export_calls_borrow_the_callers_time(make_game):
    from moonbox import Budget

    # No step budget a CPU can reach: the loop below stops on time alone, however fast.
    game = make_game(budget=Budget(steps=1 << 52, wall_s=0.3, max_memory="16MB",
                                   alloc_bytes="4MB"))
    game.load_mod("slow", 'export("spin", function() while true do end end)')
    game.load_mod("app", """
        on("tick", function()
          local ok, err = pcall(import("slow", "spin"))
          report(err)
        end)
    """)
    report = game.tick()
    # The callee ran on the caller's remaining time: both stop on the caller's deadline.
    errors = {f.mod: f.error for f in report.failures}
    assert {mod: e.budget for mod, e in errors.items()} == {"slow": "time", "app": "time"}
    # A fresh budget would have given the callee the whole 0.3 s; it had what was left.
    assert errors["slow"].limit < errors["app"].limit == 0.3
