"""Watching a mods directory: changed mod folders, after a burst of saves settles."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import watchfiles

from ._manifest import MANIFEST_NAME

__all__ = ["DEBOUNCE_MS", "STEP_MS", "ModWatcher"]

DEBOUNCE_MS = 400
"""The longest a burst of changes is grouped before it is handed over, in milliseconds."""
STEP_MS = 30
"""Quiet time after the last change of a burst before it is handed over, in milliseconds."""


def _relevant(change: watchfiles.Change, path: str) -> bool:
    name = Path(path).name
    if name.startswith(".") or name.endswith("~"):
        return False  # editors' swap and backup files
    return name == MANIFEST_NAME or name.endswith(".lua") or change == watchfiles.Change.deleted


class ModWatcher:
    """A background thread that reports which mod folders changed.

    Each burst of file events (an editor often writes a file several times, or writes a
    temporary file and renames it) is handed over once it has been quiet for ``step_ms``,
    or after ``debounce_ms`` at most. Only ``.lua`` files and ``mod.toml`` count; hidden
    files and ``~`` backups are ignored.

    Args:
        mods_dir: the mods directory.
        debounce_ms: see :data:`DEBOUNCE_MS`.
        step_ms: see :data:`STEP_MS`.
        force_polling: poll the file system instead of using its notifications.
    """

    def __init__(self, mods_dir: Path | str, *, debounce_ms: int = DEBOUNCE_MS,
                 step_ms: int = STEP_MS, force_polling: bool | None = None) -> None:
        self.mods_dir = Path(mods_dir).resolve()
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        self._force_polling = force_polling
        self._changes: queue.Queue[set[str]] = queue.Queue()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="moonbox-mods-watch",
                                        daemon=True)

    def start(self) -> ModWatcher:
        """Start watching; returns once the watcher is set up."""
        self._thread.start()
        self._ready.wait(5)
        return self

    def _run(self) -> None:
        watcher = watchfiles.watch(
            self.mods_dir, watch_filter=_relevant, debounce=self.debounce_ms,
            step=self.step_ms, stop_event=self._stop, yield_on_timeout=True,
            rust_timeout=200, force_polling=self._force_polling)
        self._ready.set()
        for changes in watcher:
            folders = set()
            for _, path in changes:
                try:
                    rel = Path(path).resolve().relative_to(self.mods_dir)
                except ValueError:
                    continue
                if len(rel.parts) > 1 or (len(rel.parts) == 1 and Path(path).is_dir()):
                    folders.add(rel.parts[0])
            if folders:
                self._changes.put(folders)

    def get(self, timeout_s: float) -> set[str]:
        """The mod folders that changed, waiting up to ``timeout_s`` for the first burst."""
        folders: set[str] = set()
        try:
            folders |= self._changes.get(timeout=max(0.0, timeout_s))
            while True:
                folders |= self._changes.get_nowait()
        except queue.Empty:
            pass
        return folders

    def close(self) -> None:
        """Stop the thread (within a fraction of a second)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)

    def __enter__(self) -> ModWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
