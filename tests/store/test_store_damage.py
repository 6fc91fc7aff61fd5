"""Damaged store files: every failure is a structured StoreError, nothing is written to a
damaged file, and an export salvages what can still be read.

Each file here is damaged on purpose: a page overwritten in the middle, a file cut short,
a destroyed header, garbage, an empty file, a directory, a damaged write-ahead log, content
bytes changed under their hash.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from pathlib import Path

import pytest
from store_damage import KEYS, PAGE, files, fill, middle_page, overwrite, source

from moonbox.store import Store, StoreCorrupt, StoreError
from moonbox.store._errors import FINDING_MAX_CHARS, FINDINGS_MAX


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    path = tmp_path / "game.db"
    fill(path)
    assert not Path(f"{path}-wal").exists()  # closed: everything is in the file
    return path


def _check_error(exc: StoreError, path: Path) -> None:
    assert exc.code == "corrupt_store" and isinstance(exc, StoreCorrupt)
    assert exc.path == str(path)
    assert 1 <= len(exc.findings) <= FINDINGS_MAX
    assert all(len(f) <= FINDING_MAX_CHARS and "\n" not in f for f in exc.findings)
    text = str(exc)
    assert text.startswith(f"the versions store {path} is damaged (")
    assert "moonbox versions export" in text and "aside" in text and "new store" in text
    assert exc.to_dict()["path"] == str(path) and exc.to_dict()["findings"] == list(exc.findings)


WRITES = {
    "record_success": lambda s: s.scripts.record_success("mod0001:main", "return 9\n"),
    "record_new_key": lambda s: s.scripts.record_success("new:main", "return 9\n"),
    "record_failure": lambda s: s.scripts.record_failure("mod0001:main", "x(", error="e"),
    "rollback": lambda s: s.scripts.rollback("mod0001:main", 1),
    "reset": lambda s: s.scripts.reset("mod0001:main"),
    "reset_all": lambda s: s.reset_all(),
    "retention": lambda s: s.scripts.set_retention("mod0001:main", 3),
    "import": lambda s: s.import_data({"format": "moonbox-versions", "format_version": 1,
                                       "exported_at_s": 1.0, "keys": []}),
}


def _reads(store: Store) -> list[object]:
    """Every read of the public API over every key; each a result or a StoreError."""
    out: list[object] = []

    def attempt(f, *args):
        try:
            out.append(f(*args))
        except StoreError as exc:
            assert exc.code in ("corrupt_store", "unknown_key", "unknown_revision"), exc
            out.append(exc)

    attempt(store.keys)
    attempt(store.scripts.keys)
    attempt(store.data.keys)
    for i in range(0, KEYS, 7):
        key = f"mod{i:04d}:main"
        attempt(store.scripts.current, key)
        attempt(store.scripts.revision, key, 2)
        attempt(store.scripts.original, key)
        attempt(store.scripts.history, key)
        attempt(store.scripts.info, key)
        attempt(store.scripts.diff, key, 1)
        attempt(store.scripts.__contains__, key)
    attempt(store.data.current, "balance3")
    return out


# --- a page overwritten in the middle of the file ----------------------------------------

def test_a_page_overwritten_in_the_middle_opens_read_only(filled):
    overwrite(filled, middle_page(filled), PAGE)
    with Store(filled) as store:
        assert store.read_only and store.corruption is not None
        _check_error(store.corruption, filled)
        assert "found while checking it" in str(store.corruption)
        assert "damaged" in repr(store)
        results = _reads(store)
        assert any(not isinstance(r, StoreError) for r in results)  # reads go on


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_damaged_store_refuses_every_write_and_writes_nothing(filled, write):
    overwrite(filled, middle_page(filled), PAGE)
    before = files(filled)
    with Store(filled) as store:
        with pytest.raises(StoreCorrupt) as exc:
            WRITES[write](store)
        _check_error(exc.value, filled)
        assert "nothing was written" in str(exc.value)
    assert files(filled) == before


def test_export_salvages_every_readable_key_and_names_what_was_lost(filled, tmp_path):
    overwrite(filled, middle_page(filled), PAGE)
    with Store(filled) as store:
        data = store.export()
        out = tmp_path / "salvage.json"
        assert store.export_json(out, data=data) == len(data["keys"])
    exported = {(k["kind"], k["key"]): k for k in data["keys"]}
    lost = data["lost"]
    assert lost, "one page of the file is gone: something must be lost"
    scripts = [k for kind, k in exported if kind == "script"]
    assert len(scripts) >= 0.9 * KEYS
    lost_keys = {(e["kind"], e["key"]) for e in lost if e["what"] == "key"}
    for i in range(KEYS):
        name = ("script", f"mod{i:04d}:main")
        assert (name in exported) != (name in lost_keys), name
    for (kind, key), entry in exported.items():
        if kind != "script":
            continue
        i = int(key[3:7])
        revs = {r["rev"]: r for r in entry["revisions"]}
        for rev, r in revs.items():
            assert r["source"] == source(i, rev)
        named = {e["rev"] for e in lost if e["key"] == key and e["what"] == "revision"}
        assert set(revs) | named == {1, 2, 3}, key  # each revision is exported or named
        assert entry["current"] in revs and revs[entry["current"]]["outcome"] == "ok"
    for e in lost:
        assert set(e) == {"what", "kind", "key", "rev", "reason"} and e["reason"]
    # The salvage is an export like any other: it imports into a new store.
    with Store(tmp_path / "new.db") as new:
        assert new.import_json(out) == len(data["keys"])
        assert new.corruption is None
        assert {(i.kind, i.key) for i in new.keys()} == set(exported)


def test_an_export_of_a_sound_store_has_no_lost_list(filled):
    with Store(filled) as store:
        data = store.export()
        assert "lost" not in data and len(data["keys"]) == KEYS + 20


# --- other kinds of damage ---------------------------------------------------------------

def test_a_file_cut_short(filled):
    with open(filled, "r+b") as f:
        f.truncate(filled.stat().st_size // 2 + 100)  # not even a whole page
    before = files(filled)
    with Store(filled) as store:
        _check_error(store.corruption, filled)
        assert "cut short" in store.corruption.findings[0]
        _reads(store)
        data = store.export()
        assert 0 < len(data["keys"]) < KEYS and data["lost"]
        with pytest.raises(StoreCorrupt):
            store.scripts.record_success("mod0001:main", "return 1")
    assert files(filled) == before


def test_a_destroyed_first_page(filled):
    overwrite(filled, 100, PAGE - 100)  # the header survives, the schema does not
    with Store(filled) as store:
        _check_error(store.corruption, filled)
        assert all(isinstance(r, StoreError) for r in _reads(store))
        data = store.export()
        assert data["keys"] == [] and {e["what"] for e in data["lost"]} == {"rows"}


def test_a_header_with_a_page_size_sqlite_never_writes(filled):
    overwrite(filled, 16, 2, seed=3)
    with Store(filled) as store:
        _check_error(store.corruption, filled)
        assert all(isinstance(r, StoreError) for r in _reads(store))
        assert store.export()["keys"] == []


def test_damage_the_open_check_did_not_cover(filled):
    """Above check_max_bytes only the keys table is checked on open; a read that meets
    damage elsewhere, or check(), makes the store read-only from then on."""
    overwrite(filled, middle_page(filled), PAGE)
    with Store(filled, check_max_bytes=PAGE) as store:
        assert store.check_scope == "keys" and store.corruption is None
        assert store.check() is not None and store.read_only
        assert store.check_scope == "file"
        with pytest.raises(StoreCorrupt):
            store.reset_all()
    with Store(filled, check_max_bytes=None) as store:
        assert store.check_scope == "file" and store.read_only


def test_a_read_that_meets_damage_makes_the_store_read_only(filled):
    before = files(filled)
    with Store(filled, check_max_bytes=0) as store:
        assert store.corruption is None
        errors = [r for r in _reads(store) if isinstance(r, StoreError)]
        assert errors == []
    overwrite(filled, middle_page(filled), PAGE)
    before = files(filled)
    with Store(filled, check_max_bytes=0) as store:
        errors = [r for r in _reads(store) if isinstance(r, StoreCorrupt)]
        assert errors and store.read_only
        _check_error(errors[0], filled)
        assert "found while reading" in str(errors[0]) or "found while listing" in str(errors[0])
        with pytest.raises(StoreCorrupt):
            store.scripts.record_success("mod0001:main", "return 1")
    assert files(filled) == before


def test_content_changed_under_its_hash(filled):
    """Bytes changed inside a revision's text break no page: only its hash tells."""
    marker = source(123, 3).encode()
    raw = filled.read_bytes()
    offset = raw.index(marker) + 12
    assert raw.count(marker) == 1
    with open(filled, "r+b") as f:
        f.seek(offset)
        f.write(b"XX")
    with Store(filled) as store:
        assert store.corruption is None  # every page is well-formed
        store.scripts.record_success("other:main", "return 1")  # the store is writable...
        wal = Path(f"{filled}-wal").read_bytes()
        with pytest.raises(StoreCorrupt) as exc:
            store.scripts.current("mod0123:main")
        _check_error(exc.value, filled)
        assert (exc.value.kind, exc.value.key, exc.value.rev) == ("script", "mod0123:main", 3)
        assert "does not match the hash" in exc.value.findings[0]
        assert store.read_only  # ...and read-only from then on
        with pytest.raises(StoreCorrupt):
            store.scripts.record_success("other:main", "return 2")
        assert store.scripts.current("mod0122:main").rev == 3  # other reads go on
        data = store.export()
        assert [(e["what"], e["key"], e["rev"]) for e in data["lost"]] == [
            ("pointer", "mod0123:main", None),  # current falls back to revision 1
            ("revision", "mod0123:main", 3)]
        (entry,) = [k for k in data["keys"] if k["key"] == "mod0123:main"]
        assert entry["current"] == 1
        assert len(data["keys"]) == KEYS + 21
        before = files(filled)
    # Closing a store found damaged does not checkpoint its WAL into the file.
    assert files(filled) == before and before["-wal"] == wal


@pytest.mark.parametrize("make, code", [
    (lambda p: p.write_bytes(random.Random(1).randbytes(10_000)), "not_a_store"),
    (lambda p: p.write_text("not a database\n" * 50), "not_a_store"),
    (lambda p: p.write_bytes(b"SQLite format 3\x00" + random.Random(2).randbytes(8_000)),
     "corrupt_store"),
    (lambda p: p.write_bytes(b"SQLite format 3\x00" + bytes(20)), "corrupt_store"),
    (lambda p: p.mkdir(), "not_a_store"),
])
def test_what_is_not_a_sound_store(tmp_path, make, code):
    path = tmp_path / "game.db"
    make(path)
    before = sorted(os.listdir(tmp_path)), path.read_bytes() if path.is_file() else None
    try:
        with Store(path) as store:
            error = store.corruption
            assert error is not None
            assert all(isinstance(r, StoreError) for r in _reads(store))
            with pytest.raises(StoreCorrupt):
                store.scripts.record_success("a", "return 1")
    except StoreError as exc:
        error = exc
    assert error.code == code and error.path == str(path)
    assert (path.read_bytes() if path.is_file() else None) == before[1]


def test_an_empty_file(tmp_path):
    path = tmp_path / "game.db"
    path.write_bytes(b"")
    with pytest.raises(StoreError) as exc:
        Store(path, create=False)
    assert exc.value.code == "no_store" and "empty file" in str(exc.value)
    assert path.read_bytes() == b""
    # A store whose creation was cut short before its first write: creating goes on.
    with Store(path) as store:
        assert store.corruption is None
        store.scripts.record_success("a", "return 1")


def test_an_empty_file_with_a_write_ahead_log(filled, tmp_path):
    path = tmp_path / "cut.db"
    path.write_bytes(b"")
    Path(f"{path}-wal").write_bytes(random.Random(4).randbytes(3 * (PAGE + 24) + 32))
    before = files(path)
    with Store(path) as store:
        _check_error(store.corruption, path)
        assert "write-ahead log" in store.corruption.findings[0]
    assert files(path) == before


def test_a_wal_left_behind_is_never_deleted(tmp_path):
    """A store moved without its WAL: creating a store at the path would have SQLite
    delete that log, and the commits in it."""
    path = _crashed(tmp_path, 5)
    moved = tmp_path / "moved.db"
    path.rename(moved)
    wal = Path(f"{path}-wal").read_bytes()
    for create in (True, False):
        with pytest.raises(StoreError) as exc:
            Store(path, create=create)
        assert exc.value.code == "no_store" and f"{path}-wal is there" in str(exc.value)
    assert not path.exists() and Path(f"{path}-wal").read_bytes() == wal


def test_a_path_that_cannot_be_opened(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError) as exc:
        Store(tmp_path / "file" / "game.db")
    assert exc.value.code == "io_error" and "permissions" in str(exc.value)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="needs file permissions that apply (not root)")
def test_a_file_without_permission(filled):
    filled.chmod(0)
    try:
        with pytest.raises(StoreError) as exc:
            Store(filled)
        assert exc.value.code == "io_error"
    finally:
        filled.chmod(0o644)


def test_a_lock_held_too_long_is_busy(filled):
    other = sqlite3.connect(filled, isolation_level=None)
    try:
        with Store(filled, busy_timeout_s=0) as store:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError) as exc:
                store.scripts.record_success("a", "return 1")
            assert exc.value.code == "busy" and not store.read_only
            other.execute("ROLLBACK")
            store.scripts.record_success("a", "return 1")
    finally:
        other.close()


# --- the write-ahead log ---------------------------------------------------------------

def _crashed(tmp_path: Path, commits: int) -> Path:
    """A store as a crash leaves it: ``commits`` records in the WAL, none checkpointed."""
    live, path = tmp_path / "live.db", tmp_path / "game.db"
    store = Store(live)
    try:
        for i in range(commits):
            store.scripts.record_success(f"k{i:03d}", source(i, 1) * 8)
        for suffix in ("", "-wal"):
            shutil.copy(f"{live}{suffix}", f"{path}{suffix}")
    finally:
        store.close()
    return path


def _frames(path: Path) -> int:
    return (Path(f"{path}-wal").stat().st_size - 32) // (PAGE + 24)


def test_a_crash_leaves_a_sound_store(tmp_path):
    path = _crashed(tmp_path, 40)
    with Store(path) as store:
        assert store.corruption is None and store.check() is None
        assert len(store.keys()) == 40


def test_a_wal_damaged_in_the_middle_is_found_and_kept(tmp_path):
    path = _crashed(tmp_path, 40)
    frames = _frames(path)
    overwrite(Path(f"{path}-wal"), 32 + (frames // 2) * (PAGE + 24) + 300, 64)
    before = files(path)
    with Store(path) as store:
        _check_error(store.corruption, path)
        assert "write-ahead log" in store.corruption.findings[0]
        assert "commits" in store.corruption.findings[0]
        data = store.export()  # what SQLite reads: the commits before the damage
        assert 0 < len(data["keys"]) < 40
        with pytest.raises(StoreCorrupt):
            store.scripts.record_success("k999", "return 1")
    assert files(path) == before  # the log is still there, for whoever can mend it


def test_a_wal_with_a_damaged_header(tmp_path):
    path = _crashed(tmp_path, 10)
    overwrite(Path(f"{path}-wal"), 0, 32)
    before = files(path)
    with Store(path) as store:
        _check_error(store.corruption, path)
        assert "damaged header" in store.corruption.findings[0]
    assert files(path) == before


def test_a_torn_last_frame_is_a_crash_not_damage(tmp_path):
    """A write cut off in its last frame loses that commit, as any crash does."""
    path = _crashed(tmp_path, 10)
    overwrite(Path(f"{path}-wal"), Path(f"{path}-wal").stat().st_size - 200, 100)
    with Store(path) as store:
        assert store.corruption is None
        assert len(store.keys()) == 9
        store.scripts.record_success("k009", "return 1")
