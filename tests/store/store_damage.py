"""Damaged store files for the tests: a filled store, and ways to break it.

Everything is deterministic: the same operations and clock give the same file, page for
page, and the bytes written over it come from a seeded generator.
"""

from __future__ import annotations

import random
from pathlib import Path

from pydantic import BaseModel

from moonbox.store import Store

KEYS = 400
"""Script keys in :func:`fill`'s store (besides 20 data keys)."""
PAGE = 4096
"""SQLite's page size, which the store keeps."""


class Balance(BaseModel):
    hp: int


def source(i: int, rev: int) -> str:
    """The source of revision ``rev`` of key ``mod{i:04d}:main``."""
    return f"-- mod{i:04d} revision {rev}\nlocal wave = {rev}\n" + "spawn('goblin', wave)\n" * 4


def fill(path: Path, keys: int = KEYS) -> None:
    """``keys`` script keys of three revisions (the middle one failed), and 20 data keys;
    closed, so that every page is in the file."""
    with Store(path, durable=False, clock=lambda: 1_700_000_000.0) as s:
        for i in range(keys):
            key = f"mod{i:04d}:main"
            s.scripts.record_success(key, source(i, 1), author="human")
            s.scripts.record_failure(key, source(i, 2), error="main.lua:2: boom")
            s.scripts.record_success(key, source(i, 3), role="programmer")
        for i in range(20):
            s.data.register(f"balance{i}", Balance, {"hp": 1})
            s.data.record_success(f"balance{i}", {"hp": i})


def overwrite(path: Path, offset: int, count: int, seed: int = 0) -> None:
    """Write ``count`` seeded random bytes over ``path`` at ``offset``."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(random.Random(seed).randbytes(count))


def middle_page(path: Path) -> int:
    """The offset of the page in the middle of the file."""
    return (path.stat().st_size // PAGE // 2) * PAGE


def files(path: Path) -> dict[str, bytes]:
    """The store file and its WAL, as bytes (an empty WAL, which a read-only connection
    creates, is as good as none)."""
    out: dict[str, bytes] = {}
    for suffix in ("", "-wal"):
        p = Path(f"{path}{suffix}")
        out[suffix or "db"] = p.read_bytes() if p.exists() else b""
    return out
