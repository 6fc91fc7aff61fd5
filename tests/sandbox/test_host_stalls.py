"""Host-side work a mod's data can make superlinear: tables whose number keys share one
hash chain (LuaJIT's number hash is not seeded, DESIGN.md §2 fact 12).

A mod computes, with ``bit.*``, doubles whose hashes agree in their low 17 bits: every key
of a table of up to 2^17 slots then lands in one chain. Inserting them is the mod's own
(metered) work. Walking such a table with ``next(t, k)`` or from the host with
``lua_next`` re-finds each key along the chain: quadratic, outside any budget. Every walk
the host makes now goes by slot index (linear).

LuaJIT's chain walks happen inside one C call, where no counter of ours can see them, so
these tests compare the host's time for a colliding table with its time for a plain table
of the same size, in the same run: a linear copy is within a small factor, a quadratic one
is ~100x at these sizes.
"""

from __future__ import annotations

import time

import pytest

from moonbox import Budget, Sandbox, ValueLimits

# Keys whose number hash agrees in the low 17 bits: one chain in any table of <= 2^17 slots.
COLLIDING_KEYS = r"""
local function colliding_keys(count)
  local band, bor, bxor, rol, lshift = bit.band, bit.bor, bit.bxor, bit.rol, bit.lshift
  local MASK, TARGET, HI = 0x1FFFF, 0x1234, 0x40F00001
  local hi = lshift(HI, 1)
  local c0 = band(rol(hi, 19), MASK)
  local keys, n, top = {}, 0, 0
  while n < count do
    local high = lshift(top, 17)
    for low4 = 0, 15 do
      local r = band(rol(bor(high, low4), 13), MASK)
      local low = band(bxor(band(TARGET + r, MASK), c0), MASK)
      if band(low, 15) == low4 then
        local lo = bxor(bit.tobit(bor(high, low) + rol(hi, 14)), hi)
        if lo < 0 then lo = lo + 4294967296 end
        local d = (1 + (band(HI, 0xFFFFF) * 4294967296 + lo) / 2^52) * 65536
        keys[n + 1], keys[n + 2] = d, -d  -- the sign bit is not hashed
        n = n + 2
        break
      end
    end
    top = top + 1
  end
  return keys
end
"""

N = 8192
COPIES = 40
BUDGET = Budget(steps=1 << 50, wall_s=600, max_memory="256MB", alloc_bytes="256MB")
LIMITS = ValueLimits(max_items=10**7)


def _table(colliding: bool) -> str:
    keys = f"colliding_keys({N})" if colliding else (
        f"(function() local k = {{}} for i = 1, {N} do k[i] = i + 0.5 end return k end)()")
    return COLLIDING_KEYS + f"""
    local keys = {keys}
    local t = {{}}
    for i = 1, {N} do t[keys[i]] = i end
    """


def _host_time(source: str) -> float:
    """Seconds the host spent on a run beyond the run's own resumes."""
    with Sandbox(BUDGET, value_limits=LIMITS) as sb:
        started = time.perf_counter()
        out = sb.run(source, "=attack")
        elapsed = time.perf_counter() - started
    assert out.status == "done", out.error
    return elapsed - out.stats.wall_s


def _ratio(tail: str) -> float:
    plain = min(_host_time(_table(False) + tail) for _ in range(2))
    colliding = min(_host_time(_table(True) + tail) for _ in range(2))
    return colliding / max(plain, 1e-4)


def test_the_generator_really_makes_one_chain():
    # Inserting colliding keys costs the mod quadratic time: the keys do collide.
    def build(colliding: bool) -> int:
        with Sandbox(BUDGET) as sb:
            return sb.run(_table(colliding) + "return 1", "=build").stats.wall_s

    assert min(build(True) for _ in range(2)) > 20 * min(build(False) for _ in range(2))


def test_returning_a_colliding_table_costs_the_host_linear_work():
    ret = "return " + ", ".join(["t"] * COPIES)
    assert _ratio(ret) < 10


def test_yielding_a_colliding_table_costs_the_host_linear_work():
    assert _ratio("coroutine.yield(" + ", ".join(["t"] * COPIES) + ") return 1") < 10


def test_a_colliding_table_as_a_binding_argument_is_checked_in_linear_work():
    # The strict check of a binding's table argument, called as the dispatcher calls it,
    # on a table built in the sandbox's runtime.
    with Sandbox(BUDGET, value_limits=LIMITS) as sb:
        def check_time(colliding: bool) -> float:
            table = sb._rt.execute(_table(colliding) + "return t")
            sb._loosen()
            started = time.perf_counter()
            for _ in range(COPIES):
                assert sb._h_check_argument(table) is None
            return time.perf_counter() - started

        plain = min(check_time(False) for _ in range(2))
        colliding = min(check_time(True) for _ in range(2))
    assert colliding < 10 * max(plain, 1e-4)


# -- a large source is refused before it reaches the VM -----------------------------------

# Found by an attack review: a 40-70 MB source (even one that is only a comment, below the
# 64 MB heap cap) made LuaJIT run out of memory in an unprotected call; the process exited.
def test_a_huge_source_is_refused_and_the_host_lives():
    import subprocess
    import sys

    code = (
        "from moonbox import Sandbox, SourceTooLarge\n"
        "sb = Sandbox()\n"
        "for size in (40 << 20, 70 << 20):\n"
        "    out = sb.run('--' + 'x' * size, '@big.lua')\n"
        "    assert isinstance(out.error, SourceTooLarge), out\n"
        "    assert out.error.code == 'source_too_large' and out.error.size_bytes == size + 2\n"
        "    assert out.error.kind == 'syntax'\n"
        "assert sb.run('return 1').value == 1\n"
        "print('alive')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "alive", done.stderr[-2000:]


def test_the_limit_is_documented_and_exact():
    from moonbox import SourceTooLarge
    from moonbox._errors import MAX_SOURCE_BYTES

    with Sandbox() as sb:
        at = "--" + "x" * (MAX_SOURCE_BYTES - 2)
        assert sb.run(at, "@at.lua").status == "done"
        over = sb.run(at + "x", "@over.lua")
        assert isinstance(over.error, SourceTooLarge)
        assert over.error.limit_bytes == MAX_SOURCE_BYTES
        assert "source_too_large" in str(over.error) and over.error.chunk == "@over.lua"
        # Counted in UTF-8 bytes, not characters.
        wide = sb.run("--" + "é" * (MAX_SOURCE_BYTES // 2), "@wide.lua")
        assert isinstance(wide.error, SourceTooLarge)


def test_a_source_that_does_not_fit_the_heap_cap_is_a_memory_trip():
    with Sandbox(Budget(max_memory="1MB")) as sb:
        # Room to compile a large comment; once compiled it is gone.
        assert sb.run("return 1 --" + "x" * (3 << 20), "@comment.lua").value == 1
        out = sb.run("local t = {" + "1," * 300_000 + "} return #t", "@table.lua")
        assert out.status == "budget" and out.error.budget == "memory"
        assert sb.run("return 'alive'").value == "alive"


def test_an_isolated_sandbox_refuses_a_huge_source_without_sending_it():
    from moonbox import SourceTooLarge
    from moonbox.isolation import IsolatedSandbox

    with IsolatedSandbox(Budget(wall_s=0.5)) as sb:
        pid = sb.pid
        out = sb.run("--" + "x" * (50 << 20), "@big.lua")
        assert isinstance(out.error, SourceTooLarge) and out.status == "error"
        with pytest.raises(SourceTooLarge):
            sb.load("--" + "x" * (50 << 20), "@big.lua")
        assert sb.run("return 'alive'").values == ("alive",) and sb.pid == pid


# -- what one operation keeps long: counted after the fact, or not waited for --------------

class _Blocking:
    """A host function that blocks until released: one operation the meter cannot stop."""

    cost = 1

    def __init__(self, name: str, seconds: float | None = None) -> None:
        import threading

        self.name = name
        self.release = threading.Event()
        self.seconds = seconds
        self.returned = threading.Event()

    def __call__(self, call, args):
        self.release.wait(self.seconds if self.seconds is not None else 60)
        self.returned.set()
        return ()


def test_a_resume_that_ends_past_its_budget_and_margin_is_a_time_trip():
    # Found by an attack review: a sort of long strings ran 3 s under a 1 s budget, status
    # ok, every tick, forever. What ends late now counts as a time trip, after the fact.
    from moonbox.sandbox import STALL_MARGIN_S

    slow = _Blocking("slow", seconds=STALL_MARGIN_S + 0.5)
    with Sandbox(Budget(wall_s=0.05), host_functions=[slow]) as sb:
        # A tail call: no instruction of the mod runs after it, so the alarm (which trips
        # at the next one in mod code) cannot stop it, and it is judged after the fact.
        out = sb.run("return slow()", "@late.lua")
        assert out.status == "budget" and out.error.budget == "time"
        assert "after the fact" in out.error.message and out.error.chunk == "@late.lua"
        assert out.values == ()
        assert sb.run("return 'alive'").value == "alive"  # nothing was abandoned
        # Within the margin, nothing changes: an ordinary resume stands.
        quick = _Blocking("quick", seconds=0.0)
    with Sandbox(Budget(wall_s=0.05), host_functions=[quick]) as sb:
        assert sb.run("quick() return 'finished'").value == "finished"


@pytest.mark.parametrize("jit", [True, False], ids=["jit", "hook"])
def test_the_alarm_trips_at_the_first_instruction_after_a_late_host_call(jit):
    # The alarm (moonbox/sandbox/_alarm.py) arms the hook while the host call blocks: the
    # first instruction back in mod code trips on time, with its line, before the return.
    # The call blocks far past the budget so that a loaded machine, which may run the
    # alarm's thread late, still arms the hook before the call returns.
    from moonbox.sandbox import STALL_MARGIN_S

    slow = _Blocking("slow", seconds=STALL_MARGIN_S + 2.0)
    with Sandbox(Budget(wall_s=0.05), host_functions=[slow], jit=jit) as sb:
        out = sb.run("slow()\nreturn 'finished'", "@late.lua")
        assert out.status == "budget" and out.error.budget == "time"
        assert "after the fact" not in out.error.message
        assert (out.error.chunk, out.error.line) == ("@late.lua", 2)
        assert sb.run("return 'alive'").value == "alive"


def test_a_late_yield_ends_the_run():
    from moonbox.sandbox import STALL_MARGIN_S

    slow = _Blocking("slow", seconds=STALL_MARGIN_S + 0.5)
    with Sandbox(Budget(wall_s=0.05), host_functions=[slow]) as sb:
        run = sb.start("slow() coroutine.yield(1) return 2", "@late.lua")
        out = run.resume()
        assert out.status == "budget" and run.finished


def test_the_watchdog_stops_waiting_for_a_stuck_operation():
    stuck = _Blocking("stuck")
    report_after = []
    with Sandbox(Budget(wall_s=0.1), host_functions=[stuck], watchdog=True) as sb:
        started = time.perf_counter()
        out = sb.run("stuck() report('after') return 'finished'", "@stuck.lua")
        waited = time.perf_counter() - started
        assert out.status == "budget" and out.error.budget == "time"
        assert "abandoned" in out.error.message
        assert sb.abandoned
        with pytest.raises(Exception, match="abandoned"):
            sb.run("return 1")
        stuck.release.set()  # the operation returns: the stuck runtime finds the host gone
        assert stuck.returned.wait(10)
        report_after.append(out.reports)
    assert waited < 30  # the host stopped waiting (the operation would have taken 60 s)
    assert report_after == [()]


def test_a_stuck_runtime_that_comes_back_reaches_nothing_of_the_host():
    import threading

    stuck = _Blocking("stuck")
    calls = []

    class _Spy:
        name = "spy"
        cost = 1

        def __call__(self, call, args):
            calls.append(threading.get_ident())
            return ()

    with Sandbox(Budget(wall_s=0.1), host_functions=[stuck, _Spy()], watchdog=True) as sb:
        out = sb.run("stuck() for i = 1, 100 do pcall(spy) end", "@stuck.lua")
        assert out.status == "budget" and sb.abandoned
        stuck.release.set()
        assert stuck.returned.wait(10)
        time.sleep(0.2)  # the runtime's code after the operation runs on, and ends
    assert calls == []


def test_the_watchdog_stops_waiting_for_a_sort_of_long_strings():
    # The attack itself: 4,096 references to one 1 MiB string, sorted natively (each
    # comparison a full memcmp): seconds inside one library call.
    source = """
    local s = string.rep('x', 1048576)
    local t = {}
    for i = 1, 4096 do t[i] = s end
    table.sort(t)
    return 'sorted'
    """
    with Sandbox(Budget(wall_s=0.2, max_memory="64MB"), watchdog=True) as sb:
        out = sb.run(source, "@sort.lua")
        assert out.status == "budget" and out.error.budget == "time" and sb.abandoned


def test_resumes_under_a_watchdog_behave_as_without():
    from moonbox.sandbox import Watchdog

    shared = Watchdog()
    with Sandbox(watchdog=shared) as a, Sandbox(watchdog=shared) as b:
        assert a.run("return 1 + 1").value == 2
        run = b.start("local n = 0 while true do n = n + 1 coroutine.yield(n) end")
        assert [run.resume().values for _ in range(3)] == [(1,), (2,), (3,)]
        assert a.run("while true do end").budget == "steps"
        out = a.run("error('boom')", "@e.lua")
        assert out.status == "error" and out.error.line == 1
    assert shared.stalls == 0


# -- report caps are per resume --------------------------------------------------------------

@pytest.mark.parametrize("isolated", [False, True])
def test_report_caps_are_per_resume_and_a_drop_is_said(isolated):
    from moonbox import default_bindings
    from moonbox.isolation import IsolatedSandbox
    from moonbox.sandbox._run import MAX_REPORTS, REPORTS_DROPPED

    make = IsolatedSandbox if isolated else Sandbox
    # 1,500 host calls a resume (round trips when isolated): time for a loaded machine.
    with make(Budget(wall_s=30), host_functions=default_bindings()) as sb:
        run = sb.start("local n = 0 while true do n = n + 1 "
                       "for i = 1, 1500 do report(n .. ':' .. i) end coroutine.yield() end")
        for n in range(1, 4):
            out = run.resume()
            assert len(out.reports) == MAX_REPORTS + 1 and out.reports[-1] == REPORTS_DROPPED
            assert out.reports[0] == f"{n}:1"
            assert run.reports_dropped_now == 500 and run.reports_dropped == 500 * n
        whole = sb.run("for i = 1, 3 do report(i) coroutine.yield() end")
        assert whole.reports == ("1", "2", "3")


# -- a host function sees its deadline and a cancellation flag --------------------------------

def test_a_slow_host_function_can_stop_at_the_callers_deadline():
    # Found by an audit: a 1.0 s Python binding under a 0.1 s wall budget ran its full
    # second before the trip. A binding that checks call.cancelled stops on time.
    seen = {}

    class _Cooperative:
        name = "work"
        cost = 1

        def __call__(self, call, args):
            seen["left"] = call.time_left_s()
            rounds = 0
            while not call.cancelled and rounds < 1000:
                time.sleep(0.005)
                rounds += 1
            seen["rounds"] = rounds
            return ()

    with Sandbox(Budget(wall_s=0.1), host_functions=[_Cooperative()]) as sb:
        started = time.perf_counter()
        out = sb.run("work() local n = 0 for i = 1, 100 do n = n + i end return n", "@slow.lua")
        elapsed = time.perf_counter() - started
    assert 0 < seen["left"] <= 0.1
    assert seen["rounds"] < 1000  # it saw the flag, long before its own bound of 5 s
    assert out.status == "budget" and out.error.budget == "time"
    assert elapsed < 5


def test_outside_a_resume_a_call_is_not_cancelled():
    from moonbox.sandbox import HostCall

    with Sandbox() as sb:
        assert HostCall(sb, None, "x").cancelled is False
    assert HostCall(None, None, "x").cancelled is True


# -- what LuaJIT's parser would do superlinearly is refused before it runs ----------------------

def test_number_literals_that_share_a_hash_bucket_are_refused_before_the_parser():
    from moonbox.sandbox._parser_limits import MAX_NUMBERS_PER_BUCKET

    with Sandbox(BUDGET) as sb:
        keys = sb._rt.execute(COLLIDING_KEYS + "local k = colliding_keys(2048) "
                              "for i = 1, #k do k[i] = string.format('%.17g', k[i]) end "
                              "return table.concat(k, ' ')").decode().split()
    source = "local x\n" + "".join(f"x = {k}\n" for k in keys) + "return x\n"
    with Sandbox() as sb:
        out = sb.run(source, "@numbers.lua")
        assert out.status == "error" and out.error.kind == "syntax"
        assert "share one hash bucket" in out.error.message
        assert out.error.line > MAX_NUMBERS_PER_BUCKET  # where the bucket overflowed
        # The same count of ordinary literals, and one literal many times, load.
        plain = "local x\n" + "".join(f"x = {i + 0.5}\n" for i in range(2048)) + "return x\n"
        assert sb.run(plain).value == 2047.5
        assert sb.run("local x " + "x = 1.5 " * 5000 + "return x").value == 1.5


def test_more_gotos_than_the_limit_are_refused_before_the_parser():
    from moonbox.sandbox._parser_limits import MAX_GOTOS

    def gotos(n: int) -> str:
        return "local i = 0\n::top::\ni = i + 1\nif i > 3 then return i end\n" + \
            "if i > 0 then goto top end\n" * n

    with Sandbox() as sb:
        assert sb.run(gotos(1000)).value == 4  # many gotos still load
        out = sb.run(gotos(MAX_GOTOS + 1), "@gotos.lua")
        assert out.error.kind == "syntax" and f"more than {MAX_GOTOS} gotos" in out.error.message


@pytest.mark.parametrize("source", ['x = "' + "a" * 100_000, "x = [" + "=" * 100_000])
def test_a_syntax_error_quoting_a_long_token_is_bounded(source):
    from moonbox.sandbox._runtime import MAX_MESSAGE_BYTES

    with Sandbox() as sb:
        out = sb.run(source, "@long.lua")
    assert out.error.kind == "syntax" and len(out.error.message) <= MAX_MESSAGE_BYTES + 3
