"""An isolated sandbox answers like the in-process one, and survives what kills its worker."""

from __future__ import annotations

import os

import psutil
import pytest

import moonbox
from moonbox import Budget, ConfigError, Sandbox, SandboxClosed, ScriptError
from moonbox.bindings import Binding, Hook, Registry, Veto
from moonbox.isolation import IsolatedSandbox, WorkerCrashed

PROGRAMS = [
    "return 1, 'two', {3, x = 4}",
    "report('hello') report('again') return add(2, 3)",
    "local t = {} t.x.y = 1",
    "return add('a', 1)",
    "while true do end",
    "error({code = 7})",
    "return ((",
    "local x = 0 for i = 1, 100 do x = x + i end return x",
]


def _shape(outcome: moonbox.Outcome) -> tuple:
    err = outcome.error
    return (outcome.status, outcome.values, outcome.reports,
            None if err is None else (err.kind, err.message, err.chunk, err.line, err.traceback))


@pytest.mark.parametrize("source", PROGRAMS)
def test_outcomes_match_the_in_process_sandbox(make_isolated, source):
    budget = Budget(steps=100_000)
    isolated = make_isolated(budget, seed=5)
    with Sandbox(budget, host_functions=moonbox.default_bindings(), seed=5) as local:
        expected = local.run(source, "@mods/m/main.lua")
    assert _shape(isolated.run(source, "@mods/m/main.lua")) == _shape(expected)


def test_runs_yield_and_resume_with_fresh_budgets(make_isolated):
    sb = make_isolated()
    run = sb.start("local x = coroutine.yield(1) report('got ' .. x) return x * 2", "=co")
    first = run.resume()
    assert first.status == "yielded" and first.values == (1,)
    last = run.resume(21)
    assert last.status == "done" and last.values == (42,) and last.reports == ("got 21",)
    assert run.finished
    with pytest.raises(SandboxClosed):
        run.resume()
    finished = sb.start("coroutine.yield() coroutine.yield() return 'end'").finish()
    assert finished.values == ("end",)


@pytest.mark.parametrize("source", [
    "local s = string.rep('x', 4000) for i = 1, 1000 do report(s) end",
    "local s = string.rep('x', 4000) for i = 1, 100 do report(s) "
    "if i % 10 == 0 then coroutine.yield() end end",
])
def test_report_caps_match_the_in_process_sandbox(make_isolated, source):
    # A mod that reports a lot gets as many lines kept isolated as in process: the count,
    # the length of each line and the characters in all are capped alike.
    budget = Budget(steps=10_000_000)
    isolated = make_isolated(budget)
    with Sandbox(budget, host_functions=moonbox.default_bindings()) as local:
        expected = local.start(source).finish()
    outcome = isolated.start(source).finish()
    assert outcome.status == expected.status == "done"
    assert outcome.reports == expected.reports
    assert sum(map(len, outcome.reports)) < 300_000
    assert isolated.run(source).reports == expected.reports


def test_a_budget_trip_in_the_worker_keeps_the_worker(make_isolated):
    sb = make_isolated(Budget(steps=1000))
    pid = sb.pid
    outcome = sb.run("while true do end")
    assert outcome.status == "budget" and outcome.budget == "steps"
    assert sb.pid == pid and sb.restores == 0


def test_host_functions_run_in_the_host_and_validate_there():
    host_pid = os.getpid()
    seen: list[int] = []
    registry = Registry()

    class Args(moonbox.bindings.AddArgs):
        pass

    @registry.binding("where", Args, risk="read")
    def where(call, args):
        seen.append(os.getpid())
        return args.a + args.b

    with registry.mod("m") as api, IsolatedSandbox(host_functions=api.host_functions) as sb:
        assert sb.run("return where(1, 2)").values == (3,)
        refused = sb.run("return where('x', 2)")
    registry.close()
    assert seen == [host_pid]
    assert refused.status == "error" and refused.error.message.startswith("where: ")


def test_denials_keep_their_kind():
    registry = Registry(moonbox.default_bindings())
    perms = moonbox.Permissions(rules={"add": "deny"})
    binding = registry.get("add")
    assert isinstance(binding, Binding)
    with registry.mod("m", perms) as api, IsolatedSandbox(host_functions=api.host_functions) as sb:
        outcome = sb.run("return add(1, 2)")
    registry.close()
    assert outcome.status == "error"


def test_syntax_errors_raise_from_load(make_isolated):
    sb = make_isolated()
    with pytest.raises(ScriptError) as info:
        sb.load("return ((", "@mods/m/main.lua")
    assert info.value.kind == "syntax" and info.value.chunk == "@mods/m/main.lua"


def test_bad_options_are_refused():
    with pytest.raises(ConfigError):
        IsolatedSandbox(state_global="not a name")
    with pytest.raises(ConfigError):
        IsolatedSandbox(state_global="end")
    with pytest.raises(ConfigError):
        IsolatedSandbox(wall_margin_s=float("nan"))


# -- what kills a worker ---------------------------------------------------------------


def test_memory_beyond_the_os_limit_is_a_memory_trip(make_isolated):
    sb = make_isolated(memory_limit_bytes=512 << 20)
    limit = psutil.Process(sb.pid).rlimit(psutil.RLIMIT_AS)
    assert limit == (512 << 20, 512 << 20)
    sb.run("state = {n = 1}")
    pid = sb.pid
    outcome = sb.run("state.n = 2 return test_alloc(1e9)", "@mods/m/main.lua")
    assert outcome.status == "budget" and outcome.budget == "memory"
    assert outcome.error.chunk == "@mods/m/main.lua"
    assert sb.pid != pid and sb.restores == 1
    assert sb.run("return state.n").values == (1,)  # the snapshot before the lost call


def test_a_c_level_hang_is_killed_as_a_time_trip(make_isolated):
    sb = make_isolated(Budget(wall_s=0.1), wall_margin_s=0.2)
    pid = sb.pid
    outcome = sb.run("test_sleep(30)")
    assert outcome.status == "budget" and outcome.budget == "time"
    assert outcome.stats.wall_s < 10
    assert sb.pid != pid
    assert sb.run("return 1").values == (1,)


@pytest.mark.parametrize(("hook", "signal"), [("test_abort", "SIGABRT"),
                                              ("test_segfault", "SIGSEGV")])
def test_a_crashed_worker_is_reported_and_replaced(make_isolated, hook, signal):
    sb = make_isolated()
    sb.run("state = {visits = 1}")
    sb.run("state.visits = state.visits + 1")
    pid = sb.pid
    outcome = sb.run(f"state.visits = 100 {hook}()", "@mods/m/main.lua")
    assert outcome.status == "error"
    assert isinstance(outcome.error, WorkerCrashed)
    assert outcome.error.kind == "crashed" and outcome.error.signal == signal
    assert outcome.error.to_dict()["kind"] == "crashed"
    try:  # no zombie left: reaped (between any two looks, too)
        assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        pass
    assert sb.run("return state.visits").values == (2,)
    assert sb.worker_stats().respawns == 1


def test_loaded_chunks_and_the_seed_survive_a_new_worker(make_isolated):
    sb = make_isolated(seed=11)
    chunk = sb.load("state = state or {n = 0} state.n = state.n + 1 return state.n", "=inc")
    draw = sb.load("return math.random(1, 1000000)", "=draw")
    assert sb.run(chunk).values == (1,)
    first_draw = sb.run(draw).values
    sb.run("test_abort()")
    assert sb.run(chunk).values == (2,)
    assert sb.run(draw).values == first_draw  # a fresh runtime, seeded alike


def test_a_run_in_progress_is_lost_with_its_worker(make_isolated):
    sb = make_isolated()
    run = sb.start("coroutine.yield() return 1")
    assert run.resume().status == "yielded"
    sb.run("test_abort()")
    with pytest.raises(SandboxClosed):
        run.resume()


def test_a_crash_inside_a_resume_ends_the_run(make_isolated):
    sb = make_isolated()
    run = sb.start("coroutine.yield() test_abort()")
    assert run.resume().status == "yielded"
    outcome = run.resume()
    assert outcome.status == "error" and outcome.error.kind == "crashed"
    assert run.finished


def test_state_is_snapshotted_as_plain_data(make_isolated):
    sb = make_isolated()
    sb.run("state = {n = 1}")
    assert sb.state_snapshot == {"n": 1}
    sb.run("state.n = 2 error('boom')")  # a failed call takes no snapshot
    assert sb.state_snapshot == {"n": 1}
    sb.run("state = {f = function() end}")  # copied out as plain data, like any result
    assert sb.state_snapshot == {"f": "<function>"}


def test_the_hooks_need_the_host_to_ask_for_them(monkeypatch):
    monkeypatch.setenv("MOONBOX_ISOLATION_TEST_HOOKS", "1")
    with IsolatedSandbox() as sb:
        outcome = sb.run("test_abort()")
    assert outcome.status == "error" and outcome.error.kind == "runtime"


def test_close_lets_the_worker_exit_on_its_own(make_isolated):
    sb = make_isolated()
    proc = sb._worker._proc
    sb.close()
    assert proc.returncode == 0  # it saw the end of its input; nobody killed it
    sb.close()
    with pytest.raises(SandboxClosed):
        sb.run("return 1")


def test_worker_stats_come_from_the_os(make_isolated):
    sb = make_isolated()
    sb.run("local t = {} for i = 1, 100000 do t[i] = i end")
    stats = sb.worker_stats()
    assert stats.pid == sb.pid and stats.rss_bytes > 1 << 20
    assert stats.cpu_user_s + stats.cpu_system_s > 0
    assert stats.to_dict()["mods"] == [sb.mod_id]


LANE_PROGRAMS = [
    "return add(2, 3)",
    "return add(2.5, -1)",
    "return add('a', 1)",
    "return add(1)",
    "return add(1, 2, 3)",
    "local x = add(0/0, 1) return x ~= x",
    "return add({}, 1)",
]


VALID_CALLS = LANE_PROGRAMS[:2] + ["local x = add(0/0, 1) return x ~= x"]


@pytest.mark.parametrize("source", LANE_PROGRAMS)
def test_registry_bindings_answer_as_in_process_with_and_without_hooks(source):
    """The host serves a worker's calls through the binding's lane when it can: what the
    mod sees is the in-process answer, and a hook in force still sees (and may veto)
    every call."""
    registry = Registry(moonbox.default_bindings())
    api = registry.mod("m")
    budget = Budget(steps=100_000)
    try:
        with IsolatedSandbox(budget, host_functions=api.host_functions, seed=3) as isolated, \
                api.sandbox(budget, seed=3) as local:
            assert _shape(isolated.run(source, "@m.lua")) == _shape(local.run(source, "@m.lua"))
            seen: list[str] = []
            hook = registry.add_hook(Hook("spy", pre_call=lambda info: seen.append(info.binding.name)))
            assert _shape(isolated.run(source, "@m.lua")) == _shape(local.run(source, "@m.lua"))
            registry.remove_hook(hook)
            valid = len(seen)
            # Each valid call is seen once per sandbox; the rest fail validation first.
            assert valid == (2 if source in VALID_CALLS else 0)
            veto = registry.add_hook(Hook("no", pre_call=lambda info: Veto("not now")))
            vetoed = isolated.run(source, "@m.lua")
            assert _shape(vetoed) == _shape(local.run(source, "@m.lua"))
            if valid:
                assert vetoed.status == "error" and "not now" in vetoed.error.message
            registry.remove_hook(veto)
    finally:
        api.close()
        registry.close()


class _Reenter:
    """A host function that calls back into the sandbox serving it."""

    name = "reenter"
    cost = 1

    def __init__(self) -> None:
        self.sandbox = None
        self.refusals: list[str] = []

    def __call__(self, call, args):
        try:
            self.sandbox.run("return 7", "=inner")
        except moonbox.HostError as exc:
            self.refusals.append(str(exc))
            raise
        return ()


def test_a_host_function_calling_back_into_its_sandbox_is_refused_as_in_process():
    """The nested request is refused before it touches the one in flight: the outer run
    keeps its reports, its watchdog and the resumes it may still begin."""
    source = ("report('before') local ok = pcall(reenter) coroutine.yield() "
              "report('after') coroutine.yield() return ok")
    shapes = []
    for make in (Sandbox, IsolatedSandbox):
        fn = _Reenter()
        with make(Budget(wall_s=5), host_functions=[*moonbox.default_bindings(), fn]) as sb:
            fn.sandbox = sb
            outcome = sb.run(source, "=outer", max_resumes=3)
        assert fn.refusals == ["a run cannot be resumed while another run of the sandbox runs"]
        shapes.append((outcome.status, outcome.values, outcome.reports))
    assert shapes[0] == shapes[1] == ("done", (False,), ("before", "after"))
