"""The repair context: the whole script, refusals, returns, earlier attempts, fresh start."""

from __future__ import annotations

from moonbox.agent import CheckResult, Failure, render_repair
from moonbox.world import CommandResult


def test_a_long_script_shows_an_outline_and_a_window_around_the_failing_line():
    lines = [f"local v{n} = {n}" for n in range(1, 301)]
    lines[9] = "local function helper()"
    lines[249] = "error('boom')"
    code = "\n".join(lines)
    failure = Failure("runtime", "boom", chunk="@m/main.lua", line=250)
    text = render_repair(1, 4, code, failure)
    assert ">> 250 | error('boom')" in text
    assert "   210 | local v210 = 210" in text and "   290 | local v290 = 290" in text
    assert " 10 | local function helper()" in text  # in the outline
    assert "local v100 = 100" not in text  # outside the window, not an outline line
    assert "outline of all 300 lines" in text and "lines 291 to 300 not shown" in text


def test_a_short_script_is_shown_whole():
    code = "\n".join(f"x = {n}" for n in range(1, 151))
    text = render_repair(1, 4, code, Failure("runtime", "e", chunk="@m/main.lua", line=150))
    assert ">> 150 | x = 150" in text and "outline" not in text


def test_refusals_values_and_earlier_attempts_are_shown():
    refused = (CommandResult(3, "m", "spawn", "refused", "unknown_prefab",
                             "no prefab named 'dragon'"),)
    failure = Failure.refusals(refused, reports=("spawning",), values=(1, "x"))
    earlier = [Failure("syntax", "unexpected symbol", chunk="@m/main.lua", line=2)]
    text = render_repair(2, 4, "return 1", failure, earlier=earlier)
    assert "World commands refused" in text
    assert "spawn [unknown_prefab] no prefab named 'dragon'" in text
    assert "What the script returned: [1, 'x']" in text and "  spawning" in text
    assert "Earlier attempts:\n  1. syntax at m/main.lua:2: unexpected symbol" in text
    assert "start afresh" not in text


def test_a_failed_check_shows_its_message_and_what_the_script_returned():
    failure = Failure("check", "acceptance check failed: total: want 3",
                      checks=(CheckResult("total", False, "want 3"),), values=(2,))
    text = render_repair(1, 4, "return 2", failure)
    assert "  - total: want 3" in text and "What the script returned: [2]" in text


def test_after_two_failed_repairs_a_fresh_start_is_offered():
    failure = Failure("runtime", "e")
    assert "start afresh" not in render_repair(2, 4, "x()", failure)
    assert "start afresh" in render_repair(3, 4, "x()", failure)
