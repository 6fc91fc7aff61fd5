"""A binding: a named host function with a pydantic model for its arguments."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, StrictFloat, ValidationError

from .._errors import BindingError
from ..sandbox import HostCall

__all__ = ["Binding", "LuaNumber", "Risk"]

Risk = Literal["read", "write", "danger"]
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")

_PYDANTIC_PHRASES = {
    "number_type": "expected a number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "string_type": "expected a string",
    "bool_type": "expected a boolean",
    "list_type": "expected a list (a table with keys 1..n)",
    "dict_type": "expected a table",
    "missing": "missing",
    "extra_forbidden": "unexpected argument",
    "finite_number": "expected a finite number",
}


# Validated in pydantic's core (no Python call per field): ints are taken and become floats,
# as every Lua number is a double; strings and booleans that look like numbers are refused.
LuaNumber = StrictFloat
"""A Lua number: an int or float, never a string or boolean that looks like one."""


def _lua_type(value: Any) -> str:
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "table"


@dataclass(frozen=True)
class Binding:
    """A Python function a mod may call by name.

    Positional Lua arguments map onto the fields of ``args`` in order; a single table
    argument maps onto them by key. A validation failure reaches Lua as one line naming the
    binding, the argument and the problem (``add: argument b: expected a number, got
    string``).

    Attributes:
        name: the global name in Lua (1-64 letters, digits, ``_``).
        args: pydantic model of the arguments.
        fn: called with the :class:`HostCall` and the validated model; returns a plain value,
            a tuple of plain values, or ``None``.
        risk: ``read``, ``write`` or ``danger``.
        cost: steps charged to the budget per call.
        description: one line for the mod API documentation.
    """

    name: str
    args: type[BaseModel]
    fn: Callable[[HostCall, Any], Any] = field(repr=False)
    risk: Risk = "read"
    cost: int = 1
    description: str = ""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"binding name {self.name!r}: use 1-64 letters, digits or '_'")
        if self.cost < 0:
            raise ValueError("a binding's cost cannot be negative")
        fields = tuple(self.args.model_fields)
        object.__setattr__(self, "_fields", fields)
        object.__setattr__(self, "_field_set", frozenset(fields))
        object.__setattr__(self, "_validate", self.args.__pydantic_validator__.validate_python)

    def validate(self, args: tuple[Any, ...]) -> BaseModel:
        """Map Lua arguments onto the model and validate them.

        Raises:
            BindingError: one line naming the argument and the problem.
        """
        fields: tuple[str, ...] = self._fields  # type: ignore[attr-defined]
        if len(args) == 1 and type(args[0]) is dict and (
            len(fields) != 1 or not args[0] or args[0].keys() <= self._field_set  # type: ignore[attr-defined]
        ):
            data: dict[str, Any] = args[0]
            unknown = [k for k in data if k not in self._field_set]  # type: ignore[attr-defined]
            if unknown:
                raise BindingError(f"argument {unknown[0]}: unexpected argument")
        else:
            while args and args[-1] is None and len(args) > len(fields):
                args = args[:-1]
            if len(args) > len(fields):
                raise BindingError(
                    f"expected at most {len(fields)} argument{'s' if len(fields) != 1 else ''}, "
                    f"got {len(args)}"
                )
            data = {}
            for name, value in zip(fields, args, strict=False):
                if value is not None:
                    data[name] = value
        try:
            return self._validate(data)  # type: ignore[attr-defined,no-any-return]
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"]) or "arguments"
            phrase = _PYDANTIC_PHRASES.get(first["type"], first["msg"])
            given = first.get("input")
            if first["type"] != "missing" and phrase.startswith("expected"):
                phrase = f"{phrase}, got {_lua_type(given)}"
            raise BindingError(f"argument {loc}: {phrase}") from None

    def __call__(self, call: HostCall, args: tuple[Any, ...]) -> tuple[Any, ...]:
        result = self.fn(call, self.validate(args))
        if result is None:
            return ()
        return result if isinstance(result, tuple) else (result,)
