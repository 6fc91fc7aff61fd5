"""A writer process for the crash and concurrency tests; run as a script, not collected.

    python store_writer.py crash PATH SEED START COUNT MAX_REVISIONS
        Apply operations START..COUNT-1 of ``random_ops(SEED, COUNT)``, printing ``ready``
        once the store is open and the number of operations applied after each one commits.
    python store_writer.py concurrent PATH NAME N
        Print ``ready``, wait for a line on stdin, then record N successes of key ``shared``
        and of key ``own:NAME``, alternating.
    python store_writer.py hold PATH N
        In one write transaction, insert N revisions of 4 KiB (more than SQLite's page cache
        holds, so their pages go to the WAL before any commit), print ``inside`` and wait
        to be killed.
"""

from __future__ import annotations

import sys
import time

from store_model import apply_to_store, open_store, random_ops

from moonbox.store import Store


def crash(path: str, seed: int, start: int, count: int, max_revisions: int) -> None:
    ops = random_ops(seed, count)
    with open_store(path, max_revisions) as store:
        print("ready", flush=True)
        for i in range(start, count):
            apply_to_store(store, ops[i])
            print(i + 1, flush=True)


def concurrent(path: str, name: str, n: int) -> None:
    with Store(path, max_revisions=10 * n + 10) as store:
        print("ready", flush=True)
        sys.stdin.readline()
        for i in range(n):
            store.scripts.record_success("shared", f"{name}-{i}", author=name)
            store.scripts.record_success(f"own:{name}", f"{name}-{i}", author=name)
        print("done", flush=True)


def hold(path: str, n: int) -> None:
    store = Store(path)
    with store._transaction(write=True) as conn:
        conn.execute("UPDATE keys SET current = original")
        conn.executemany(
            "INSERT INTO revisions (kind, key, rev, content, hash, recorded_at, outcome) "
            "VALUES ('script', 'bulk', ?, ?, '-', 0, 'ok')",
            ((rev, f"{rev:04d}" * 1024) for rev in range(1, n + 1)))
        print("inside", flush=True)
        time.sleep(600)


if __name__ == "__main__":
    mode, path, *rest = sys.argv[1:]
    if mode == "crash":
        crash(path, *(int(a) for a in rest))
    elif mode == "hold":
        hold(path, int(rest[0]))
    else:
        concurrent(path, rest[0], int(rest[1]))
