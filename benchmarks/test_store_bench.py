"""The versions store: record and read on the default SQLite store, and a large store.

Targets (issue 5): record a revision <= 2 ms, read current <= 0.2 ms; with 10,000 keys x
50 revisions, list, diff and rollback each under a second. Opening runs the integrity
check: its cost on 10,000 revisions, and on the large store with and without its bound. These are measurements, not
tests: run ``pytest benchmarks/test_store_bench.py --benchmark-only``.
"""

from __future__ import annotations

import hashlib
import itertools
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from moonbox.store import CHECK_MAX_BYTES, Store

KEYS, REVISIONS = 10_000, 50
SOURCE = "-- {key}: revision {rev}\nlocal wave = {rev}\nlocal hp = {hp}\n" \
         "on('tick', function(t)\n  if t % wave == 0 then spawn('goblin', hp) end\nend\n"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "bench.db") as s:
        s.scripts.record_success("waves:main", SOURCE.format(key="waves:main", rev=0, hp=1))
        yield s


@pytest.mark.parametrize("durable", [True, False], ids=["durable", "not-durable"])
def test_record_revision(benchmark: Any, tmp_path: Path, durable: bool) -> None:
    """One record_success on a key at its retention limit (so each record also evicts)."""
    benchmark.group = "store: record a revision (target <= 2 ms)"
    with Store(tmp_path / "bench.db", durable=durable) as s:
        for rev in range(s.max_revisions):
            s.scripts.record_success("waves:main", SOURCE.format(key="waves:main", rev=rev, hp=1))
        counter = itertools.count()

        def record() -> None:
            n = next(counter)
            s.scripts.record_success("waves:main", SOURCE.format(key="waves:main", rev=n, hp=n))

        benchmark(record)
        assert s.scripts.info("waves:main").revisions == s.max_revisions


def test_read_current(benchmark: Any, store: Store) -> None:
    benchmark.group = "store: read current (target <= 0.2 ms)"
    r = benchmark(store.scripts.current, "waves:main")
    assert r.rev == 1


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """10,000 script keys x 50 revisions, written with executemany in one transaction."""
    path = tmp_path_factory.mktemp("big") / "big.db"
    Store(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")

    def rows() -> Iterator[tuple[Any, ...]]:
        for k in range(KEYS):
            key = f"mod{k:05d}:main"
            for rev in range(1, REVISIONS + 1):
                text = SOURCE.format(key=key, rev=rev, hp=rev * 7 % 13)
                yield ("script", key, rev, text, hashlib.sha256(text.encode()).hexdigest(),
                       1.7e9 + rev, None, None, None, "ok", None)

    conn.executemany(
        "INSERT INTO keys (kind, key, original, current, next_rev, updated_at) "
        "VALUES ('script', ?, 1, ?, ?, 1.7e9)",
        ((f"mod{k:05d}:main", REVISIONS, REVISIONS + 1) for k in range(KEYS)))
    conn.executemany(
        "INSERT INTO revisions (kind, key, rev, content, hash, recorded_at, author, role, "
        "trace_id, outcome, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows())
    conn.execute("COMMIT")
    conn.close()
    with Store(path) as s:
        yield s


def test_big_list(benchmark: Any, big: Store) -> None:
    benchmark.group = "store: 10,000 keys x 50 revisions (target < 1 s each)"
    infos = benchmark.pedantic(big.scripts.keys, rounds=5, iterations=1)
    assert len(infos) == KEYS and infos[0].revisions == REVISIONS


def test_big_diff(benchmark: Any, big: Store) -> None:
    benchmark.group = "store: 10,000 keys x 50 revisions (target < 1 s each)"
    text = benchmark(big.scripts.diff, "mod05000:main", 1, 50)
    assert "+local wave = 50" in text


def test_big_rollback(benchmark: Any, big: Store) -> None:
    benchmark.group = "store: 10,000 keys x 50 revisions (target < 1 s each)"
    keys = itertools.cycle(f"mod{k:05d}:main" for k in range(0, KEYS, 97))
    r = benchmark(lambda: big.scripts.rollback(next(keys), 25))
    assert r.rev == 25


def test_big_history(benchmark: Any, big: Store) -> None:
    benchmark.group = "store: 10,000 keys x 50 revisions (target < 1 s each)"
    history = benchmark(big.scripts.history, "mod09999:main")
    assert len(history) == REVISIONS


def test_big_reset_all(benchmark: Any, big: Store) -> None:
    benchmark.group = "store: 10,000 keys x 50 revisions (target < 1 s each)"

    def reset_all() -> int:
        big.scripts.reset_all()
        # Move every key off its original again, so each round resets 10,000 keys.
        return big._query("SELECT COUNT(*) FROM keys", ())[0]

    def setup() -> None:
        with big._transaction(write=True) as conn:
            conn.execute("UPDATE keys SET current = next_rev - 1")

    assert benchmark.pedantic(reset_all, setup=setup, rounds=3, iterations=1) == KEYS


def _fill_raw(path: Path, keys: int, revisions: int) -> None:
    """``keys`` script keys x ``revisions`` revisions, written in one transaction."""
    Store(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")

    def rows() -> Iterator[tuple[Any, ...]]:
        for k in range(keys):
            key = f"mod{k:05d}:main"
            for rev in range(1, revisions + 1):
                text = SOURCE.format(key=key, rev=rev, hp=rev)
                yield ("script", key, rev, text, hashlib.sha256(text.encode()).hexdigest(),
                       1.7e9 + rev)

    conn.executemany(
        "INSERT INTO keys (kind, key, original, current, next_rev, updated_at) "
        "VALUES ('script', ?, 1, ?, ?, 1.7e9)",
        ((f"mod{k:05d}:main", revisions, revisions + 1) for k in range(keys)))
    conn.executemany(
        "INSERT INTO revisions (kind, key, rev, content, hash, recorded_at, author, role, "
        "trace_id, outcome, error) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, NULL, 'ok', NULL)",
        rows())
    conn.execute("COMMIT")
    conn.close()


def test_open_checks_10k_revisions(benchmark: Any, tmp_path: Path) -> None:
    """Opening a store of 1,000 keys x 10 revisions (about 3 MB): the whole quick check."""
    benchmark.group = "store: open, with the integrity check"
    path = tmp_path / "10k.db"
    _fill_raw(path, 1_000, 10)

    def open_close() -> str:
        with Store(path) as s:
            return s.check_scope

    assert benchmark.pedantic(open_close, rounds=10, iterations=1) == "file"


@pytest.mark.parametrize("check_max_bytes", [CHECK_MAX_BYTES, None], ids=["keys-only", "file"])
def test_big_open(benchmark: Any, big: Store, check_max_bytes: int | None) -> None:
    """Opening the 10,000 x 50 store (about 150 MB): above CHECK_MAX_BYTES only the keys
    table is checked on open; ``None`` checks every page (what ``Store.check`` does)."""
    benchmark.group = "store: open, with the integrity check"

    def open_close() -> str:
        with Store(big.path, check_max_bytes=check_max_bytes) as s:
            assert s.corruption is None
            return s.check_scope

    scope = benchmark.pedantic(open_close, rounds=3, iterations=1)
    assert scope == ("keys" if check_max_bytes else "file")
