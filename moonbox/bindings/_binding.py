"""A binding: a named host function with a pydantic model for its arguments."""

from __future__ import annotations

import operator
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    PlainSerializer,
    PlainValidator,
    StrictFloat,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from .._errors import BindingError, first_error
from ..sandbox import FunctionHandle, HostCall
from ._codes import Refusal
from ._fast import fast_checker, lane_factory, pairs_lane_factory
from ._permissions import Risk

__all__ = ["Binding", "LuaFunction", "LuaNumber", "Risk"]

_RISKS = ("read", "write", "danger")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_GROUP = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_CODE = re.compile(r"^[a-z][a-z0-9_]{0,31}(:[a-z][a-z0-9_]{0,31})?$")

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
    "function_type": "expected a function",
}


# Validated in pydantic's core (no Python call per field): ints are taken and become floats,
# as every Lua number is a double; strings and booleans that look like numbers are refused.
LuaNumber = StrictFloat
"""A Lua number: an int or float, never a string or boolean that looks like one."""


def _check_function(value: Any) -> FunctionHandle:
    if not isinstance(value, FunctionHandle):
        raise PydanticCustomError("function_type", "expected a function")
    return value


LuaFunction = Annotated[
    FunctionHandle,
    PlainValidator(_check_function),
    PlainSerializer(lambda handle: handle.where, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "lua-function"}),
]
"""A function of the mod, passed as a callback: the binding gets a :class:`FunctionHandle`
(positional arguments only; functions inside tables are refused)."""


def _takes_functions(annotation: Any) -> bool:
    if annotation is FunctionHandle:
        return True
    return any(_takes_functions(a) for a in typing.get_args(annotation))


def _lua_type(value: Any) -> str:
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, FunctionHandle):
        return "function"
    return "table"


@dataclass(frozen=True)
class Binding:
    """A Python function a mod may call by name.

    Positional Lua arguments map onto the fields of ``args`` in order; a single table
    argument maps onto them by key. A validation failure reaches Lua as one line naming the
    binding, the argument and the problem (``add: argument b: expected a number, got
    string``). A ``nil`` argument is a missing one (the field's default applies).

    Attributes:
        name: the global name in Lua (1-64 letters, digits, ``_``; not starting with a digit).
        args: pydantic model of the arguments.
        fn: called with the :class:`HostCall` and the validated model (and, with
            ``prepare``, what it bound, as a third argument); returns a plain value, a tuple
            of plain values, ``None``, or (with ``result``) what ``result`` validates.
        result: optional pydantic model of the result; the value ``fn`` returns is validated
            against it (a failure is a host bug) and crosses as a table of its fields.
        risk: ``read``, ``write`` or ``danger``: what a permission mode decides on.
            ``write`` unless given: a binding that only reads must say ``risk="read"``, so
            that one forgotten argument never hands a world-changing binding to read-only
            mods.
        group: a label for documentation and stubs (``world``, ``store``, ...).
        cost: steps charged to the budget per call.
        description: one line for the mod API documentation.
        explain_denial: when a mod's permissions deny the binding, install a stub that
            fails with the reason instead of leaving the name absent.
        unpack: call ``fn`` with the fields as positional arguments after the
            :class:`HostCall`, in the model's order (``fn(call, a, b)``), not with a model
            instance. With simple fields (numbers, strings, booleans, ``Any``, bounds and
            lengths) a call then builds no model at all: a checker compiled from the model
            vouches for the values, and anything it cannot vouch for goes through pydantic
            as usual. For bindings called in hot loops.
        prepare: an optional read-only step, ``prepare(call, args)`` (the fields unpacked
            as for ``fn`` with ``unpack``), run before approval and hooks: it binds the
            concrete target (an entity's id, a row) and returns it, or returns a
            :class:`~moonbox.bindings.Refusal` to refuse the call (``[refused]`` or its
            own code). It must change nothing. The approver and the hooks see what it
            bound (``prepared``), and ``fn`` gets it as its last argument; the world can
            change while an approval is pending, so ``fn`` checks it again before acting.
        codes: the codes of its own the binding may fail with (``[unknown_prefab]``...),
            for the editor stubs and the API reference; documentation only.
        fast_pairs: for a binding called as ``name(a, {k = v, ...})`` whose model is a
            simple first field and a nested model (``coreai_world_change``): an optional
            ``fast_pairs(call, a, fields)`` that a call nothing observes (no hook, approval
            or preparation) may take instead of ``fn``, with ``a`` and the table's values
            checked by a checker compiled from the model (``fields`` a dict of the nested
            model's fields that were given), no model built. It returns what ``fn`` would,
            or ``None`` to decline before it changed anything (the call then takes the
            full path). It must do exactly what ``fn`` does with the model those values
            make: a property test should hold the two paths equal.
        direct: for an unpacking binding (``unpack``, no ``prepare``) answered in O(1)
            from host state, such as a world read: an optional ``direct(mf, registry,
            api)`` that makes, for one mod, a function the sandbox's compiled crossing
            calls itself, with no dispatcher, lane or ``fn`` between: ``f(*args)`` with
            the arguments exactly as they come from Lua (strings as bytes). While
            ``mf._lane_version == registry._version`` (nothing observes the call) it may
            answer what ``fn`` would, as one number or boolean or a tuple of numbers,
            booleans and nils; otherwise, and for anything it cannot vouch for, it returns
            ``None`` before it changed anything and the call takes the full path. It never
            raises. The same property test holds it equal to the full path.
        pairs_direct: the same for a call ``name(a, {k = v, ...})`` of a binding with
            ``fast_pairs``: ``f(a, n, k1, v1, ...)``, the flat table as its pairs.
    """

    name: str
    args: type[BaseModel]
    fn: Callable[..., Any] = field(repr=False)
    result: type[BaseModel] | None = None
    risk: Risk = "write"
    group: str = "general"
    cost: int = 1
    description: str = ""
    explain_denial: bool = False
    unpack: bool = False
    prepare: Callable[..., Any] | None = field(default=None, repr=False)
    codes: tuple[str, ...] = ()
    fast_pairs: Callable[..., Any] | None = field(default=None, repr=False)
    direct: Callable[..., Any] | None = field(default=None, repr=False)
    pairs_direct: Callable[..., Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"binding name {self.name!r}: use 1-64 letters, digits or '_'")
        if self.risk not in _RISKS:
            raise ValueError(f"binding {self.name}: risk must be one of {', '.join(_RISKS)}")
        if not _GROUP.match(self.group):
            raise ValueError(f"binding {self.name}: group {self.group!r} is not a short label")
        if not isinstance(self.cost, int) or self.cost < 0:
            raise ValueError(f"binding {self.name}: cost must be a non-negative int")
        if self.prepare is not None and not callable(self.prepare):
            raise ValueError(f"binding {self.name}: prepare must be a function")
        if self.fast_pairs is not None and not callable(self.fast_pairs):
            raise ValueError(f"binding {self.name}: fast_pairs must be a function")
        if self.direct is not None and not (callable(self.direct) and self.unpack
                                            and self.prepare is None):
            raise ValueError(f"binding {self.name}: direct must be a function, of an "
                             "unpacking binding with no prepare")
        if self.pairs_direct is not None and not (callable(self.pairs_direct)
                                                  and self.fast_pairs is not None
                                                  and self.prepare is None):
            raise ValueError(f"binding {self.name}: pairs_direct must be a function, of a "
                             "binding with fast_pairs and no prepare")
        if isinstance(self.codes, str) or not all(
            isinstance(c, str) and _CODE.match(c) for c in self.codes
        ):
            raise ValueError(f"binding {self.name}: codes are words such as 'unknown_prefab' "
                             "or 'namespace:name'")
        object.__setattr__(self, "codes", tuple(self.codes))
        if not (isinstance(self.args, type) and issubclass(self.args, BaseModel)):
            raise ValueError(f"binding {self.name}: args must be a pydantic model class")
        if self.result is not None and not (
            isinstance(self.result, type) and issubclass(self.result, BaseModel)
        ):
            raise ValueError(f"binding {self.name}: result must be a pydantic model class")
        fields = tuple(self.args.model_fields)
        object.__setattr__(self, "accepts_functions", any(
            _takes_functions(f.annotation) for f in self.args.model_fields.values()
        ))
        object.__setattr__(self, "_fields", fields)
        object.__setattr__(self, "_field_set", frozenset(fields))
        object.__setattr__(self, "_validate", self.args.__pydantic_validator__.validate_python)
        object.__setattr__(self, "_positional", _positional_mapper(fields))
        # The field values of a model, in order, as a tuple (one C call, no frame).
        getter = operator.attrgetter(*fields) if fields else (lambda model: ())
        object.__setattr__(self, "_field_values",
                           (lambda model: (getter(model),)) if len(fields) == 1 else getter)
        # Used only by unpacking bindings: for a model it would have to build the instance.
        object.__setattr__(self, "_fast", fast_checker(self.args) if self.unpack else None)
        # A binding that prepares always takes the registry's full path: no lane.
        object.__setattr__(self, "_lane_factory", lane_factory(self.args)
                           if self.unpack and self.prepare is None else None)
        object.__setattr__(self, "_pairs_lane_factory", pairs_lane_factory(self.args)
                           if self.fast_pairs is not None and self.prepare is None else None)
        if self.result is not None:
            object.__setattr__(
                self, "_validate_result", self.result.__pydantic_validator__.validate_python
            )

    def validate(self, args: tuple[Any, ...]) -> BaseModel:
        """Map Lua arguments onto the model and validate them.

        Raises:
            BindingError: one line naming the argument and the problem.
        """
        fields: tuple[str, ...] = self._fields  # type: ignore[attr-defined]
        n = len(args)
        if n == len(fields) and (n != 1 or type(args[0]) is not dict) and None not in args:
            data: dict[str, Any] = self._positional(args)  # type: ignore[attr-defined]
        elif n == 1 and type(args[0]) is dict and (
            len(fields) != 1 or not args[0] or args[0].keys() <= self._field_set  # type: ignore[attr-defined]
        ):
            data = args[0]
            unknown = [k for k in data if k not in self._field_set]  # type: ignore[attr-defined]
            if unknown:
                # the same one whatever order the mod's table gave its keys in
                raise BindingError(f"argument {min(map(str, unknown))}: unexpected argument")
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
            raise BindingError(_explain(exc)) from None

    def values(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The validated field values, in the model's order (what an unpacking ``fn`` gets).

        Raises:
            BindingError: one line naming the argument and the problem.
        """
        fast = self._fast  # type: ignore[attr-defined]
        if fast is not None:
            checked = fast(args)
            if checked is not None:
                return checked  # type: ignore[no-any-return]
        model = self.validate(args)
        return self._field_values(model)  # type: ignore[attr-defined,no-any-return]

    def prepared(self, call: HostCall, model: BaseModel) -> Any:
        """What ``prepare`` binds for these arguments (``None`` without a ``prepare``).

        Raises:
            BindingError: ``prepare`` returned a :class:`~moonbox.bindings.Refusal`
                (``refused``, or the refusal's own code).
        """
        if self.prepare is None:
            return None
        if self.unpack:
            state = self.prepare(call, *self._field_values(model))  # type: ignore[attr-defined]
        else:
            state = self.prepare(call, model)
        if isinstance(state, Refusal):
            code = state.code or "refused"
            raise BindingError(f"{state.reason} [{code}]", reason=code)
        return state

    def invoke(self, call: HostCall, model: BaseModel, prepared: Any = None) -> Any:
        """Call ``fn`` with validated arguments, as a model or unpacked as ``unpack`` says
        (and, with ``prepare``, what it bound as the last argument)."""
        extra = () if self.prepare is None else (prepared,)
        if self.unpack:
            return self.fn(call, *self._field_values(model), *extra)  # type: ignore[attr-defined]
        return self.fn(call, model, *extra)

    def results(self, value: Any) -> tuple[Any, ...]:
        """What ``fn`` returned, as the tuple of plain values that crosses back to Lua.

        Raises:
            ValueError: the value does not match the result model (a host bug).
        """
        if self.result is not None:
            model = value if type(value) is self.result else self._validate_result(value)  # type: ignore[attr-defined]
            return (model.model_dump(mode="python"),)
        if value is None:
            return ()
        return value if type(value) is tuple else (value,)

    def __call__(self, call: HostCall, args: tuple[Any, ...]) -> tuple[Any, ...]:
        if self.prepare is not None:
            model = self.validate(args)
            return self.results(self.invoke(call, model, self.prepared(call, model)))
        if self.unpack:
            return self.results(self.fn(call, *self.values(args)))
        return self.results(self.fn(call, self.validate(args)))


def _positional_mapper(fields: tuple[str, ...]) -> Callable[[tuple[Any, ...]], dict[str, Any]]:
    # Maps a full tuple of positional arguments onto the fields: a dict display compiled
    # once per binding, several times faster than dict(zip(...)) on the call path. Field
    # names are Python identifiers (pydantic's rule), so their repr is a safe literal.
    if not all(name.isidentifier() for name in fields):
        return lambda args: dict(zip(fields, args, strict=True))
    items = ", ".join(f"{name!r}: args[{i}]" for i, name in enumerate(fields))
    return eval(f"lambda args: {{{items}}}", {})  # noqa: S307 - built from identifiers only


def _explain(exc: ValidationError) -> str:
    first = first_error(exc.errors())
    loc = ".".join(str(p) for p in first["loc"]) or "arguments"
    phrase = _PYDANTIC_PHRASES.get(first["type"], first["msg"])
    given = first.get("input")
    if first["type"] != "missing" and phrase.startswith("expected"):
        phrase = f"{phrase}, got {_lua_type(given)}"
    return f"argument {loc}: {phrase}"
