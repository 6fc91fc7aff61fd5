"""Property tests: Lua values of every shape against pydantic models, through a real sandbox.

Whatever a mod passes — NaN, infinities, huge strings, nested tables, wrong types — a
typed binding either gets exactly what pydantic accepts of the value that crossed, or the
mod gets one line naming the binding and the argument.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from moonbox import Budget
from moonbox.bindings import Binding, LuaNumber, Permissions, Registry


class Inner(BaseModel):
    name: str
    hp: int = 10


FIELD_TYPES: dict[str, Any] = {
    "number": LuaNumber,
    "integer": int,
    "string": str,
    "boolean": bool,
    "numbers": list[LuaNumber],
    "counts": dict[str, int],
    "maybe": str | None,
    "inner": Inner,
    "anything": Any,
}


def _model(kind: str) -> type[BaseModel]:
    return type(f"Take_{kind}", (BaseModel,), {"__annotations__": {"x": FIELD_TYPES[kind]}})


MODELS = {kind: _model(kind) for kind in FIELD_TYPES}


@functools.cache
def _sandbox():
    # One sandbox for every example (hypothesis runs hundreds): created once, lives with
    # the test session.
    reg = Registry()
    arrived: list[Any] = []
    reg.register(Binding("echo", MODELS["anything"], lambda c, a: arrived.append(a.x)))
    for kind, model in MODELS.items():
        reg.register(Binding(f"take_{kind}", model,
                             lambda c, a: "ok" if a.x is None else "ok:" + type(a.x).__name__))
    sb = reg.mod("prop", Permissions(mode="full")).sandbox(Budget(wall_s=10))
    return sb, arrived


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.text(alphabet="ab", min_size=1, max_size=3).map(lambda s: s * 20_000),  # big strings
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.text(alphabet="abcxyz", min_size=1, max_size=4), inner, max_size=5),
    ),
    max_leaves=12,
)


# Values shaped like each field (half the examples), so acceptance is exercised as much
# as refusal.
numbers = st.one_of(st.floats(), st.integers(-(2**53), 2**53))
FITTING = {
    "number": numbers,
    "integer": st.one_of(st.integers(-(2**53), 2**53), st.floats()),
    "string": st.text(max_size=50),
    "boolean": st.booleans(),
    "numbers": st.lists(numbers, max_size=6),
    "counts": st.dictionaries(st.text("abc", min_size=1, max_size=3), numbers, max_size=4),
    "maybe": st.one_of(st.none(), st.text(max_size=5)),
    "inner": st.fixed_dictionaries({"name": st.text(max_size=5)},
                                   optional={"hp": numbers, "extra": st.booleans()}),
    "anything": values,
}


@st.composite
def cases(draw):
    kind = draw(st.sampled_from(list(MODELS)))
    value = draw(st.one_of(values, FITTING[kind]))
    return kind, value


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_typed_bindings_agree_with_pydantic(case):
    kind, value = case
    sb, arrived = _sandbox()
    arrived.clear()
    echo = sb.run("local v = ... echo(v)", args=(value,))
    typed = sb.run(f"local v = ... return take_{kind}(v)", args=(value,))
    if not echo.ok:
        # The value could not cross at all (too big, too deep): refused in one line.
        assert not typed.ok and "\n" not in typed.error.message
        event("refused before the binding")
        return
    crossed = arrived[0] if arrived else None
    try:
        expected = MODELS[kind].model_validate({"x": crossed} if crossed is not None else {})
    except ValidationError:
        expected = None
    if expected is not None:
        event(f"{kind}: accepted")
        assert typed.ok, (crossed, typed.error)
        x = expected.x
        assert typed.value == ("ok" if x is None else "ok:" + type(x).__name__)
    else:
        event(f"{kind}: refused")
        assert typed.status == "error"
        message = typed.error.message
        assert "\n" not in message
        assert message.startswith(f"take_{kind}: argument x")


@settings(max_examples=200, deadline=None)
@given(a=st.one_of(st.floats(), st.integers(-(2**53), 2**53), st.text(max_size=5),
                   st.booleans(), st.none()),
       b=st.one_of(st.floats(), st.integers(-(2**53), 2**53), st.none()))
def test_positional_and_table_forms_are_the_same_call(a, b):
    sb, _ = _sandbox()
    reg_sb = _two_field_sandbox()
    positional = reg_sb.run("local a, b = ... return pair(a, b)", args=(a, b))
    table = reg_sb.run("local a, b = ... return pair{a = a, b = b}", args=(a, b))
    assert positional.status == table.status
    if positional.ok:
        assert positional.values == table.values or (
            all(isinstance(v, float) and math.isnan(v) for v in positional.values)
        )
    else:
        assert positional.error.message == table.error.message


class Pair(BaseModel):
    a: LuaNumber
    b: LuaNumber = 0.0


@functools.cache
def _two_field_sandbox():
    reg = Registry()
    reg.register(Binding("pair", Pair, lambda c, p: p.a + p.b))
    return reg.mod("prop").sandbox(Budget(wall_s=10))
