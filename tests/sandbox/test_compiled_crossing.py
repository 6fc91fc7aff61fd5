"""The compiled crossing of host calls (moonbox/sandbox/_resume.c, c_host): a host function
called with plain arguments reaches the dispatcher without lupa, and answers exactly what
the prelude's crossing answers."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moonbox import BindingError, Budget, Sandbox
from moonbox.sandbox import _runtime
from moonbox.sandbox._runtime import compiled_resume

pytestmark = pytest.mark.skipif(not compiled_resume(), reason="the compiled crossing is not built")


class Echo:
    """Answers its arguments; counts its calls."""

    name = "echo"
    cost = 3

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, call: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        self.calls.append(args)
        return tuple(args)


class Answer:
    """Answers what the test set (plain data, nested or not)."""

    name = "answer"
    cost = 1
    value: tuple[Any, ...] = ()

    def __call__(self, call: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return self.value


class Refuse:
    name = "refuse"
    cost = 1

    def __call__(self, call: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        raise BindingError(f"no: {args!r}")


class Costly:
    name = "costly"
    cost = 50_000

    def __call__(self, call: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (1,)


def _sandbox(crossing: bool, monkeypatch: Any, jit: bool = True,
             budget: Budget | None = None) -> tuple[Sandbox, Echo, Answer]:
    if crossing:
        monkeypatch.delenv(_runtime.CROSSING_ENV, raising=False)
    else:
        monkeypatch.setenv(_runtime.CROSSING_ENV, "lua")
    echo, answer = Echo(), Answer()
    sb = Sandbox(budget or Budget(steps=100_000), jit=jit,
                 host_functions=[echo, answer, Refuse(), Costly()])
    monkeypatch.delenv(_runtime.CROSSING_ENV, raising=False)
    return sb, echo, answer


def _shown(out: Any) -> Any:
    values = tuple(repr(v) if isinstance(v, float) and math.isnan(v) else v
                   for v in out.values)
    error = None if out.error is None else (type(out.error).__name__, str(out.error))
    return out.status, values, error, out.reports


def test_a_plain_call_goes_through_the_crossing(monkeypatch):
    sb, echo, _ = _sandbox(True, monkeypatch)
    with sb:
        assert sb._resumer is not None
        out = sb.run('return echo(1, 2.5, "a\\0b", true, nil, false)')
        assert out.values == (1, 2.5, b"a\0b".decode(), True, None, False)
        assert echo.calls == [(1, 2.5, "a\0b", True, None, False)]
        out = sb.run('return select("#", echo())')
        assert out.values == (0,)
        assert sb._resumer.crossed == 2
        sb.run("echo({1})")  # a table: the prelude's way
        assert sb._resumer.crossed == 2 and len(echo.calls) == 3


SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(-(1 << 60), 1 << 60),
    st.floats(allow_nan=True, allow_infinity=True),
    st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
)


def _lua(value: Any) -> str:
    if value is None:
        return "nil"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return f"({value})"
    if isinstance(value, float):
        if math.isnan(value):
            return "(0/0)"
        if math.isinf(value):
            return "(1/0)" if value > 0 else "(-1/0)"
        return f"({value!r})"
    return '"' + "".join(f"\\{b}" for b in value.encode("latin-1")) + '"'


@settings(max_examples=60, deadline=None)
@given(values=st.lists(SCALARS, max_size=18), answer=st.lists(SCALARS, max_size=6),
       nested=st.booleans(), jit=st.booleans())
def test_the_crossing_answers_as_the_preludes(values, answer, nested, jit):
    args = ", ".join(_lua(v) for v in values)
    more = ", " + args if args else ""
    source = f"""
local r = {{}}
local function keep(...) r[#r + 1] = select("#", ...) for i = 1, select("#", ...) do
  r[#r + 1] = (select(i, ...)) end end
keep(echo({args}))
keep(answer({args}))
keep(pcall(refuse{more}))
keep(pcall(echo, {{1, 2}}, {{x = 1}}))
return unpack(r, 1, #r)
"""
    value = tuple(answer) + (({"k": [1, "two"]},) if nested else ())
    with pytest.MonkeyPatch.context() as monkeypatch:
        a, _, answer_a = _sandbox(True, monkeypatch, jit)
        b, _, answer_b = _sandbox(False, monkeypatch, jit)
    with a, b:
        answer_a.value = answer_b.value = value
        shown = _shown(a.run(source, "=x"))
        assert shown == _shown(b.run(source, "=x"))
        assert shown[0] == "done", shown
        # Under the count hook the window may hold less than a call's cost at the call
        # (the hook takes its steps in lumps): that call goes the prelude's way.
        assert a._resumer.crossed == 3 if jit else a._resumer.crossed <= 3
        assert b._resumer.crossed == 0


KEYS = st.one_of(st.text("abcxyz", min_size=1, max_size=6), st.integers(-5, 40),
                 st.floats(-10, 10, allow_nan=False))
FLAT_VALUES = st.one_of(st.booleans(), st.integers(-(1 << 40), 1 << 40),
                        st.floats(allow_nan=False), st.text("pq", max_size=30))


def _table(pairs: dict[Any, Any], nested: bool) -> str:
    items = [f"[{_lua(k)}] = {_lua(v)}" for k, v in pairs.items()]
    if nested:
        items.append("inner = {1}")
    return "{" + ", ".join(items) + "}"


@settings(max_examples=60, deadline=None)
@given(pairs=st.dictionaries(KEYS, FLAT_VALUES, max_size=20), nested=st.booleans(),
       jit=st.booleans())
def test_a_flat_table_argument_crosses_as_the_preludes(pairs, nested, jit):
    # At most 16 pairs of plain keys and values (the prelude's flat_pairs): the crossing
    # hands the pairs over in the same order, charged a step each; anything else goes the
    # prelude's way, the table as lupa's.
    table = _table(pairs, nested)
    source = f"""
local t = {table}
echo("a", t)
local keys = {{}}
for k in next, t do keys[#keys + 1] = k end
return unpack(keys, 1, #keys)
"""
    flat = not nested and 0 < len(pairs) <= 16
    with pytest.MonkeyPatch.context() as monkeypatch:
        a, echo_a, _ = _sandbox(True, monkeypatch, jit)
        b, echo_b, _ = _sandbox(False, monkeypatch, jit)
    with a, b:
        out_a, out_b = a.run(source, "=x"), b.run(source, "=x")
        assert out_a.status == out_b.status == "done", (out_a, out_b)
        # The same data; the order of the pairs is each runtime's own (its string hash
        # seed), the order of its `next`.
        assert echo_a.calls == echo_b.calls
        if flat:
            for out, echo in ((out_a, echo_a), (out_b, echo_b)):
                got = echo.calls[0][1]
                if isinstance(got, dict):  # (keys 1..n arrive as a list)
                    assert list(got) == list(out.values)
        if jit:
            assert out_a.stats.steps == out_b.stats.steps
        if jit or not flat:  # (see test_the_crossing_answers_as_the_preludes)
            assert a._resumer.crossed == (1 if flat else 0)
            # A table with string keys only the crossing walks itself (no Lua run from C);
            # a number key's hash chain a mod can make long, so the prelude walks those.
            walked = flat and all(isinstance(k, str) for k in pairs)
            assert a._resumer.walked == (1 if walked else 0)
        assert b._resumer.walked == 0


@pytest.mark.parametrize("limits, walked", [
    ({"max_items": 3}, False), ({"max_bytes": 12}, False), ({"max_bytes": 13}, True),
    ({}, True)])
def test_the_crossings_walk_keeps_the_sandboxs_value_limits(monkeypatch, limits, walked):
    # Four pairs, 13 bytes of keys and string values: walked only within both limits, and
    # the prelude's way, taken otherwise, gives the same call.
    from moonbox import ValueLimits

    calls = []
    for crossing in (True, False):
        if crossing:
            monkeypatch.delenv(_runtime.CROSSING_ENV, raising=False)
        else:
            monkeypatch.setenv(_runtime.CROSSING_ENV, "lua")
        echo = Echo()
        with Sandbox(Budget(steps=100_000), host_functions=[echo],
                     value_limits=ValueLimits(**limits)) as sb:
            out = sb.run('local ok, e = pcall(echo, "a", {ab = 1, cd = "xyz", ef = true, '
                         'gh = "ij"}) return ok, e')
            calls.append((out.values, echo.calls))
            if crossing:
                assert sb._resumer.walked == (1 if walked else 0)
        monkeypatch.delenv(_runtime.CROSSING_ENV, raising=False)
    assert calls[0] == calls[1]


def test_a_table_of_colliding_number_keys_is_never_walked_by_the_crossing(monkeypatch):
    # lua_next finds each key again along its chain: on such keys the prelude walks.
    from test_host_stalls import COLLIDING_KEYS

    sb, echo, _ = _sandbox(True, monkeypatch)
    with sb:
        out = sb.run(COLLIDING_KEYS + """
local keys = colliding_keys(4096)
local t = {}
for i = 1, #keys do t[keys[i]] = i end
local small = {}
for i = 1, 8 do small[keys[i]] = i end
echo("a", small)
return pcall(echo, "a", t)
""", "=attack")
        assert out.status == "done", out.error
        assert sb._resumer.walked == 0 and len(echo.calls) == 2


def test_an_overdrawn_window_takes_the_preludes_way_and_trips(monkeypatch):
    # The crossing charges only what the window holds; a call that overdraws it (or meets
    # the alarm's flag) goes the prelude's way, which accounts it and polls.
    for crossing in (True, False):
        sb, _, _ = _sandbox(crossing, monkeypatch, budget=Budget(steps=120_000))
        with sb:
            out = sb.run("local n = 0 while true do costly() n = n + 1 end")
            assert out.status == "budget" and out.error.budget == "steps"
            assert out.stats.steps <= 120_000 + 50_000 + 10


def test_a_host_call_loop_trips_on_time_through_the_crossing(monkeypatch):
    sb, echo, _ = _sandbox(True, monkeypatch, budget=Budget(steps=1 << 52, wall_s=0.05))
    with sb:
        out = sb.run("while true do echo(1) end")
        assert out.status == "budget" and out.error.budget == "time"
        assert len(echo.calls) > 10


def test_a_failure_through_the_crossing_names_the_mods_line(monkeypatch):
    sb, _, _ = _sandbox(True, monkeypatch)
    with sb:
        out = sb.run('local x = 1\nrefuse("a")', "=m")
        assert out.status == "error"
        assert str(out.error).startswith("m:2: refuse: no: ('a',)"), str(out.error)


def test_more_arguments_than_the_crossing_takes_go_the_preludes_way(monkeypatch):
    sb, echo, _ = _sandbox(True, monkeypatch)
    with sb:
        args = ", ".join(str(i) for i in range(35))
        assert sb.run(f"return select('#', echo({args}))").values == (35,)
        assert sb._resumer.crossed == 0 and echo.calls == [tuple(range(35))]
        args = ", ".join(str(i) for i in range(34))
        assert sb.run(f"return select('#', echo({args}))").values == (34,)
        assert sb._resumer.crossed == 1


def test_a_closed_binding_sends_host_calls_the_preludes_way(monkeypatch):
    sb, echo, _ = _sandbox(True, monkeypatch)
    with sb:
        sb._resumer.close()
        assert sb.run("return echo(7)").values == (7,)
        assert echo.calls == [(7,)] and sb._resumer.crossed == 0


def test_a_window_that_covers_the_cost_but_not_the_pairs_goes_the_preludes_way(monkeypatch):
    # echo costs 3; its table's 4 pairs cost 4 more: a budget of 5 steps has room for the
    # cost, not for the pairs. The crossing leaves the table to the prelude, which charges
    # the pairs and trips, as the prelude's way does whole.
    src = 'echo("a", {p = 1, q = 2, r = 3, s = 4}) return 1'
    outs = []
    for crossing in (True, False):
        sb, echo, _ = _sandbox(crossing, monkeypatch, budget=Budget(steps=5))
        with sb:
            out = sb.run(src, "=w")
            outs.append((out.status, out.error.budget if out.error else None, len(echo.calls)))
            if crossing:
                assert sb._resumer.walked == 0
    assert outs[0] == outs[1] == ("budget", "steps", 0)


def test_the_crossings_walk_never_runs_a_metamethod_and_keeps_every_byte(monkeypatch):
    sb, echo, _ = _sandbox(True, monkeypatch)
    with sb:
        out = sb.run("""
local hit = false
local t = setmetatable({["a\\0b"] = "x\\0y", ["\\255"] = true}, {
  __index = function() hit = true end, __pairs = function() hit = true end,
  __newindex = function() hit = true end, __len = function() hit = true end,
  __metatable = "locked"})
echo("n", t)
return hit""", "=m")
        assert out.status == "done" and out.values == (False,)
        assert sb._resumer.walked == 1
        assert echo.calls == [("n", {"a\0b": "x\0y", "\ufffd": True})]


def test_the_crossings_walk_in_a_preemptible_sandbox(monkeypatch):
    monkeypatch.delenv(_runtime.CROSSING_ENV, raising=False)
    echo = Echo()
    with Sandbox(Budget(steps=1 << 40, wall_s=30), preempt=True,
                 host_functions=[echo]) as sb:
        out = sb.run('for i = 1, 300 do echo(i, {x = i, name = "n"}) end return 1', "=p")
        # (A call that meets a preemption's poll flag goes the prelude's way.)
        assert out.status == "done" and 0 < sb._resumer.walked <= 300
        assert echo.calls == [(i, {"x": i, "name": "n"}) for i in range(1, 301)]


@pytest.mark.parametrize("preempt", [False, True], ids=["plain", "preempt"])
def test_a_walked_call_raised_poll_flag_never_sends_rewritten_arguments(preempt):
    # Found in review: the alarm's thread raises the poll flag at any moment; raised
    # between the walk's check and the crossing's, the call went the prelude's way with
    # its arguments already rewritten as pairs (and, preempted, the host got them so).
    # A thread raising the flag over and over stands in for the alarm.
    import ctypes
    import threading

    echo = Echo()
    # A million calls, a thousand per resume: no resume needs more than its budget, however
    # slow the machine.
    with Sandbox(Budget(steps=1 << 30, wall_s=30), preempt=preempt,
                 host_functions=[echo]) as sb:
        cell = ctypes.c_int32.from_address(sb._alarm_state[2])
        stop = threading.Event()

        def raise_flag() -> None:
            while not stop.is_set():
                cell.value = 0x7FFFFFFF
                stop.wait(0.00002)

        thread = threading.Thread(target=raise_flag, daemon=True)
        thread.start()
        try:
            run = sb.start('for j = 1, 1000 do for i = 1, 1000 do echo("a", {x = 1, y = "s"}) '
                           'end coroutine.yield() end return 1')
            out = run.resume()
            while not run.finished and out.status == "yielded":
                out = run.resume()
        finally:
            stop.set()
            thread.join()
    assert out.status == "done", out.error
    assert all(len(args) == 2 and isinstance(args[1], dict) for args in echo.calls)
    assert len(echo.calls) == 1_000_000


class Direct:
    """A host function with a direct answer: doubles a number itself, declines the rest
    (or, told to, breaks its contract by raising)."""

    name = "twice"
    cost = 2

    def __init__(self) -> None:
        self.full: list[tuple[Any, ...]] = []
        self.direct: list[tuple[Any, ...]] = []
        self.raises = False
        self.answer_str = False

    def __call__(self, call: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        self.full.append(args)
        return ("full",)

    def make_direct(self, sb: Any, pairs: bool) -> Any:
        def direct(*args: Any) -> Any:
            self.direct.append(args)
            if self.raises:
                raise RuntimeError("a direct answer raised")
            if pairs:
                return ("text",) if self.answer_str else (b"pairs", *args)
            return args[0] * 2 if len(args) == 1 and type(args[0]) is int else None
        return direct


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_direct_answer_serves_the_call_or_declines_to_the_dispatcher(monkeypatch):
    monkeypatch.delenv(_runtime.CROSSING_ENV, raising=False)
    d = Direct()
    with Sandbox(Budget(steps=100_000), host_functions=[Echo(), d]) as sb:
        assert sb.run("return twice(21)").values == (42,)
        assert d.direct == [(21,)] and d.full == [] and sb._resumer.directed == 1
        # Declined (None): the dispatcher serves the same arguments.
        assert sb.run('return twice("a", nil)').values == ("full",)
        assert d.direct[-1] == (b"a", None) and d.full == [("a", None)]
        # A flat table's call: the pairs' direct answer, with the pairs.
        assert sb.run("return twice(1, {k = 5})").values == ("pairs", 1, 1, "k", 5)
        assert d.direct[-1] == (1, 1, b"k", 5)
        assert sb._resumer.directed == 2
        # An answer only lupa would convert (a str, a table) breaks the contract: the
        # call fails as a host failure, nothing of the answer reaches the mod.
        out = sb.run('return pcall(twice, 1, {k = "text"})')
        assert out.values[0] is True  # bytes: plain
        out = sb.run("return pcall(twice, 1, {k = 1.5})")
        assert out.values[0] is True
        d.answer_str = True
        out = sb.run("return pcall(twice, 1, {k = 1})")
        assert out.values[0] is False and "host function failed" in out.values[1]
        d.answer_str = False
        assert sb._resumer.directed == 5
        # The steps are charged as on every crossing: twice's cost, a step a pair.
        # (A call that would overdraw the window, or finds the poll flag up, takes the
        # prelude's way, and lupa's crossing: the dispatcher serves it.)
        directed, full = sb._resumer.directed, len(d.full)
        out = sb.run("for i = 1, 100 do twice(i) end")
        assert out.ok and out.stats.steps == 300
        assert (sb._resumer.directed - directed) + (len(d.full) - full) == 100
        # A direct answer that raises breaks its contract: the call fails as a host
        # failure, logged, and nothing of it reaches the mod.
        d.raises = True
        full = len(d.full)
        out = sb.run("return pcall(twice, 1)")
        assert out.values[0] is False and "host function failed" in out.values[1]
        assert len(d.full) == full


def test_a_runtime_replaced_gets_direct_answers_of_its_own(monkeypatch):
    monkeypatch.delenv(_runtime.CROSSING_ENV, raising=False)
    d = Direct()
    with Sandbox(Budget(steps=100_000), host_functions=[d]) as sb:
        assert sb.run("return twice(2)").values == (4,)
        first = sb._resumer
        sb._open_runtime()  # as a replacement opens it (see Sandbox.reset)
        assert sb._resumer is not first and first.directed == 1
        assert sb.run("return twice(3)").values == (6,) and sb._resumer.directed == 1
