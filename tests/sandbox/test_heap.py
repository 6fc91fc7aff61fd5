"""The compiled allocator of sandbox runtimes (moonbox/sandbox/_heap.c): lupa's accounting
and heap cap kept exactly, every kind of block freed, and the heap gone with its runtime."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest

from moonbox import Budget, Sandbox
from moonbox.sandbox import _runtime
from moonbox.sandbox._runtime import HEAP_ENV, compiled_heap, uses_compiled_heap

needs_heap = pytest.mark.skipif(not compiled_heap(), reason="the compiled allocator is not built")

# Blocks of every size class and beyond (strings of 0..3000 bytes, tables whose parts grow
# past the largest class), grown, shrunk and dropped in an order fixed by a generator:
# what the allocator sees covers every path (new, in place, moved, shrunk, foreign).
CHURN = """
local seed = 99
local function rand(n) seed = (seed * 16807) % 2147483647 return seed % n end
local live, sum = {}, 0
for round = 1, 4000 do
  local slot = rand(300) + 1
  local kind = rand(4)
  if kind == 0 then
    live[slot] = string.rep("x", rand(3000)) .. round
  elseif kind == 1 then
    local t = {}
    for i = 1, rand(400) do t[i] = i end
    live[slot] = t
  elseif kind == 2 then
    local t = live[slot]
    if type(t) == "table" then
      for i = #t, 1, -1 do t[i] = nil end
      for k = 1, rand(50) do t["k" .. k] = k end
    end
  else
    live[slot] = nil
  end
end
for slot, v in pairs(live) do
  if type(v) == "string" then sum = sum + #v
  else for _, x in pairs(v) do sum = sum + x end end
end
return sum
"""


def _with_lupas_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runtime, "_heap", None)


@needs_heap
def test_a_sandbox_runtime_allocates_through_the_compiled_heap():
    with Sandbox() as sb:
        assert uses_compiled_heap(sb._rt)
        assert sb.run("local t = {} for i = 1, 1000 do t[i] = {i} end return #t").values == (1000,)


@needs_heap
def test_every_kind_of_block_gives_the_same_result_and_count_as_lupas_allocator(monkeypatch):
    budget = Budget(max_memory="32MB", alloc_bytes="32MB")
    with Sandbox(budget, seed=1) as fast:
        assert uses_compiled_heap(fast._rt)
        value = fast.run(CHURN, "=churn").unwrap()
        fast._rt.gccollect()
        fast_used = fast._rt.get_memory_used(True)
    _with_lupas_allocator(monkeypatch)
    with Sandbox(budget, seed=1) as plain:
        assert not uses_compiled_heap(plain._rt)
        assert plain.run(CHURN, "=churn").unwrap() == value
        plain._rt.gccollect()
        plain_used = plain._rt.get_memory_used(True)
    # The same bytes are counted either way (the allocator keeps lupa's accounting); what
    # differs is what the runtime itself keeps (hash seeds change string table layouts).
    assert abs(fast_used - plain_used) < 16 << 10


@needs_heap
@pytest.mark.parametrize("src", [
    "local t = {} while true do t[#t + 1] = {} end",
    "local t, s = {}, 'x' while true do s = s .. s t[#t + 1] = s end",
    "local t = {} for i = 1, 1e9 do t[i] = i end",
], ids=["small-tables", "doubling-strings", "growing-array"])
def test_the_heap_cap_trips_as_with_lupas_allocator(src):
    with Sandbox(Budget(max_memory="8MB", alloc_bytes="64MB")) as sb:
        assert uses_compiled_heap(sb._rt)
        out = sb.run(src, "=grow")
        assert out.status == "budget" and out.error.budget == "memory"
        assert sb._rt.get_memory_used(True) <= (8 << 20) + _runtime.HOST_HEADROOM_BYTES
        # The runtime goes on after the trip.
        assert sb.run("return 1 + 1").values == (2,)


@needs_heap
def test_the_heap_is_gone_with_its_runtime():
    from moonbox.sandbox import _heap

    gc.collect()
    before = _heap.segments()
    for _ in range(20):
        sb = Sandbox(Budget(max_memory="32MB", alloc_bytes="32MB"))
        sb.run("local t = {} for i = 1, 2e5 do t[i] = {i} end return #t").unwrap()
        assert _heap.segments() > before
        sb.close()
    gc.collect()
    assert _heap.segments() == before


def test_lupas_allocator_is_kept_when_the_environment_says_so():
    code = ("from moonbox import Sandbox\n"
            "from moonbox.sandbox._runtime import compiled_heap, uses_compiled_heap\n"
            "with Sandbox() as sb:\n"
            "    assert sb.run('return #{1, 2, 3}').values == (3,)\n"
            "    print(compiled_heap(), uses_compiled_heap(sb._rt))\n")
    env = {**os.environ, HEAP_ENV: "lupa"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.split() == ["False", "False"]
