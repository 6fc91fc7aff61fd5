"""The sandbox API: running, resuming, budgets per resume, preemption, errors, results."""

from __future__ import annotations

import time

import pytest

from moonbox import (
    Budget,
    BudgetExceeded,
    ConfigError,
    Outcome,
    Sandbox,
    SandboxClosed,
    ScriptError,
)

BIG = Budget(steps=10**12, wall_s=30)


def test_hello_returns_values_reports_and_stats(make_sandbox):
    sb = make_sandbox()
    out = sb.run('report("hi") return add(1, 2), {1, 2, {x = "y"}}', "@examples/hello.lua")
    assert out.status == "done" and out.ok
    assert out.values == (3, [1, 2, {"x": "y"}])
    assert out.value == [3, [1, 2, {"x": "y"}]]
    assert out.reports == ("hi",)
    assert out.stats.steps >= 1 and out.stats.memory_peak_bytes > 0 and out.stats.wall_s > 0


def test_single_value_and_no_value(make_sandbox):
    sb = make_sandbox()
    assert sb.run("return 7").value == 7
    assert sb.run("local x = 1").value is None
    assert sb.run("return nil, 2").values == (None, 2)


def test_strings_cross_as_text(make_sandbox):
    sb = make_sandbox()
    assert sb.run('return "héllo"').value == "héllo"
    assert sb.run('return "\\255ok"').value == "\ufffdok"


def test_chunk_receives_arguments(make_sandbox):
    sb = make_sandbox()
    assert sb.run("local a, b = ... return a + b.n", args=(2, {"n": 3})).value == 5


def test_runtime_error_names_chunk_line_and_frames(make_sandbox):
    sb = make_sandbox()
    src = "local function inner()\n  error('boom')\nend\nlocal function outer() inner() end\nouter()\n"
    out = sb.run(src, "@mods/waves/main.lua")
    assert out.status == "error"
    err = out.error
    assert isinstance(err, ScriptError) and err.kind == "runtime"
    assert (err.chunk, err.line, err.message) == ("@mods/waves/main.lua", 2, "boom")
    assert str(err) == "mods/waves/main.lua:2: boom"
    assert [f.line for f in err.traceback] == [2, 4, 5]
    assert err.traceback[0].function == "inner"
    assert err.traceback[-1].function == "main chunk"
    assert err.to_dict()["traceback"][0] == {
        "chunk": "@mods/waves/main.lua",
        "line": 2,
        "function": "inner",
    }


def test_error_without_position_uses_the_top_frame(make_sandbox):
    out = make_sandbox().run("\n\nerror('plain', 0)", "@e.lua")
    assert (out.error.message, out.error.line) == ("plain", 3)


def test_non_string_error_objects_are_described_not_called(make_sandbox):
    out = make_sandbox().run("error({code = 1})", "@e.lua")
    assert out.error.message == "(error object is a table value)"


def test_syntax_error_is_structured(make_sandbox):
    sb = make_sandbox()
    out = sb.run("local x = 1\nlocal = 2\n", "@bad.lua")
    assert out.status == "error" and out.error.kind == "syntax"
    assert out.error.line == 2 and out.error.chunk == "@bad.lua"
    with pytest.raises(ScriptError) as info:
        sb.load("x = = 1", "@bad.lua")
    assert info.value.kind == "syntax"


def test_chunk_names_must_be_file_or_label(make_sandbox):
    sb = make_sandbox()
    with pytest.raises(ConfigError):
        sb.load("return 1", "hello.lua")
    with pytest.raises(ConfigError):
        sb.load("return 1", "=[moonbox prelude]")


def test_line_numbers_survive_instrumentation(make_sandbox):
    src = "local n = 0\nfor i = 1, 3 do\n  n = n + i\nend\nwhile n > 0 do n = n - 1 end\nerror('at five')\n"
    assert make_sandbox().run(src, "@l.lua").error.line == 6


# -- budgets -------------------------------------------------------------------------------


def test_steps_count_loop_iterations_exactly_when_instrumented():
    with Sandbox(BIG) as sb:
        out = sb.run("local n = 0 for i = 1, 1000 do n = n + 1 end return n")
        assert out.value == 1000
        assert 1000 <= out.stats.steps <= 1002


def test_steps_budget_trips_with_kind_limit_and_used(make_sandbox):
    sb = make_sandbox(Budget(steps=5000))
    out = sb.run("local n = 0\nwhile true do\n  n = n + 1\nend", "@loop.lua")
    assert out.status == "budget" and out.budget == "steps"
    err = out.error
    assert isinstance(err, BudgetExceeded)
    assert err.kind == "budget" and err.limit == 5000 and err.used > 5000
    assert err.chunk == "@loop.lua" and err.line in (2, 3)
    assert "steps budget exceeded" in str(err)


def test_time_budget_trips_within_the_wall_budget_plus_margin(make_sandbox):
    sb = make_sandbox(Budget(steps=10**15, wall_s=0.2))
    t0 = time.perf_counter()
    out = sb.run("while true do end", "@t.lua")
    elapsed = time.perf_counter() - t0
    assert out.budget == "time"
    assert out.error.limit == 0.2 and out.error.used >= 0.2
    assert elapsed < 0.2 + 1.0  # generous: shared machines


def test_alloc_budget_per_resume_trips_as_memory(make_sandbox):
    sb = make_sandbox(Budget(alloc_bytes=2 << 20, max_memory=32 << 20))
    out = sb.run("local t = {} for i = 1, 1e7 do t[i] = {} end", "@m.lua")
    assert out.budget == "memory"
    assert out.error.limit == 2 << 20
    assert sb.run("return 1").value == 1


def test_heap_cap_trips_as_memory_and_host_survives(make_sandbox):
    sb = make_sandbox(Budget(max_memory=8 << 20))
    out = sb.run("local s = 'x' while true do s = s .. s end", "@bomb.lua")
    assert out.budget == "memory" and out.error.limit == 8 << 20
    assert sb.run("return 'alive'").value == "alive"


def test_heap_kept_full_by_globals_replaces_the_runtime(make_sandbox):
    sb = make_sandbox(Budget(max_memory=8 << 20, wall_s=30))  # a slow machine trips memory too
    out = sb.run("hoard = {} while true do hoard[#hoard + 1] = tostring(#hoard) end")
    assert out.budget == "memory"
    assert sb.replacements == 1
    assert sb.run("return hoard").value is None  # a fresh runtime
    assert sb.run("return 2").value == 2


def test_a_trip_is_final_for_the_run(make_sandbox):
    sb = make_sandbox(Budget(steps=1000))
    run = sb.start("while true do end")
    assert run.resume().status == "budget"
    assert run.finished
    with pytest.raises(SandboxClosed):
        run.resume()


# -- runs, yields, preemption ----------------------------------------------------------------


def test_each_resume_gets_a_fresh_budget(make_sandbox):
    # Each tick spends ~6,000 steps of a 10,000 budget; five ticks would need 30,000.
    sb = make_sandbox(Budget(steps=10_000))
    src = """
    local total = 0
    for tick = 1, 5 do
      for i = 1, 6000 do total = total + 1 end
      coroutine.yield(tick)
    end
    return total
    """
    run = sb.start(src, "@ticks.lua")
    seen = []
    while True:
        out = run.resume()
        if out.status != "yielded":
            break
        seen.append(out.value)
    assert seen == [1, 2, 3, 4, 5]
    assert out.status == "done" and out.value == 30_000
    assert run.resumes == 6 and run.stats.steps >= 30_000


def test_values_pass_both_ways_through_yield(make_sandbox):
    sb = make_sandbox()
    run = sb.start("local x = coroutine.yield('ready') return x * 2")
    assert run.resume().values == ("ready",)
    assert run.resume(21).values == (42,)
    assert run.finished


@pytest.mark.parametrize("budget", [
    Budget(),                                            # a fixed heap limit
    Budget(alloc_bytes="1MB", max_memory="32MB"),        # a per-resume growth allowance
], ids=["fixed", "growth"])
def test_every_kind_of_resume_keeps_the_same_accounts(make_sandbox, budget):
    # Steady resumes (scalar arguments, no budget given) and the others (tables, a budget
    # given) take different paths in the host: the mod sees the same, the counts add up.
    sb = make_sandbox(budget)
    src = """
    local got = {}
    local a, b = ...
    got[#got + 1] = a + b
    while true do
      local x, y, z = coroutine.yield(#got, got[#got])
      if x == "stop" then return got end
      got[#got + 1] = type(x) == "table" and x.n or (x + (y or 0) + (z and 1 or 0))
      if x == 99 then local big = string.rep("x", 4 * 1024 * 1024) got.big = big end
    end
    """
    run = sb.start(src, "@accounts.lua")
    outs = [run.resume(1, 2), run.resume(3, 4, True), run.resume({"n": 7}),
            run.resume(5, budget=budget), run.resume(2**53, None, False), run.resume(6)]
    assert [o.values for o in outs] == [(1, 3), (2, 8), (3, 7), (4, 5), (5, 2**53), (6, 6)]
    assert all(o.status == "yielded" and o.stats.steps >= 0 for o in outs)
    assert run.resumes == 6
    assert run.stats.steps == sum(o.stats.steps for o in outs)
    assert run.stats.memory_peak_bytes == max(o.stats.memory_peak_bytes for o in outs)
    tripped = run.resume(99)  # 4 MB in one resume: past a 1 MB allowance, within the cap
    if budget.alloc_bytes < budget.max_memory:
        assert tripped.status == "budget" and tripped.budget == "memory"
    else:
        assert tripped.status == "yielded"
        assert run.resume("stop").status == "done"


class _Costly:
    """A host function that charges far more steps than the meter's cell can hold."""

    name = "costly"

    def __init__(self, cost):
        self.cost = cost

    def __call__(self, call, args):
        return ()


@pytest.mark.parametrize("jit", [True, False])
def test_charges_past_the_cells_range_are_accounted_exactly(jit):
    with Sandbox(Budget(steps=10**13), jit=jit, host_functions=[_Costly(2**40)]) as sb:
        ok = sb.run("for i = 1, 5 do costly() end")
        assert ok.status == "done"
        assert 5 * 2**40 <= ok.stats.steps < 5 * 2**40 + 10_000
        over = sb.run("for i = 1, 10 do costly() end")
        assert over.budget == "steps"
        assert over.error.used >= 10**13
    with Sandbox(jit=jit, host_functions=[_Costly(-5)]) as sb:
        assert sb.run("for i = 1, 3 do costly() end").stats.steps < 100  # charges nothing


# -- the alarm's poll, forced: what the alarm thread does a grace period past a deadline,
# done by a host function at a chosen point (the thread stays away: the wall budget is long)

class _Alarm:
    """``alarm()``: as the alarm thread (moonbox/sandbox/_alarm.py), raises the poll flag
    of the running resume; ``due``: moves the meter's deadline into the past first;
    ``stale``: the flag alone, as for a resume that ended; ``off``: nothing. With
    ``hook_after``, it then arms the runtime's hook to fire after that many VM
    instructions (the thread arms it for the next one, at any point of the resume)."""

    name, cost = "alarm", 1

    def __init__(self, mode: str, hook_after: int | None = None) -> None:
        self.mode = mode
        self.hook_after = hook_after
        self.sandbox: Sandbox | None = None
        self.calls = 0

    def __call__(self, call, args):
        import ctypes

        from moonbox.sandbox._alarm import _LUA_MASKCOUNT, POLL_NOW, _hook_api

        sb = self.sandbox
        self.calls += 1
        if self.mode == "due":
            sb._h_extend(-3600.0)
        if self.mode != "off":
            ctypes.c_int32.from_address(sb._alarm_state[2]).value = POLL_NOW
        if self.hook_after is not None:
            sethook, hookf = _hook_api()
            sethook(sb._alarm_state[1], hookf, _LUA_MASKCOUNT, self.hook_after)
        return ()


def _alarmed(source: str, mode: str, steps: int, jit: bool = True, cost: int = 2**40,
             hook_after: int | None = None) -> tuple[Outcome, int]:
    """The outcome of ``source`` in a fresh sandbox, and how often it called ``alarm``."""
    alarm = _Alarm(mode, hook_after)
    with Sandbox(Budget(steps=steps, wall_s=30), jit=jit,
                 host_functions=[alarm, _Costly(cost)]) as sb:
        alarm.sandbox = sb
        out = sb.run(source, "@alarmed.lua")
        assert sb.run("return 'alive'").value == "alive"
    return out, alarm.calls


@pytest.mark.parametrize("jit", [True, False], ids=["jit", "hook"])
def test_a_poll_the_alarm_asked_for_trips_on_time_when_a_charge_ends_the_steps(jit):
    # The poll flag is up and the deadline has passed when a charge runs the steps out:
    # both ran out at that poll, and the time first (the alarm sounds a grace period past
    # the deadline). It was a steps trip. No check runs between the two calls.
    out, calls = _alarmed("alarm() costly()", "due", 1_000, jit)
    assert calls == 1
    assert out.status == "budget" and out.budget == "time", out
    assert out.error.limit == 30
    # The flag up without a passed deadline: the charge trips the steps.
    out, _ = _alarmed("alarm() costly()", "stale", 1_000, jit)
    assert out.budget == "steps" and out.error.used > 2**40, out


def test_a_poll_the_alarm_asked_for_trips_on_time_at_the_check_that_ends_the_steps():
    # The same at a check: the step budget is exactly what the chunk spends up to the
    # alarm, so the loop's first check both runs the steps out and answers the flag.
    source = "alarm()\nwhile true do end"
    steps = next(n for n in range(1, 100) if _alarmed(source, "off", n)[1])
    out, _ = _alarmed(source, "off", steps)
    assert out.budget == "steps" and out.error.used == steps + 1, out
    out, _ = _alarmed(source, "stale", steps)
    assert out.budget == "steps" and out.error.used == steps + 1, out
    out, _ = _alarmed(source, "due", steps)
    assert out.budget == "time" and out.error.line == 2, out


@pytest.mark.parametrize("jit", [True, False], ids=["jit", "hook"])
def test_the_alarms_hook_landing_anywhere_in_the_meter_trips_on_time_with_exact_steps(jit):
    # The alarm's hook fires at whatever instruction the resume is at, the meter's own
    # accounting included. Landing between the two halves of an account, it emptied the
    # window a second time: a window of steps counted twice (or lost), enough to pass the
    # step budget and report a steps trip where the time had run out. Every landing point
    # after the alarm, up to the charge's poll, by the hook's count.
    source = "local x = 0 for i = 1, 1000 do x = x + i end alarm() costly() return x"
    cost = 5_000
    plain, _ = _alarmed(source, "off", 10**6, jit, cost)
    assert plain.status == "done"
    total = plain.stats.steps  # the steps up to the alarm, and the charge
    kinds, figures = set(), set()
    for hook_after in range(1, 120):
        out, _ = _alarmed(source, "due", total + 100, jit, cost, hook_after)
        kinds.add((out.status, out.budget, out.error.line))
        figures.add(out.stats.steps)
    assert kinds == {("budget", "time", 1)}
    if jit:  # it trips before the charge, or at the charge's poll
        assert figures <= {total - cost, total}, figures
    else:  # the count hook counts by periods
        from moonbox.sandbox._runtime import HOOK_STEPS

        assert all(total - cost <= f <= total + HOOK_STEPS for f in figures), figures


@pytest.mark.parametrize("jit", [True, False], ids=["jit", "hook"])
def test_a_stale_alarm_costs_a_poll_and_no_step(jit):
    # The flag up with the deadline still ahead (an alarm for a resume that ended): the
    # resume polls once more and carries on, its steps those of an unalarmed one.
    source = """
    local x = 0
    for i = 1, 1000 do x = x + i end
    alarm()
    for i = 1, 1000 do x = x + i end
    return x
    """
    plain, _ = _alarmed(source, "off", 10**6, jit)
    stale, calls = _alarmed(source, "stale", 10**6, jit)
    assert calls == 1 and plain.status == stale.status == "done"
    if jit:
        assert stale.stats.steps == plain.stats.steps
    else:
        # The count hook counts by periods: the one that finds the flag charges nothing
        # and starts its count again (the alarm's own arming restarts it anyway).
        from moonbox.sandbox._runtime import HOOK_STEPS

        assert plain.stats.steps - HOOK_STEPS <= stale.stats.steps <= plain.stats.steps


def test_finish_resumes_until_done_and_sums(make_sandbox):
    sb = make_sandbox()
    run = sb.start("for i = 1, 3 do report(i) coroutine.yield() end return 'end'")
    out = run.finish()
    assert out.status == "done" and out.value == "end"
    assert out.reports == ("1", "2", "3")


def test_finish_gives_up_on_endless_yields(make_sandbox):
    sb = make_sandbox()
    out = sb.run("while true do coroutine.yield() end", max_resumes=10)
    assert out.status == "error" and "10 resumes" in out.error.message


def test_total_steps_caps_a_run_across_resumes(make_sandbox):
    sb = make_sandbox(Budget(steps=10_000, total_steps=25_000))
    out = sb.run("while true do for i = 1, 5000 do end coroutine.yield() end")
    assert out.budget == "steps" and out.error.limit == 25_000


def test_preemption_spreads_a_computation_over_resumes():
    with Sandbox(Budget(steps=10_000), preempt=True) as sb:
        run = sb.start("local s = 0 for i = 1, 100000 do s = s + i end return s")
        statuses = []
        while not run.finished:
            statuses.append(run.resume().status)
        assert statuses[-1] == "done"
        assert statuses.count("preempted") >= 9
        assert run.stats.steps >= 100_000


def test_preemption_is_not_visible_to_the_mod():
    with Sandbox(Budget(steps=1000), preempt=True) as sb:
        src = "local got = {} for i = 1, 5000 do got[#got + 1] = i end return #got"
        out = sb.run(src)
        assert out.status == "done" and out.value == 5000


def test_preemption_still_trips_the_hard_cap():
    with Sandbox(Budget(steps=1000, total_steps=50_000), preempt=True) as sb:
        out = sb.run("while true do end")
        assert out.budget == "steps" and out.error.limit == 50_000


def test_preemption_on_time():
    with Sandbox(Budget(steps=10**15, wall_s=0.05, total_steps=10**15), preempt=True) as sb:
        # A loop that cannot finish: the first slice ends on time, however fast the CPU.
        run = sb.start("local n = 0 while true do n = n + 1 end")
        out = run.resume()
        assert out.status == "preempted" and not run.finished


def test_preemption_cannot_yield_from_a_mods_own_coroutine():
    with Sandbox(Budget(steps=1000), preempt=True) as sb:
        out = sb.run(
            "local co = coroutine.create(function() while true do end end) "
            "return coroutine.resume(co)"
        )
        assert out.budget == "steps"


def test_preemption_needs_instrumentation():
    with pytest.raises(ConfigError):
        Sandbox(preempt=True, jit=False)


def test_closed_sandbox_refuses_work():
    sb = Sandbox()
    run = sb.start("coroutine.yield() return 1")
    sb.close()
    sb.close()
    with pytest.raises(SandboxClosed):
        sb.run("return 1")
    with pytest.raises(SandboxClosed):
        run.resume()


def test_chunk_from_a_replaced_runtime_is_refused(make_sandbox):
    sb = make_sandbox()
    chunk = sb.load("return 1", "=c")
    sb.reset()
    with pytest.raises(SandboxClosed):
        sb.start(chunk)


def test_chunks_can_be_reused(make_sandbox):
    sb = make_sandbox()
    chunk = sb.load("n = (n or 0) + 1 return n", "=counter")
    assert [sb.run(chunk).value for _ in range(3)] == [1, 2, 3]


# -- reports -----------------------------------------------------------------------------------


def test_reports_are_capped_in_count_and_size(make_sandbox):
    sb = make_sandbox()
    run = sb.start("for i = 1, 1500 do report(i) end report(string.rep('x', 10000))")
    out = run.finish()
    # 1,000 lines kept, then one that says the rest were dropped (and counted).
    assert len(out.reports) == 1001 and run.reports_dropped == 501
    assert out.reports[-1].startswith("[moonbox: the report limit")
    out = sb.run("report(string.rep('y', 10000))")
    assert len(out.reports[0]) == 4096 and out.reports[0].endswith("...")


def test_print_writes_to_reports(make_sandbox):
    out = make_sandbox().run("print('a', 1, nil, true)")
    assert out.reports == ("a\t1\tnil\ttrue",)


def test_report_renders_plain_values(make_sandbox):
    out = make_sandbox().run("report({1, 2}) report(3.5) report(nil)")
    assert out.reports == ("{1, 2}", "3.5", "nil")


# -- the JIT and isolation -------------------------------------------------------------------


def test_jit_mode_keeps_the_jit_on_and_hook_mode_turns_it_off():
    with Sandbox() as on, Sandbox(jit=False) as off:
        assert on._rt.eval("jit.status()")[0] is True
        assert off._rt.eval("jit.status()")[0] is False


def test_the_runtime_keeps_no_debug_global_for_the_host_calls_to_look_up():
    # lupa looks up debug.traceback as the error handler of every call from the host: with
    # no `debug` global, each resume skips that work. Host-side errors still arrive.
    with Sandbox() as sb:
        assert sb._rt.globals()[b"debug"] is None
        assert sb.run("return 1").values == (1,)
        with pytest.raises(Exception, match="boom"):
            sb._rt.execute("error('boom')")


def test_sandboxes_share_nothing():
    with Sandbox() as a, Sandbox() as b:
        a.run("shared = 1 string.upper = nil math.pi = 3")
        assert b.run("return shared, string.upper('x'), math.pi > 3.14").values == (None, "X", True)


def test_environment_is_fresh_table_with_self_reference(make_sandbox):
    out = make_sandbox().run("return _G == _G._G, _G.string == string")
    assert out.values == (True, True)


# Run.call: the resume of a host that resumes one run over and over (the engine's tick
# handlers). The same budgets, the same ends; a yield of nothing answers the steps alone.
_CALLED = """
local big = {}
while true do
  local what, n = coroutine.yield()
  if what == 1 then report("line " .. n)
  elseif what == 2 then while true do end
  elseif what == 3 then error("bad " .. n)
  elseif what == 4 then big[#big + 1] = ("x"):rep(n)  -- n bytes more, kept
  end
end
"""


def test_a_call_keeps_the_budgets_and_ends_of_a_resume(make_sandbox):
    sb = make_sandbox(Budget(steps=100_000, alloc_bytes="1MB"))
    run = sb.start(_CALLED)
    assert run.resume().status == "yielded"
    for n in range(1, 200):
        steps = run.call(sb.clock(), 1, n)
        assert type(steps) is int and steps > 0
        assert run.reports == [f"line {n}"]  # this call's alone
    assert run.ended_at >= run.sandbox.clock() - 60
    # Allocations within the allowance never trip, wherever the heap stands; past it, a
    # call trips as a resume does.
    for _ in range(40):
        assert type(run.call(sb.clock(), 4, 300 << 10)) is int
    out = run.call(sb.clock(), 4, 1200 << 10)
    assert out.status == "budget" and out.budget == "memory", out
    run = sb.start(_CALLED)
    run.resume()
    out = run.call(sb.clock(), 3, 7)
    assert out.status == "error" and "bad 7" in out.error.message
    run = sb.start(_CALLED)
    run.resume()
    run.call(sb.clock(), 1, 1)
    out = run.call(sb.clock(), 2)
    assert out.status == "budget" and out.budget == "steps" and out.error.line == 6
    assert run.reports == [] and run.finished


def test_call_reports_are_capped_per_call(make_sandbox):
    from moonbox.sandbox._run import MAX_REPORTS, REPORTS_DROPPED

    sb = make_sandbox(Budget(steps=1_000_000))
    run = sb.start("while true do coroutine.yield() for i = 1, 1500 do report(i) end end")
    run.resume()
    for _ in range(3):
        assert type(run.call(sb.clock())) is int
        assert len(run.reports) == MAX_REPORTS + 1 and run.reports[-1] == REPORTS_DROPPED
        assert run.reports[0] == "1" and run.reports_dropped_now == 500


def test_calls_keep_their_allowance_while_other_runs_move_the_heap(make_sandbox):
    # Between two calls another run may grow or free the heap by any amount: the host reads
    # the heap again then, and the call never stops short of its allowance.
    sb = make_sandbox(Budget(steps=1_000_000, alloc_bytes="1MB", max_memory="256MB"))
    run = sb.start(_CALLED)
    run.resume()
    for i in range(12):
        # 0.4 MB more held at each step, all of it let go at every fourth
        kept = "h1, h2, h3 = nil, nil, nil" if i % 4 == 3 else f"h{i % 4 + 1} = ('y'):rep(400000)"
        out = sb.run(kept)
        assert out.status == "done", out
        for _ in range(3):
            assert type(run.call(sb.clock(), 4, 450 << 10)) is int, i
