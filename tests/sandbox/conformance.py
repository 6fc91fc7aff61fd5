"""The conformance harness: one Lua program run in a plain LuaJIT runtime and in a sandbox.

A case is a Lua chunk body. The harness runs it, on both sides, as the body of a function
called through ``pcall`` in a chunk named ``=x``, with its first line kept as line 1, and
the chunk returns one string: how many values came back and each of them written out
(strings quoted with every non-ASCII byte escaped, numbers with 17 digits, tables with
their keys sorted, functions and coroutines by their type). Two sides agree when the
strings are equal: the same values, the same error messages, the same positions.

The plain side is ``lupa.luajit21.LuaRuntime()`` as it comes, one fresh runtime a case.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lupa import luajit21

from moonbox import Budget, Sandbox, default_bindings

__all__ = ["Case", "normalize_addresses", "run_plain", "run_sandbox", "wrap"]

# The harness's own code, on the case's first line so the case keeps its line numbers.
# `show(v)` is there for cases that want a table written out in the middle of their work.
_PRELUDE = (
    "local show do "
    "local function q(s) return (string.gsub(string.format('%q', s), '[\\128-\\255]', "
    "function(c) return '\\\\' .. string.byte(c) end)) end "
    "local function key_less(a, b) local ta, tb = type(a), type(b) "
    "if ta ~= tb then return ta < tb end "
    "if ta == 'number' or ta == 'string' then return a < b end return false end "
    "local function ser(v, d) local t = type(v) "
    "if t == 'string' then return q(v) "
    "elseif t == 'number' then if v ~= v then return 'nan' end "
    "return string.format('%.17g', v) "
    "elseif t == 'table' then if d > 3 then return '{...}' end "
    "local keys = {} for k in next, v do keys[#keys + 1] = k end "
    "table.sort(keys, key_less) local out = {} "
    "for i = 1, #keys do local k = keys[i] "
    "out[i] = '[' .. ser(k, d + 1) .. ']=' .. ser(rawget(v, k), d + 1) end "
    "return '{' .. table.concat(out, ',') .. '}' "
    "elseif t == 'nil' or t == 'boolean' then return tostring(v) "
    "else return t end end "
    "show = function(...) local n = select('#', ...) local out = {} "
    "for i = 1, n do out[i] = ser((select(i, ...)), 0) end "
    "return n .. ': ' .. table.concat(out, ' ') end end "
)


def wrap(source: str) -> str:
    """The chunk both sides run for a case body."""
    return _PRELUDE + "return show(pcall(function(...) " + source + "\nend))"


@dataclass(frozen=True)
class Case:
    """One conformance case: a name (area.what) and a Lua chunk body."""

    name: str
    source: str


_ADDRESS = re.compile(r"0x[0-9a-f]+")


def normalize_addresses(text: str) -> str:
    """Addresses (plain LuaJIT) and ids (a sandbox) written the same way."""
    return _ADDRESS.sub("0xADDR", text)


def run_plain(source: str) -> str:
    """The case's result string in a plain LuaJIT runtime."""
    rt = luajit21.LuaRuntime(encoding=None)
    run = rt.eval(
        "function(src) local f, err = load(src, '=x') "
        "if not f then return 'syntax: ' .. err end return f() end"
    )
    result = run(wrap(source).encode())
    return result.decode("ascii") if isinstance(result, bytes) else repr(result)


def run_sandbox(source: str, *, jit: bool, budget: Budget | None = None, **kwargs) -> str:
    """The case's result string in a fresh sandbox with the default bindings (so `print`
    is there), or its error if it did not finish."""
    kwargs.setdefault("host_functions", default_bindings())
    with Sandbox(budget, jit=jit, **kwargs) as sb:
        out = sb.run(wrap(source), "=x")
    if out.error is not None:
        return f"{out.status}: {out.error}"
    assert len(out.values) == 1, out.values
    value = out.values[0]
    return value if isinstance(value, str) else repr(value)
