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
    budget = Budget(max_memory="32MB", alloc_bytes="32MB", wall_s=60)
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
    with Sandbox(Budget(max_memory="8MB", alloc_bytes="64MB", wall_s=60)) as sb:
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
        sb = Sandbox(Budget(max_memory="32MB", alloc_bytes="32MB", wall_s=60))
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


def test_a_runtime_without_lupas_limited_allocator_is_left_alone():
    # Without max_memory the runtime has LuaJIT's own allocator, whose state is no count
    # of lupa's: installing over it would free LuaJIT's blocks with the C library.
    from lupa import luajit21

    rt = luajit21.LuaRuntime(encoding=None)
    assert not _runtime._install_heap(rt)
    assert not uses_compiled_heap(rt)
    assert rt.execute("local t = {} for i = 1, 1e4 do t[i] = {i} end return #t") == 10000


# Pages of one size class are reused only once empty: this keeps one string in every page
# of a class, lets the rest go, and moves on to the next class, 24 times. Without a bound
# the heap would map about a cap's worth of pages per class.
FRAGMENTING = """
local sizes = {16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
               320, 384, 448, 512, 640, 768, 896, 1024}
local keep = {}
for _, size in ipairs(sizes) do
  local t = {}
  for i = 1, math.floor(3e6 / size) do t[i] = string.rep("a", size - 32) .. i end
  for i = 1, #t, math.floor(65000 / size) do keep[#keep + 1] = t[i] end
  t = nil
  for _ = 1, 200000 do local _ = {} end
end
return #keep
"""


@needs_heap
def test_the_heap_maps_no_more_than_its_cap_however_fragmented():
    from moonbox.sandbox import _heap

    gc.collect()
    before = _heap.segments()
    budget = Budget(max_memory="16MB", alloc_bytes="16MB", steps=1 << 40, wall_s=120)
    with Sandbox(budget) as sb:
        assert uses_compiled_heap(sb._rt)
        out = sb.run(FRAGMENTING, "=fragment")
        # Its peak (10-16 MiB) depends on where the collector's cycles fall, which moves
        # with anything else the runtime allocates: it may fit or meet the cap, and either
        # way the heap has mapped segments up to it.
        assert out.status == "done" or out.error.budget == "memory", out
        # 16 MiB of cap, lupa's own base and the host's headroom: whole segments of 1 MiB.
        cap = (16 << 20) + _runtime.HOST_HEADROOM_BYTES + (1 << 20)
        assert (_heap.segments() - before) << 20 <= cap + (2 << 20)


@needs_heap
def test_many_runtimes_at_once_closed_in_any_order_give_their_heaps_back():
    from moonbox.sandbox import _heap

    gc.collect()
    before = _heap.segments()
    boxes, chunks = [], []
    for i in range(40):
        sb = Sandbox(Budget(max_memory="24MB", alloc_bytes="24MB", wall_s=60))
        n = 1000 + 997 * i
        assert sb.run(f"G = {{}} for i = 1, {n} do G[i] = {{i, tostring(i)}} end "
                      "return #G").values == (n,)
        if i % 3 == 0:
            chunks.append(sb.load("return #G"))  # a chunk that outlives its sandbox's close
        boxes.append(sb)
    order = list(range(len(boxes)))
    order = order[1::2] + order[::-2]
    for i in order:
        if i % 2:
            boxes[i].close()
    del boxes, sb
    gc.collect()
    assert _heap.segments() > before  # the chunks hold their runtimes
    del chunks
    gc.collect()
    assert _heap.segments() == before


def _run_python(code: str, **env: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_without_the_module_runtimes_keep_lupas_allocator_and_the_cap():
    code = ("import sys\n"
            "sys.modules['moonbox.sandbox._heap'] = None  # as where it was not built\n"
            "from moonbox import Budget, Sandbox\n"
            "from moonbox.sandbox._runtime import compiled_heap, uses_compiled_heap\n"
            "with Sandbox(Budget(max_memory='8MB', alloc_bytes='64MB', wall_s=60)) as sb:\n"
            "    out = sb.run('local t = {} while true do t[#t + 1] = {} end')\n"
            "    print(compiled_heap(), uses_compiled_heap(sb._rt), out.error.budget)\n")
    assert _run_python(code).split() == ["False", "False", "memory"]


@needs_heap
def test_an_isolated_worker_under_its_address_space_limit_trips_cleanly():
    # The worker's heap maps segments as it grows: under a tight address-space limit a mod
    # that fills its cap trips on memory, and the worker goes on.
    code = ("from moonbox import Budget\n"
            "from moonbox.isolation import IsolatedSandbox\n"
            "budget = Budget(max_memory='96MB', alloc_bytes='96MB', wall_s=120)\n"
            "with IsolatedSandbox(budget, memory_limit_bytes=768 << 20) as sb:\n"
            "    for src in ['local t = {} while true do t[#t + 1] = {} end',\n"
            "                'local t = {} for i = 1, 1e9 do t[i] = (\"x\"):rep(i % 900) .. i end']:\n"
            "        out = sb.run(src)\n"
            "        print(out.status, out.error.budget)\n"
            "    print(sb.run('local t = {} for i = 1, 1e5 do t[i] = {i} end return #t').values)\n")
    assert _run_python(code).split() == ["budget", "memory", "budget", "memory", "(100000,)"]


def test_a_stale_build_of_the_module_leaves_lupas_allocator(monkeypatch):
    # A build older than its source (install() of another arity) must not stop every
    # sandbox from opening: the runtime keeps lupa's allocator.
    def old_install(library, thread):
        raise AssertionError("never called with two arguments")

    monkeypatch.setattr(_runtime, "_heap", (old_install, lambda library, thread: False))
    with Sandbox() as sb:
        assert sb.run("return #{1, 2, 3}").values == (3,)


@pytest.mark.parametrize("jit", [True, False], ids=["jit", "hook"])
def test_a_heap_left_full_of_garbage_still_loads_and_runs_the_next_chunk(jit: bool) -> None:
    # LuaJIT collects nothing when an allocation fails: the garbage a run leaves (here a
    # table of ~28 MiB of strings, dropped as the run ends) must not make the next load, or
    # the run it starts, trip on memory.
    budget = Budget(steps=10**12, wall_s=30, max_memory=32 << 20, alloc_bytes=32 << 20)
    with Sandbox(budget, jit=jit) as sb:
        out = sb.run("local t = {} for i = 1, 28 * 1024 do t[i] = string.rep('x', 1000) .. i "
                     "end return #t", "=garbage")
        assert out.status == "done" and out.value == 28 * 1024
        assert sb.memory_used_bytes > 24 << 20  # still there: nothing collected it yet
        again = sb.run("local s = string.rep('y', 6 * 2^20) return #s", "=next")
        assert again.status == "done", again.error
        assert sb.run("return 'alive'").value == "alive"
