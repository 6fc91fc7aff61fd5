"""One `next` over a long run of empty slots, at the default heap cap (64 MiB).

LuaJIT's `next` scans a table slot by slot for the next value: `next(t)` on a table whose
only value sits after millions of empty slots is one VM operation that reads them all. No
check interrupts it; the heap cap bounds it, and docs/threat-model.md gives the figures
these measure (each round is CALLS calls: divide by it).
"""

from __future__ import annotations

from typing import Any

import pytest

from moonbox import Budget, Sandbox

CALLS = 10

# The largest parts the default cap holds: an array part of 2^22 slots (its next doubling
# needs 64 MiB more while the old part is still held), a hash part of 2^20 nodes, or the
# array part with 2^19 nodes after it.
TABLES = {
    "array-2^22": """local t = {} for i = 1, 2^22 do t[i] = true end
        for i = 1, 2^22 - 1 do t[i] = nil end T = t""",
    "hash-2^20": """local t = {} for i = 1, 2^20 do t[-i] = true end
        for i = 1, 2^20 - 1 do t[-i] = nil end T = t""",
    "array-2^22-hash-2^19": """local t = {} for i = 1, 2^22 do t[i] = true end
        for i = 1, 2^19 do t[-i] = true end
        for i = 1, 2^22 do t[i] = nil end for i = 1, 2^19 - 1 do t[-i] = nil end T = t""",
}


@pytest.mark.parametrize("table", sorted(TABLES))
@pytest.mark.parametrize("jit", [True, False], ids=["jit", "hook"])
def test_next_over_empty_slots(benchmark: Any, jit: bool, table: str) -> None:
    """CALLS calls of `next(t)` from the start of the table, each scanning every empty slot."""
    benchmark.group = f"{CALLS} calls of next(t) over empty slots"
    with Sandbox(Budget(steps=1 << 40, wall_s=60), jit=jit) as sb:
        assert sb.run(TABLES[table]).status == "done"
        calls = sb.load(f"local t, k = T for _ = 1, {CALLS} do k = next(t) end return k")
        out = benchmark(sb.run, calls)
        assert out.status == "done" and out.values[0] is not None
