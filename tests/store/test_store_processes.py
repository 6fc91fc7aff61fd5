"""Crash safety and concurrent writers, with real processes.

A writer killed with SIGKILL at a random moment leaves the store as it was after its last
acknowledged operation or after the one in flight, never anything else; two processes
recording into the same store at once lose nothing.
"""

from __future__ import annotations

import copy
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from store_model import Model, check_invariants, open_store, snapshot

from moonbox.store import Store

WRITER = str(Path(__file__).with_name("store_writer.py"))
MAX_REVISIONS = 5

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")


def _integrity(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


def test_killed_writer_leaves_previous_or_new_state(tmp_path):
    path = tmp_path / "game.db"
    seed, count, rounds = 2024, 50_000, 12
    from store_model import random_ops

    ops = random_ops(seed, count)
    model = Model(MAX_REVISIONS)
    applied = 0
    rng = random.Random(99)
    in_flight_committed = 0
    for _ in range(rounds):
        proc = subprocess.Popen(
            [sys.executable, WRITER, "crash", str(path), str(seed), str(applied), str(count),
             str(MAX_REVISIONS)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"
            time.sleep(rng.uniform(0.0, 0.25))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            lines = proc.stdout.read().split()
        finally:
            if proc.poll() is None:  # pragma: no cover - only if the wait above failed
                proc.kill()
                proc.wait()
        assert proc.returncode == -signal.SIGKILL
        acked = int(lines[-1]) if lines else applied
        assert applied <= acked < count
        for op in ops[applied:acked]:
            model.apply(op)
        _integrity(path)
        with open_store(path, MAX_REVISIONS) as store:
            assert store.corruption is None, store.corruption  # a crash is not damage
            state = snapshot(store)
            check_invariants(store)
        if state != model.snapshot():
            # The operation in flight committed before the kill, its "done" line did not
            # get out: the state must be exactly the one after it.
            after = copy.deepcopy(model)
            after.apply(ops[acked])
            assert state == after.snapshot(), f"torn state after operation {acked}"
            model, acked = after, acked + 1
            in_flight_committed += 1
        applied = acked
    assert applied > 0
    print(f"{applied} operations over {rounds} kills, {in_flight_committed} in flight committed")


def test_two_processes_lose_no_update(tmp_path):
    path = tmp_path / "game.db"
    n = 120
    Store(path).close()
    procs = [
        subprocess.Popen([sys.executable, WRITER, "concurrent", str(path), name, str(n)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for name in ("a", "b")
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        for p in procs:  # start both as close together as we can
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            assert p.wait(timeout=120) == 0
    finally:
        for p in procs:
            if p.poll() is None:  # pragma: no cover
                p.kill()
                p.wait()
    with Store(path, max_revisions=10 * n + 10) as store:
        shared = store.scripts.history("shared")
        assert sorted(r.rev for r in shared) == list(range(1, 2 * n + 1))
        assert {r.content for r in shared} == {f"{name}-{i}" for name in "ab" for i in range(n)}
        # Each writer's own records arrive in its order.
        for name in "ab":
            mine = [r.content for r in reversed(shared) if r.author == name]
            assert mine == [f"{name}-{i}" for i in range(n)]
            own = store.scripts.history(f"own:{name}")
            assert [r.rev for r in own] == list(range(n, 0, -1))
        check_invariants(store)
    _integrity(path)


def test_a_writer_killed_mid_transaction_leaves_a_sound_store(tmp_path):
    """Killed while its transaction's pages are in the WAL, uncommitted: the next open
    finds nothing wrong, the transaction is gone, and writing goes on."""
    path = tmp_path / "game.db"
    with Store(path) as store:
        store.scripts.record_success("waves:main", "return 1\n")
        store.scripts.record_success("waves:main", "return 2\n")
        before = store.export()
    proc = subprocess.Popen([sys.executable, WRITER, "hold", str(path), "1000"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "inside\n"
        assert Path(f"{path}-wal").stat().st_size > 2**20  # uncommitted frames
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:  # pragma: no cover - only if the wait above failed
            proc.kill()
            proc.wait()
    with Store(path) as store:
        assert store.corruption is None and store.check() is None
        assert store.export()["keys"] == before["keys"]
        assert store.scripts.record_success("waves:main", "return 3\n").rev == 3
    _integrity(path)
