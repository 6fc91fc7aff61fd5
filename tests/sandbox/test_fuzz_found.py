"""Failures ``moonbox fuzz`` found, each kept as a named attack with its exact expected outcome.

Each attack runs in a child process with a timeout (a hang must fail the test, not stall
the suite). Attacks that still succeed are marked ``xfail(strict=True)`` with the bug they
show, as in ``test_attacks.py``: the mark comes off with the fix.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHUNK = "@mods/attacker/main.lua"
TIMEOUT_S = 60.0
"""Far above the budgets below: a child still running then has hung."""

_CHILD = """
import json, sys
import moonbox
from moonbox.bindings import Registry
budget = moonbox.Budget(**json.loads(sys.argv[1]))
# As the fuzzer makes its sandboxes: through a registry, with the default bindings.
sb = Registry(moonbox.default_bindings()).mod("fuzz").sandbox(budget, jit=sys.argv[2] == "1")
results = []
for source in json.loads(sys.stdin.read()):
    out = sb.run(source, sys.argv[3], max_resumes=1)
    alive = sb.run("return 'alive'").value
    results.append({"status": out.status, "budget": out.budget, "alive": alive})
print(json.dumps(results))
"""

# Found by the fuzzer (fixed): with jit=False the count hook fires every 1000 VM
# instructions and deferred to the next firing when it landed in the prelude's own code; a
# loop whose period aliased the count landed there every time, so neither budget tripped.
# The hook now polls at the first instruction back in mod code.


def run_child(jit: bool, sources: list[str], budget: dict) -> list[dict] | None:
    """The outcomes of the attacks, run one after another in one sandbox of a child process,
    or None if the child was still running at the timeout. A dead child (a crash of the
    host) fails the test."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(budget), "1" if jit else "0", CHUNK],
            input=json.dumps(sources), capture_output=True, text=True, timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None
    assert proc.returncode == 0, f"the host process died (exit {proc.returncode}): {proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


BUDGETS = {
    "steps": {"steps": 100_000, "wall_s": 0.2},
    "time": {"steps": 10**15, "wall_s": 0.02},
}

modes = pytest.mark.parametrize("jit", [True, False], ids=["jit", "hook"])

# Whether the hook lands in the prelude every time depends on the loop's instruction count
# (padded by `a = a + 1`) and on the phase where the loop starts (padding before it); on this
# build 2, 7 and 32 additions alias, each at some phases. The grid holds them all, so the
# attack does not depend on the instructions the host runs before the chunk.
HOOK_ALIASING_LOOPS = [
    "local a = 0 " + "a = a + 1 " * phase
    + "local f = function() end while true do pcall(f) " + "a = a + 1 " * pad + "end"
    for phase in range(24)
    for pad in (2, 7, 32)
]


@modes
@pytest.mark.parametrize("budget", sorted(BUDGETS))
def test_loops_whose_period_aliases_the_count_hook_still_trip(jit, budget):
    outs = run_child(jit, HOOK_ALIASING_LOOPS, BUDGETS[budget])
    assert outs is not None, "a run hung: neither budget tripped"
    assert outs == [{"status": "budget", "budget": budget, "alive": "alive"}] * len(outs)


# As the fuzzer found it (seed 0, example 193, --no-jit): _G with stacked metatables, then an
# endless loop of pcall calls. Whether it hangs depends on the phase (the instructions the
# host runs before the chunk): the grid above is the systematic check.
FUZZ_0_193 = (
    'pcall(setmetatable, "", {__index = function() s = "x" for i = 1, 38 do s = s .. s end\n'
    'hoard = string.format("%g", string.rep("x", 0/0)) end})\n'
    'setmetatable(_G, {__index = function(t, k)  return unpack({1, 2, 3}, 1e9, 2^30) end, __newindex = function(t, k, v) pcall(function() x = string.format("%p %p", {}, print) end)\n'
    'pcall(function() x = collectgarbage("stop") end)\n'
    'hoard = setmetatable({}, {__index = "\\1726\\228\\161\\009E\\240\\182\\129\\161!`\\243\\129\\191\\175\\171\\234", __call = 2}) end})\n'
    'setmetatable(_G, {__index = function(t, k)  return 0 end, __newindex = function(t, k, v)  end})\n'
    'pcall(function() x = getfenv or setfenv or newproxy or gcinfo or module end)\n'
    'setmetatable(_G, {__index = function(t, k) local c = coroutine.create(function() pcall(coroutine.yield, (function() local t = {} for i = 1, 5 do t = {t, t} end return t end)()) end) coroutine.resume(c) coroutine.resume(c)\n'
    'pcall(function() t = 42 end)\n'
    'setmetatable(_G, {__index = function(t, k) do ::c0:: do t = 42 end goto c0 end\n'
    'error("\\1726\\228\\161\\009E\\240\\182\\129\\161!`\\243\\129\\191\\175\\171\\234", 2)\n'
    'pcall(function() x = tostring(print) .. tostring({}) .. tostring(report) end) return getmetatable([[]]) end, __newindex = function(t, k, v)  end}) return 0x7fffffff end, __newindex = function(t, k, v)  end})\n'
    'for i = 1, 1/0 do for j = 1, 2 do do pcall(function() local c = coroutine.running() x = c and coroutine.resume(c) end)\n'
    'local _ = 42\n'
    'do x = getmetatable end end ::c1:: end end\n'
)


@modes
def test_fuzz_seed_0_example_193_trips_the_steps_budget(jit):
    outs = run_child(jit, [FUZZ_0_193], BUDGETS["steps"])
    assert outs is not None, "the run hung: neither budget tripped"
    assert outs == [{"status": "budget", "budget": "steps", "alive": "alive"}]
