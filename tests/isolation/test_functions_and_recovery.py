"""What the engine needs of an isolated sandbox: the mod's functions as handles, recovery on
the next call, excluded waits, nested requests that lose their worker, runtime replacement."""

from __future__ import annotations

import time

import psutil
import pytest
from pydantic import BaseModel, ConfigDict

import moonbox
from moonbox import Budget, SandboxClosed
from moonbox.bindings import Binding, LuaFunction, Permissions, Registry
from moonbox.isolation import IsolatedSandbox, RemoteFunction, WorkerPool


class _KeepArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    fn: LuaFunction


class _Keeper:
    """A host that keeps the functions mods hand it (as the engine keeps handlers)."""

    def __init__(self) -> None:
        self.kept: list[RemoteFunction] = []

    def binding(self) -> Binding:
        def keep(call, args: _KeepArgs) -> int:
            self.kept.append(args.fn)
            return len(self.kept)

        return Binding("keep", _KeepArgs, keep, description="keep a function")


@pytest.fixture
def keeper_sandbox(make_isolated):
    keeper = _Keeper()
    registry = Registry([*moonbox.default_bindings(), keeper.binding()])
    api = registry.mod("m")
    sb = make_isolated(host_functions=api.host_functions, respawn="next_call")
    yield keeper, sb
    api.close()
    registry.close()


def test_a_mods_function_crosses_as_a_handle_and_runs_in_the_worker(keeper_sandbox):
    keeper, sb = keeper_sandbox
    out = sb.run("local n = 10\nreturn keep(function(x) n = n + x return n end)",
                 "@mods/m/main.lua")
    assert out.values == (1,)
    (handle,) = keeper.kept
    assert isinstance(handle, RemoteFunction) and handle.valid
    assert handle.where == "mods/m/main.lua:2"
    assert sb.run(handle, args=(5,)).values == (15,)
    run = sb.start(handle)
    assert run.resume(1).values == (16,)  # the same closure: its upvalue is shared
    assert run.finished


def test_a_released_function_is_dropped_in_the_worker(keeper_sandbox):
    keeper, sb = keeper_sandbox
    sb.run("keep(function() return 1 end)")
    (handle,) = keeper.kept
    key = handle._key
    handle.release()
    assert not handle.valid
    with pytest.raises(SandboxClosed):
        sb.run(handle)
    sb.run("return 1")  # the next request tells the worker
    reply = sb._worker.request(["start_fn", sb._id, 999, key], time.monotonic() + 10)
    assert reply[0] == "fail" and reply[1] == "SandboxClosed"


def test_functions_do_not_survive_their_worker(keeper_sandbox):
    keeper, sb = keeper_sandbox
    sb.run("keep(function() return 1 end)")
    (handle,) = keeper.kept
    pid = sb.pid
    out = sb.run("test_abort()")
    assert out.error.kind == "crashed"
    # respawn="next_call": the worker stays down until the mod's next call.
    assert sb.lost and sb.pid is None and sb.restores == 0
    assert not handle.valid
    with pytest.raises(SandboxClosed):
        sb.start(handle)
    assert sb.revive() is True
    assert sb.pid not in (None, pid) and sb.restores == 1 and not sb.lost
    assert sb.revive() is False
    assert sb.run("return 2").values == (2,)


def test_a_lost_worker_is_replaced_on_the_next_call(make_isolated):
    sb = make_isolated(respawn="next_call")
    sb.run("state = 41")
    sb.run("test_segfault()")
    assert sb.pid is None
    assert sb.run("return state + 1").values == (42,)
    assert sb.restores == 1 and sb.worker_stats().respawns == 1


def test_a_nested_request_that_loses_the_shared_worker_fails_the_outer_call_too():
    # Mod a's host function runs mod b, pinned to the same worker; b crashes it. a's call
    # cannot go on (its runtime was in that worker): it fails as crashed, and the worker
    # is started again once, not twice.
    with WorkerPool(1, _test_hooks=True) as pool:
        holder: dict[str, IsolatedSandbox] = {}

        class _Args(BaseModel):
            model_config = ConfigDict(extra="forbid")

        def run_b(call, args: _Args) -> str:
            out = holder["b"].run("test_abort()")
            return out.error.kind

        registry = Registry([Binding("run_b", _Args, run_b)])
        api = registry.mod("a")
        a = pool.sandbox("a", host_functions=api.host_functions)
        b = pool.sandbox("b")
        holder["b"] = b
        a.run("state = 'a kept'")
        b.run("state = 'b kept'")
        out = a.run("return run_b()")
        assert out.status == "error" and out.error.kind == "crashed"
        assert pool.stats()[0].respawns == 1
        assert a.run("return state").values == ("a kept",)
        assert b.run("return state").values == ("b kept",)
        assert pool.stats()[0].respawns == 1
        api.close()
        registry.close()


def test_an_approval_wait_is_excluded_from_the_workers_clock_too():
    class _Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        name: str

    registry = Registry([Binding("spawn", _Args, lambda call, args: args.name, risk="write")])

    def approve(request):
        time.sleep(1.2)
        return True

    # The wait is past budget and margin together, which leave room for a loaded machine.
    api = registry.mod("m", Permissions(mode="ask"), approve=approve, approval_timeout_s=5)
    with IsolatedSandbox(Budget(wall_s=0.5), host_functions=api.host_functions,
                         wall_margin_s=0.5) as sb:
        pid = sb.pid
        out = sb.run("return spawn('x')")
        assert out.status == "done", out.error
        assert out.values == ("x",) and sb.pid == pid  # neither tripped nor killed
        assert out.stats.wall_s >= 0.4
    api.close()
    registry.close()


class _Slow:
    """A host function that takes its argument's seconds: the host's time, not the mod's."""

    name, cost = "slow", 1

    def __call__(self, call, args):
        time.sleep(args[0])
        return ("done",)


@pytest.mark.parametrize(("source", "status"), [
    # A call that returns past the budget and the stall margin ends the resume as a time
    # trip after the fact, in process and isolated alike.
    ("local r = slow(...) return r", "budget"),
    # The mod's own meter stops it when the call returns past its budget, as in process:
    # a trip the sandbox catches, never a kill.
    ("slow(...) local x = 0 while true do x = x + 1 end", "budget"),
    ("slow(...) slow(0) return 1", "budget"),
])
def test_a_slow_host_function_does_not_cost_the_worker(source, status):
    budget = Budget(wall_s=0.25)
    with moonbox.Sandbox(budget, host_functions=[_Slow()]) as local:
        expected = local.run(source, args=(1.5,))
    assert expected.status == status
    with IsolatedSandbox(budget, host_functions=[_Slow()], wall_margin_s=0.5) as sb:
        pid = sb.pid
        out = sb.run(source, args=(1.5,))
        assert (out.status, out.values) == (expected.status, expected.values)
        assert out.error is None or out.error.kind == "budget"
        assert sb.pid == pid and sb.restores == 0  # not killed
        run = sb.start(source)  # the same in a resume
        out = run.resume(1.5)
        assert (out.status, out.values) == (expected.status, expected.values)
        assert sb.pid == pid and sb.restores == 0


def test_a_replaced_runtime_is_made_again_with_its_chunks(make_isolated):
    sb = make_isolated(Budget(max_memory=8 << 20))
    chunk = sb.load("return 'still here'", "=kept")
    sb.run("state = 7")
    pid = sb.pid
    out = sb.run("hoard = {} while true do hoard[#hoard + 1] = tostring(#hoard) end")
    assert out.budget == "memory"
    assert sb.replacements == 1 and sb.pid == pid  # in the worker, as in process
    assert not sb.lost and sb.restores == 0  # the worker itself lives on
    assert sb.run(chunk).values == ("still here",)
    assert sb.run("return hoard == nil, state").values == (True, 7)
    assert sb.replacements == 1  # counted once, whatever the calls after it


def test_the_heap_of_a_mod_is_read_in_its_worker(make_isolated):
    sb = make_isolated()
    before = sb.memory_used_bytes
    sb.run("big = {} for i = 1, 100000 do big[i] = i end")
    assert sb.memory_used_bytes > before + 500_000


def test_worker_stats_give_a_cpu_share(make_isolated):
    # ~0.3 s of CPU on any machine: a loop that cannot finish, stopped on time.
    sb = make_isolated(Budget(steps=10**15, wall_s=0.3))
    sb.run("while true do end")
    first = sb.worker_stats()
    assert first.cpu_percent > 0
    assert psutil.Process(sb.pid).pid == first.pid
    assert first.to_dict()["cpu_percent"] == first.cpu_percent
