"""Values crossing between Lua and Python: plain data only, with limits.

Lua → Python: the prelude checks the value tree first with raw access (types, cycles,
depth, item count, string bytes), then :func:`to_python` copies it, each table through the
prelude's ``pairs_of`` (a walk by slot index, linear whatever the keys; the host's own
``lua_next`` traversal is quadratic on number keys that share a hash chain). No metamethod
of the mod runs on the host side.

Python → Lua: :func:`to_lua` builds fresh Lua tables from plain Python data; no Python
object ever reaches Lua.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .._errors import HostError
from ._lua import lua

__all__ = ["ValueLimits", "format_value", "table_pairs", "to_lua", "to_python"]


class ValueLimits(BaseModel):
    """Limits on a value crossing from Lua to Python (results, yields, binding arguments).

    Attributes:
        max_depth: deepest table nesting.
        max_items: table entries in all.
        max_bytes: string bytes in all (keys and values).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_depth: int = Field(default=32, ge=1, le=200)
    max_items: int = Field(default=100_000, ge=1)
    max_bytes: int = Field(default=16 << 20, ge=1)


def encode_text(text: str) -> bytes:
    """UTF-8 bytes for Lua: undecodable bytes that came from Lua go back as they were; a
    lone surrogate, which has no UTF-8 form, becomes '?'."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def table_pairs(pairs_of: Any, pairs_slice: Any, slice_size: int) -> Any:
    """The function that gives a Lua table's pairs as a flat list ``[k1, v1, k2, v2, ...]``,
    through the prelude's ``pairs_of`` and ``pairs_slice`` of its runtime."""

    def pairs(table: Any) -> list[Any]:
        res = pairs_of(table)
        if type(res) is tuple:
            return list(res[1:])
        out: list[Any] = []
        i = 1
        while i <= res:
            j = min(i + slice_size - 1, res)
            out.extend(pairs_slice(i, j, j == res))
            i = j + 1
        return out

    return pairs


def to_python(value: Any, pairs: Any, depth: int = 0) -> Any:
    """Copy a checked Lua value into plain Python data.

    ``pairs`` is the sandbox's :func:`table_pairs` of the value's runtime. Tables whose
    keys are exactly ``1..n`` become lists, other tables dicts. Strings are decoded as
    UTF-8 (invalid bytes become U+FFFD). Functions, coroutines and userdata (only reachable
    in lenient checks) become ``"<function>"``-style placeholders.
    """
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, bytes):
        return _decode(value)
    kind = lua.lua_type(value)
    if kind != "table":
        return f"<{kind}>"
    if depth > 200:  # the prelude's check bounds depth far below this
        raise HostError("value nested too deeply")
    flat = pairs(value)
    items = list(zip(flat[::2], flat[1::2], strict=True))
    n = len(items)
    if n and all(type(k) is int and 1 <= k <= n for k, _ in items):
        # Keys are exactly 1..n (n distinct ints in that range), in whatever order lua_next
        # gave them.
        listed: list[Any] = [None] * n
        for k, v in items:
            listed[k - 1] = to_python(v, pairs, depth + 1)
        return listed
    out: dict[Any, Any] = {}
    for k, v in items:
        key = _decode(k) if isinstance(k, bytes) else k
        out[key] = to_python(v, pairs, depth + 1)
    return out


def to_lua(runtime: Any, value: Any, depth: int = 0) -> Any:
    """Convert plain Python data into Lua values (fresh tables for lists and dicts).

    Raises:
        HostError: the value is not plain data (a host bug: bindings return plain data).
    """
    if value is None or isinstance(value, (bool, float, bytes)):
        return value
    if isinstance(value, int):
        return value if -(1 << 53) <= value <= 1 << 53 else float(value)
    if isinstance(value, str):
        return encode_text(value)
    if depth > 64:
        raise HostError("value nested too deeply to cross to Lua")
    if isinstance(value, (list, tuple)):
        table = runtime.table()
        for i, item in enumerate(value, 1):
            table[i] = to_lua(runtime, item, depth + 1)
        return table
    if isinstance(value, dict):
        table = runtime.table()
        for k, item in value.items():
            if isinstance(k, str):
                k = encode_text(k)
            elif not isinstance(k, (int, float)) or isinstance(k, bool) or k != k:
                raise HostError(f"dict key {k!r} cannot cross to Lua")
            table[k] = to_lua(runtime, item, depth + 1)
        return table
    raise HostError(f"a {type(value).__name__} cannot cross to Lua (plain data only)")


def format_value(value: Any, limit: int = 200) -> str:
    """A short, readable rendering of plain data, for reports and terminal output."""
    text = _format(value, 0)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _format(value: Any, depth: int) -> str:
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return repr(value) if depth else value
    if depth > 8:
        return "{...}"
    if isinstance(value, list):
        return "{" + ", ".join(_format(v, depth + 1) for v in value[:50]) + (
            ", ...}" if len(value) > 50 else "}"
        )
    if isinstance(value, dict):
        parts = [f"{k}={_format(v, depth + 1)}" for k, v in list(value.items())[:50]]
        return "{" + ", ".join(parts) + (", ...}" if len(value) > 50 else "}")
    return str(value)
