"""A fast path for validating simple arguments: a checker compiled from the model.

pydantic validates a small model in about 1.5 µs and builds an instance while at it; a
binding called many times per tick cannot afford that. For a model whose fields are all
numbers, integers, strings, booleans or ``Any`` (with bounds and lengths at most), this
module compiles a function that takes a full tuple of positional arguments and returns the
values pydantic would produce, or ``None`` when it cannot vouch for them: a wrong type, a
value outside a bound, a missing argument, anything unusual. ``None`` sends the call down
the full pydantic path, which then decides and explains. The checker never refuses on its
own, so it cannot disagree with pydantic about what is valid; it only declines.
"""

from __future__ import annotations

import itertools
import types
import typing
from collections.abc import Callable
from typing import Any

import annotated_types
from pydantic import BaseModel, Strict
from pydantic.fields import FieldInfo
from pydantic.types import AllowInfNan

__all__ = ["fast_checker", "lane_factory", "next_call_id", "pairs_lane_factory"]

# Call ids: unique among every call of the process, so that calls from several registries
# (a game and its forks) never share one. Every path takes one, the lane included (not a
# binding's direct answer, which nothing observes: see Binding.direct).
next_call_id = itertools.count(1).__next__

Checker = Callable[[tuple[Any, ...]], "tuple[Any, ...] | None"]
LaneFactory = Callable[..., Callable[[Any, tuple[Any, ...]], "tuple[Any, ...] | None"]]

# Model settings that change nothing for exact scalar inputs.
_HARMLESS_CONFIG = frozenset({
    "extra", "title", "strict", "frozen", "json_schema_extra", "use_attribute_docstrings",
    "protected_namespaces", "arbitrary_types_allowed", "validate_default",
})
# An int crosses from Lua within this range; past it, leave the conversion to pydantic.
_INT_AS_FLOAT = 2**63

# Each template checks `{v}` whose type is `t`, converts it where pydantic would, and
# declines (returns None) otherwise. Strings may arrive as the bytes of a Lua string.
_TEMPLATES = {
    float: [
        "if t is int:",
        "    if not -INT_AS_FLOAT <= {v} <= INT_AS_FLOAT:",
        "        return None",
        "    {v} = float({v})",
        "elif t is not float:",
        "    return None",
    ],
    int: ["if t is not int:", "    return None"],
    bool: ["if t is not bool:", "    return None"],
    str: [
        "if t is bytes:",
        "    {v} = {v}.decode('utf-8', 'replace')",
        "elif t is not str:",
        "    return None",
    ],
    Any: [
        "if t is bytes:",
        "    {v} = {v}.decode('utf-8', 'replace')",
        "elif not (t is float or t is int or t is str or t is bool):",
        "    return None",
    ],
}


def _plain_model(model: type[BaseModel]) -> bool:
    # No setting or validator that could make pydantic's answer differ from the fields'.
    if not set(model.model_config) <= _HARMLESS_CONFIG:
        return False
    decorators = model.__pydantic_decorators__
    return not (decorators.validators or decorators.field_validators
                or decorators.root_validators or decorators.model_validators
                or model.__pydantic_post_init__ is not None)


def _checks(model: type[BaseModel]) -> tuple[list[str], list[str], dict[str, Any]] | None:
    # The lines that check every field (v0, v1, ...), or None if the model is not simple.
    if not _plain_model(model):
        return None
    constants: dict[str, Any] = {"INT_AS_FLOAT": _INT_AS_FLOAT, "float": float, "len": len,
                                 "type": type, "bytes": bytes}
    lines: list[str] = []
    names: list[str] = []
    for i, info in enumerate(model.model_fields.values()):
        body = _field_lines(f"v{i}", info, constants)
        if body is None:
            return None
        lines += body
        names.append(f"v{i}")
    if not names:
        return None
    return lines, names, constants


def _define(header: str, body: list[str], constants: dict[str, Any], name: str,
            model: type[BaseModel]) -> Any:
    # Constants and builtins arrive as defaults: locals are the fastest names to read.
    defaults = ", ".join(f"{c}={c}" for c in constants)
    source = "\n".join([header.format(defaults=defaults), *body])
    namespace = dict(constants)
    code = compile(source, f"<moonbox checker of {model.__name__}>", "exec")
    exec(code, namespace)  # noqa: S102 - built from fixed templates and constant names
    return namespace[name]


def fast_checker(model: type[BaseModel]) -> Checker | None:
    """A checker for ``model``'s fields in order, or ``None`` if the model is not simple.

    The checker takes a tuple of positional arguments and returns the validated values,
    or ``None`` to decline.
    """
    checks = _checks(model)
    if checks is None:
        return None
    lines, names, constants = checks
    body = [
        f"    if len(args) != {len(names)}:",
        "        return None",
        f"    {', '.join(names)}, = args",
        *(f"    {line}" for line in lines),
        f"    return ({', '.join(names)},)",
    ]
    return _define("def check(args, {defaults}):", body, constants, "check", model)  # type: ignore[no-any-return]


def lane_factory(model: type[BaseModel]) -> LaneFactory | None:
    """For an unpacking binding with a simple model: a function that makes a mod's lane.

    ``make(mf, registry, api, fn, results)`` returns ``lane(call, args)``: while
    ``mf._lane_version`` is the registry's version (``mf`` sets it when the binding is
    available with no hooks, no approval and no preparation, -1 otherwise), it checks the
    arguments as they come from Lua, calls ``fn`` and returns its result: one value as it
    is, else a tuple (through ``results``; with ``results`` None, for a binding with no
    result model, ``fn``'s tuple as it is and ``None`` as no value); or it returns
    ``None`` and the call takes the full path. The call gets its id (``call.call_id``) as
    on every path. If the registry changed while ``fn`` ran, ``mf._after_lane()`` raises
    when the call was aborted (its binding removed, its mod unloaded). One frame and no
    model between Lua and ``fn``.
    """
    checks = _checks(model)
    if checks is None:
        return None
    lines, names, constants = checks
    constants = {**constants, "next_call_id": next_call_id}
    body = [
        "    def lane(call, args):",
        "        version = registry._version",
        "        if mf._lane_version != version:",
        "            return None",
        f"        if len(args) != {len(names)}:",
        "            return None",
        f"        {', '.join(names)}, = args",
        *(f"        {line}" for line in lines),
        "        call.mod = api",
        "        call.call_id = next_call_id()",
        f"        result = fn(call, {', '.join(names)})",
        "        if registry._version != version:",
        "            mf._after_lane(call)",
    ]
    body = _either(body, ["        return () if result is None else result"])
    return _define("def make(mf, registry, api, fn, results, {defaults}):", body, constants,  # type: ignore[no-any-return]
                   "make", model)


def pairs_lane_factory(model: type[BaseModel]) -> LaneFactory | None:
    """For a binding called as ``name(a, {k = v, ...})`` with a flat table, whose model is
    a simple first field and a nested model of optional fields: a function that makes a
    mod's lane for such calls, or ``None`` if the model is not of that shape.

    ``make(mf, registry, api, fast, results)`` returns ``lane(call, args)``, which takes
    the arguments as the sandbox hands a flat table over (``a, n, k1, v1, ...``, strings
    as bytes). Under the same registry version test as :func:`lane_factory`'s lanes, it
    checks ``a`` as the first field and each pair as the nested model's field of that
    name, and calls ``fast(call, a, fields)`` with the checked values (a dict, keys
    decoded). ``fast`` returns the result (converted as :func:`lane_factory`'s lanes
    convert ``fn``'s), or ``None`` to decline before it changed anything. Any key that
    is not a simple field of the nested model (a table, a list, an unknown name), any
    value the field's check cannot vouch for, declines too: the call then takes the full
    path, where pydantic decides and explains.
    """
    if not _plain_model(model) or len(model.model_fields) != 2:
        return None
    first, second = model.model_fields.values()
    nested = second.annotation
    if not (isinstance(nested, type) and issubclass(nested, BaseModel)
            and _plain_model(nested)) or second.alias is not None \
            or second.validation_alias is not None:
        return None
    constants: dict[str, Any] = {"INT_AS_FLOAT": _INT_AS_FLOAT, "float": float, "len": len,
                                 "next_call_id": next_call_id,
                                 "type": type, "bytes": bytes, "range": range}
    head = _field_lines("v0", first, constants)
    if head is None:
        return None
    # The nested fields by the lines that check them (all numbers check alike): each
    # group a table from the key as Lua gives it to the field's name.
    groups: dict[tuple[str, ...], dict[bytes, str]] = {}
    for name, info in nested.model_fields.items():
        if info.alias is not None or info.validation_alias is not None:
            continue
        # `X | None` keeps X's own constraints inside (Annotated[float, Strict()]): a
        # value in a table is never nil, so the field checks as X would.
        inner = _base(info.annotation)
        if inner is None:
            continue
        lines = _field_lines("v", FieldInfo.from_annotation(inner), constants)
        if lines is None:
            continue  # not simple: a call that sets it takes the full path
        groups.setdefault(tuple(lines), {})[name.encode()] = name
    if not groups:
        return None
    pairs: list[str] = []
    indent = ""
    for g, (lines, keys) in enumerate(groups.items()):
        constants[f"G{g}"] = keys
        pairs += [f"{indent}name = G{g}.get(k)", f"{indent}if name is not None:",
                  *(f"{indent}    {line}" for line in lines), f"{indent}else:"]
        indent += "    "
    pairs.append(f"{indent}return None")
    body = [
        "    def lane(call, args):",
        "        version = registry._version",
        "        if mf._lane_version != version:",
        "            return None",
        "        if len(args) < 2:",
        "            return None",
        "        v0 = args[0]",
        *(f"        {line}" for line in head),
        "        n = args[1]",
        "        if type(n) is not int or len(args) != 2 + 2 * n:",
        "            return None",
        "        fields = {}",
        "        for i in range(2, 2 + 2 * n, 2):",
        "            k = args[i]",
        "            v = args[i + 1]",
        *(f"            {line}" for line in pairs),
        "            fields[name] = v",
        "        call.mod = api",
        "        call.call_id = next_call_id()",
        "        result = fast(call, v0, fields)",
        "        if result is None:",
        "            return None",
        "        if registry._version != version:",
        "            mf._after_lane(call)",
    ]
    body = _either(body, ["        return result"])
    return _define("def make(mf, registry, api, fast, results, {defaults}):", body,  # type: ignore[no-any-return]
                   constants, "make", model)


def _either(body: list[str], tail: list[str]) -> list[str]:
    # The lane twice, chosen when it is made: with ``results`` None (a binding with no
    # result model) the tail alone answers, a tuple as it is (what ``results`` would
    # give back); otherwise every tuple and every value of a result model goes through
    # ``results``.
    converted = ["        if type(result) is tuple or mf._has_result:",
                 "            return results(result)", *tail]
    return ["    if results is None:", *(f"    {line}" for line in body + tail),
            "        return lane", *body, *converted, "    return lane"]


def _base(annotation: Any) -> Any:
    # `X | None` and Optional[X] check as X: a None argument always takes the full path.
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
        return None
    return annotation


def _field_lines(v: str, info: FieldInfo, constants: dict[str, Any]) -> list[str] | None:
    if info.alias is not None or info.validation_alias is not None:
        return None
    base = _base(info.annotation)
    if base not in _TEMPLATES:
        return None
    lines = [f"t = type({v})", *(line.format(v=v) for line in _TEMPLATES[base])]
    number = base in (float, int)
    bounds = ((annotated_types.Ge, "ge", ">="), (annotated_types.Gt, "gt", ">"),
              (annotated_types.Le, "le", "<="), (annotated_types.Lt, "lt", "<"))
    for meta in info.metadata:
        name = f"c{len(constants)}"
        if isinstance(meta, Strict):
            continue  # exact types are strict already
        bound = next(((attr, op) for kind, attr, op in bounds if isinstance(meta, kind)), None)
        if number and bound is not None:
            value = getattr(meta, bound[0])
            if base is float:
                # pydantic compares a float field with its bound as doubles: so does the
                # lane (an int bound past 2**53 is not exact as a double).
                try:
                    value = float(value)
                except (OverflowError, TypeError, ValueError):
                    return None
            constants[name] = value
            test = f"{v} {bound[1]} {name}"
        elif base is str and isinstance(meta, annotated_types.MinLen):
            constants[name] = meta.min_length
            test = f"len({v}) >= {name}"
        elif base is str and isinstance(meta, annotated_types.MaxLen):
            constants[name] = meta.max_length
            test = f"len({v}) <= {name}"
        elif base is float and isinstance(meta, AllowInfNan):
            if meta.allow_inf_nan:
                continue  # the default
            test = f"{v} - {v} == 0"  # finite: inf - inf and nan - nan are nan
        else:
            return None
        lines += [f"if not ({test}):", "    return None"]
    return lines
