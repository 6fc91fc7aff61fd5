"""A task inbox: tasks for a running game's mods, given from outside the process.

``moonbox dev DIR`` with an LLM backend serves the inbox ``DIR/.moonbox-tasks``; the
companion command ``moonbox agent TASK --mods DIR --mod ID --dev`` drops a task there and
follows its attempts as they run. The inbox is plain files, so any tool can use it:

- ``<id>.task.json``: ``{"id", "mod", "task", "file", "owner"}``, written whole (a
  temporary name, then a rename);
- ``<id>.events.jsonl``: one JSON object per line, the loop's events as
  :meth:`Event.to_dict` gives them (with the trace id), ``{"event": "task_claimed"}``
  first and ``{"event": "task_finished", "result": ...}`` (the
  :meth:`ProgrammerResult.to_dict`) last; ``{"event": "task_failed", "error": ...}``
  when the task could not run (an unknown mod, say).

:class:`InboxRunner` is the serving side. It polls the inbox on the session's thread,
runs each task's Programmer loop in a :class:`RequestQueue` worker (generation never
stalls the game: the game ticks on while the model writes), and has each attempt's fork,
the swap of a success and the world summary done between two ticks, on the session's
thread, through the session's ``call_between``. Tasks are owned by their ``owner`` and
scoped by mod: a newer task of one owner for one mod supersedes the older.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from .._errors import ConfigError, MoonboxError
from ._cancel import CancelToken
from ._client import LLMClient
from ._errors import Cancelled
from ._game import GameHost, LiveMod
from ._loop import Event, Programmer, ProgrammerResult
from ._queue import RequestQueue, Ticket

__all__ = ["INBOX_NAME", "InboxRunner", "TaskInbox"]

log = logging.getLogger("moonbox.agent")

INBOX_NAME = ".moonbox-tasks"
"""The inbox's folder in a mods directory (hidden: the mods watcher ignores it)."""

_POLL_S = 0.25


class Between(Protocol):
    """What the runner needs of a dev session (:class:`moonbox.mods.DevSession`)."""

    def call_between(self, fn: Callable[[], Any]) -> Any: ...

    def note(self, who: str, line: str) -> None: ...


class TaskInbox:
    """The files of an inbox folder (made when first written)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    @classmethod
    def of(cls, mods_dir: str | Path) -> TaskInbox:
        return cls(Path(mods_dir) / INBOX_NAME)

    def submit(self, mod: str, task: str, *, file: str | None = None,
               owner: str = "") -> str:
        """Drop a task; returns its id."""
        self.folder.mkdir(parents=True, exist_ok=True)
        task_id = f"{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(4)}"
        data = {"id": task_id, "mod": mod, "task": task, "file": file, "owner": owner}
        tmp = self.folder / f".{task_id}.tmp"
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, self.folder / f"{task_id}.task.json")
        return task_id

    def events_path(self, task_id: str) -> Path:
        return self.folder / f"{task_id}.events.jsonl"

    def unclaimed(self) -> list[dict[str, Any]]:
        """The tasks no runner has taken yet, oldest first."""
        if not self.folder.is_dir():
            return []
        found = []
        for path in sorted(self.folder.glob("*.task.json")):
            task_id = path.name.removesuffix(".task.json")
            if self.events_path(task_id).exists():
                continue
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                found.append(data)
        return found

    def write(self, task_id: str, record: dict[str, Any]) -> None:
        """Append one record to the task's events (one line, flushed)."""
        with self.events_path(task_id).open("a", encoding="utf-8") as out:
            out.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")

    def follow(self, task_id: str, *, timeout_s: float, poll_s: float = 0.1,
               sleep: Callable[[float], None] = time.sleep) -> Iterator[dict[str, Any]]:
        """The task's records as they are written, until ``task_finished`` or
        ``task_failed``.

        Raises:
            TimeoutError: none of them within ``timeout_s`` (no runner serves the inbox?).
        """
        deadline = time.monotonic() + timeout_s
        path = self.events_path(task_id)
        offset = 0
        pending = ""
        while True:
            if path.exists():
                with path.open("r", encoding="utf-8") as src:
                    src.seek(offset)
                    chunk = src.read()
                    offset = src.tell()
                pending += chunk
                *lines, pending = pending.split("\n")
                for line in lines:
                    if not line.strip():
                        continue
                    record = json.loads(line)
                    yield record
                    if record.get("event") in ("task_finished", "task_failed"):
                        return
            if time.monotonic() > deadline:
                raise TimeoutError(f"task {task_id} did not finish within {timeout_s:g} s")
            sleep(poll_s)


class InboxRunner:
    """Serves a :class:`TaskInbox` for the mods of a running game.

    Args:
        inbox: the inbox.
        host: the game's mod host (a :class:`moonbox.mods.ModHost`).
        session: what runs work between ticks (a :class:`moonbox.mods.DevSession`).
        client: the LLM client (a :class:`RoleClient` follows the routing config).
        programmer_options: more options for each :class:`Programmer`.
        max_concurrent: tasks worked on at once.
        clock: for the poll interval.
    """

    def __init__(self, inbox: TaskInbox, host: GameHost, session: Between,
                 client: LLMClient, *, max_concurrent: int = 1,
                 clock: Callable[[], float] = time.monotonic,
                 **programmer_options: Any) -> None:
        self.inbox = inbox
        self.host = host
        self.session = session
        self.client = client
        self.options = programmer_options
        self.queue = RequestQueue(max_concurrent=max_concurrent, name="moonbox-inbox")
        self.tickets: dict[str, Ticket[Any]] = {}
        self._clock = clock
        self._next_poll = 0.0
        self._closed = threading.Event()

    def poll(self) -> list[str]:
        """Take the inbox's new tasks (on the session's thread, between ticks); returns
        their ids. At most once per 0.25 s; :meth:`poll_now` always looks."""
        now = self._clock()
        if now < self._next_poll:
            return []
        self._next_poll = now + _POLL_S
        return self.poll_now()

    def poll_now(self) -> list[str]:
        taken = []
        for data in self.inbox.unclaimed():
            task_id = str(data.get("id"))
            self.inbox.write(task_id, {"event": "task_claimed", "task_id": task_id})
            taken.append(task_id)
            try:
                self._start(task_id, data)
            except Exception as exc:  # a bad task never stops the session
                if not isinstance(exc, MoonboxError):
                    log.exception("task %s of the inbox could not start", task_id)
                self.inbox.write(task_id, {"event": "task_failed", "error": str(exc)
                                           or type(exc).__name__})
                self.session.note("programmer", f"task {task_id} not started: {exc}")
        return taken

    def _start(self, task_id: str, data: dict[str, Any]) -> None:
        mod, text = data.get("mod"), data.get("task")
        if not isinstance(mod, str) or not isinstance(text, str) or not text.strip():
            raise ConfigError("a task needs a mod and a task text")
        file = data.get("file") if isinstance(data.get("file"), str) else None
        owner = str(data.get("owner") or "")
        target = LiveMod(self.host, mod, file)  # on the session's thread
        task = target.task(text)
        between = self._between
        programmer = Programmer(
            self.client, self.host.game.registry, store=self.host.store,
            budget=self.host.game.budget, dry_run=lambda s: between(target.dry_run, s),
            go_live=lambda s: between(target.go_live, s),
            world_summary=lambda: between(target.world_summary), **self.options)
        target.author = getattr(self.client, "model", None)
        session = self.session

        def on_event(event: Event) -> None:
            if event.name != "generation_delta":
                self.inbox.write(task_id, {**event.to_dict(), "task_id": task_id})
            line = _describe(event)
            if line:
                session.note("programmer", f"{mod}: {line}")

        def work(token: CancelToken) -> ProgrammerResult:
            session.note("programmer", f"{mod}: task {task_id}: {text}")
            try:
                result = programmer.run(task, cancel=token, on_event=on_event)
            except BaseException as exc:
                self.inbox.write(task_id, {"event": "task_failed", "error": str(exc)
                                           or type(exc).__name__})
                raise
            self.inbox.write(task_id, {"event": "task_finished", "task_id": task_id,
                                       "mod": mod, "result": result.to_dict()})
            session.note("programmer", f"{mod}: {result.status} after "
                         f"{len(result.attempts)} attempt(s)")
            return result

        self.tickets[task_id] = self.queue.submit(work, scope=f"mod:{mod}", owner=owner)

    def _between(self, fn: Callable[..., Any], *args: Any) -> Any:
        future = self.session.call_between(lambda: fn(*args))
        while True:
            if self._closed.is_set():
                future.cancel()
                raise Cancelled("the dev session ended")
            try:
                return future.result(timeout=_POLL_S)
            except TimeoutError:
                continue

    def close(self) -> None:
        """Stop: running tasks are cancelled at their next safe point."""
        self._closed.set()
        for ticket in self.tickets.values():
            ticket.cancel("the dev session ended")
        self.queue.close(timeout_s=5)


def _describe(event: Event) -> str:
    d = event.data
    if event.name == "generation_started":
        return f"attempt {event.attempt}: asking {d.get('model')} (trace {event.trace_id})"
    if event.name == "execution_failed":
        return f"attempt {event.attempt} failed: {d.get('summary')}"
    if event.name == "execution_succeeded":
        return f"attempt {event.attempt} ran cleanly in a fork"
    if event.name == "went_live":
        return f"attempt {event.attempt} is live ({d.get('key')})"
    if event.name == "repair_exhausted":
        return f"no working version after {d.get('attempts')} attempts; the old one runs on"
    if event.name in ("client_failed", "request_vetoed", "rate_limited", "cancelled"):
        return f"{event.name.replace('_', ' ')}: {d.get('message') or d.get('reason') or ''}"
    return ""

