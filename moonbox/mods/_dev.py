"""``moonbox dev``: a game that runs while its mods are edited, and a view of it."""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..engine import Failure, Game, TickReport
from ..store import Store
from ..world import Prefab, World, default_prefabs
from ._host import ModHost, ReloadResult, source_line
from ._watch import DEBOUNCE_MS, STEP_MS, ModWatcher

__all__ = ["DevProblem", "DevSession", "DevView", "arena_game", "describe_failure",
           "describe_problem", "describe_result", "describe_store", "describe_workers",
           "game_factory", "render"]

_SOURCE = re.compile(r"^ {4}\d+ \| [^\n]*$")  # a source line, as source_line() gives it
MAX_PROBLEMS = 100
"""Entries the session's log keeps (a repeat of one is counted in it, not kept again)."""

ProblemKind = Literal["refused", "error", "trip", "quarantined", "host", "fixed", "removed"]


def arena_game(**options: Any) -> Game:
    """The example arena's game: 100 x 100 units, players and enemies besides the defaults.
    ``options`` are :class:`Game`'s (``isolation="process"``, ``workers``, ...)."""
    prefabs = default_prefabs()
    prefabs.register(Prefab("player", description="A runner controlled by a mod."))
    prefabs.register(Prefab("enemy", description="Chases players.", radius=0.6))
    return Game(World(prefabs, bound=50), seed=1, **options)


def game_factory(spec: str | None) -> Callable[[], Game]:
    """The factory named by ``module:function`` (``None``: :func:`arena_game`).

    Raises:
        ValueError: not ``module:function``, or no such module or function.
    """
    if spec is None:
        return arena_game
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{spec!r}: use module:function, e.g. mygame.server:make_game")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{spec!r}: {exc}") from None
    if not callable(factory):
        raise ValueError(f"{spec!r} is not callable")
    return factory  # type: ignore[no-any-return]


@dataclass
class DevProblem:
    """One entry of a dev session's log: a problem, or the news that a mod's are over.

    Attributes:
        kind: ``refused`` (a load or reload was refused; the previous version, if any,
            runs on), ``error`` (a call of the mod failed), ``trip`` (a call tripped its
            budget), ``quarantined`` (the engine stopped the mod), ``host`` (the host's
            own: the versions store), ``fixed`` (a new version went live and the mod's
            earlier entries were cleared) or ``removed`` (its folder is gone; likewise).
        mod: the mod's id (``None`` for the host's own).
        tick: the game's tick it happened on (the latest, for a repeat).
        at_s: when, as ``time.time()`` (the latest, for a repeat).
        text: what happened, naming the handler and ``file:line``.
        source: the source line it points at (``    6 | error("boom")``), if known.
        count: how many times the log had this same entry (it is kept once, where the
            latest of them goes).
        first_tick: the tick of the first of them.
    """

    kind: ProblemKind
    mod: str | None
    tick: int
    at_s: float
    text: str
    source: str | None = None
    count: int = 1
    first_tick: int = 0

    @property
    def stamp(self) -> str:
        """``t 12 14:03:07``: the tick and the local time."""
        return f"t {self.tick} {time.strftime('%H:%M:%S', time.localtime(self.at_s))}"


class DevSession:
    """A game ticking at a fixed rate while a :class:`ModWatcher` feeds changed mod
    folders to a :class:`ModHost`. Reloads happen between ticks, as soon as a burst of
    saves settles; the game never waits for a file.

    The session keeps a log of what went wrong (:attr:`problems`): refused loads and
    reloads, failed and tripped calls of handlers, timers and tasks, quarantines and the
    versions store's problems, each with its mod, tick and time. When a new version of a
    mod goes live (or its folder is removed), the mod's entries are cleared and one entry
    says so. The session takes the host's ``on_result`` and ``on_error`` (and calls the
    ones set before, first).

    Args:
        host: the mods and their game.
        tick_s: seconds between ticks.
        watch: watch the directory (``False``: load once, tick, no reloads).
        debounce_ms, step_ms: the watcher's settings (see :class:`ModWatcher`).

    Attributes:
        results: the latest 100 load and reload results.
        reports: the latest 20 reported lines, as ``(tick, mod, line)``: the game's (the
            main chunks' among them) and what ``on_reload`` reported.
        problems: the log, oldest first (at most :data:`MAX_PROBLEMS`).
        on_result: called with each :class:`ReloadResult`, after the session saw it.
        on_problem: called with each new log entry, or with an entry again when it
            repeats (its ``count`` gone up).
        last_tick_s: how long the latest :meth:`Game.tick` took, in seconds.
    """

    def __init__(self, host: ModHost, *, tick_s: float = 0.05, watch: bool = True,
                 debounce_ms: int = DEBOUNCE_MS, step_ms: int = STEP_MS) -> None:
        self.host = host
        self.game = host.game
        self.tick_s = tick_s
        self.watcher = ModWatcher(host.mods_dir, debounce_ms=debounce_ms,
                                  step_ms=step_ms) if watch else None
        self.results: list[ReloadResult] = []
        self.reports: list[tuple[int, str, str]] = []
        self.problems: list[DevProblem] = []
        self.on_result: Callable[[ReloadResult], None] | None = None
        self.on_problem: Callable[[DevProblem], None] | None = None
        self.last_tick_s = 0.0
        self._next_tick = 0.0
        # The host's callbacks become the session's, which call what was there before.
        self._host_result, self._host_errored = host.on_result, host.on_error
        host.on_result = self._result
        host.on_error = self._host_error

    def start(self) -> list[ReloadResult]:
        """Start watching, then load (or restore) every mod; the load results."""
        if self.watcher is not None:
            self.watcher.start()
        results = self.host.load_all()
        self._next_tick = time.monotonic()
        return results

    def step(self, on_tick: Callable[[Any], None] | None = None) -> None:
        """Apply the changes that arrive before the next tick is due, then tick if due."""
        timeout = self._next_tick - time.monotonic()
        if self.watcher is not None:
            for folder in sorted(self.watcher.get(timeout)):
                self.host.reload_folder(folder)
        elif timeout > 0:
            time.sleep(timeout)
        if time.monotonic() >= self._next_tick:
            started = time.perf_counter()
            report = self.game.tick()
            self.last_tick_s = time.perf_counter() - started
            self._next_tick = max(self._next_tick + self.tick_s, time.monotonic() - self.tick_s)
            self._keep_reports((report.tick, mod, line) for mod, line in report.reports)
            self._note_tick(report)
            self.host.refresh()
            if on_tick is not None:
                on_tick(report)

    def run(self, ticks: int | None = None, on_tick: Callable[[Any], None] | None = None,
            ) -> None:
        """Step until ``ticks`` more ticks have run (``None``: until interrupted)."""
        goal = None if ticks is None else self.game.tick_count + ticks
        while goal is None or self.game.tick_count < goal:
            self.step(on_tick)

    def close(self) -> None:
        """Stop watching, and the host's dry-run worker. The game is the caller's to close."""
        if self.watcher is not None:
            self.watcher.close()
        self.host.close()

    # -- the log ---------------------------------------------------------------------

    def _keep_reports(self, lines: Any) -> None:
        self.reports.extend(lines)
        del self.reports[:-20]

    def _log(self, kind: ProblemKind, mod: str | None, text: str,
             source: str | None = None) -> None:
        tick, now = self.game.tick_count, time.time()
        key = (mod, kind, text, source)
        last = next((p for p in reversed(self.problems)
                     if (p.mod, p.kind, p.text, p.source) == key), None)
        if last is not None:  # the same again: counted, not kept twice
            last.count += 1
            last.tick, last.at_s = tick, now
            self.problems.remove(last)  # newest last: it moves to the end
            self.problems.append(last)
            entry = last
        else:
            entry = DevProblem(kind, mod, tick, now, text, source, first_tick=tick)
            self.problems.append(entry)
            del self.problems[:-MAX_PROBLEMS]
        if self.on_problem is not None:
            self.on_problem(entry)

    def _host_error(self, mod: str | None, text: str) -> None:
        if self._host_errored is not None:
            self._host_errored(mod, text)
        if mod is None:
            self._log("host", None, text)
            return
        text = text.removeprefix(f"mod {mod!r}: ")
        first, _, rest = text.partition("\n")
        source = rest if _SOURCE.match(rest) else None
        if source is None and rest:
            first = text
        state = self.host.mods.get(mod)
        runs_on = state is not None and state.status == "failed_reload"
        self._log("refused", mod, first + ("; the version before it runs on" if runs_on
                                           else "; the mod is not loaded"), source)

    def _result(self, result: ReloadResult) -> None:
        if self._host_result is not None:
            self._host_result(result)
        self.results.append(result)
        del self.results[:-100]
        if result.ok and not result.unchanged:
            cleared = sum(1 for p in self.problems
                          if p.mod == result.mod and p.kind not in ("fixed", "removed"))
            self.problems = [p for p in self.problems if p.mod != result.mod]
            state = self.host.mods.get(result.mod)
            if result.removed:
                self._log("removed", result.mod, "its folder is gone: unloaded"
                          + (f"; its {_entries(cleared)} cleared" if cleared else ""))
            elif cleared:
                version = state.package.manifest.version if state and state.package else "?"
                self._log("fixed", result.mod, f"live again ({version} "
                          f"{result.version_hash[:12]}): its {_entries(cleared)} cleared")
        elif result.ok:  # the live version saved again: a refusal of another is over
            state = self.host.mods.get(result.mod)
            if state is not None and state.status == "running":
                kept = [p for p in self.problems
                        if not (p.mod == result.mod and p.kind == "refused")]
                if len(kept) != len(self.problems):
                    self.problems = kept
                    self._log("fixed", result.mod, "back to the version that runs: the "
                              "refusal is cleared")
        self._keep_reports((self.game.tick_count, result.mod, f"{line} (on_reload)")
                           for line in result.reports)
        if self.on_result is not None:
            self.on_result(result)

    def _note_tick(self, report: TickReport) -> None:
        for failure in report.failures:
            self._log("trip" if failure.trip else "error", failure.mod,
                      describe_failure(failure),
                      source_line(failure.error, self._package(failure.mod)))
        for mod_id in report.quarantined:
            try:
                q = self.game.mod(mod_id).quarantine
            except Exception:  # noqa: BLE001 - unloaded meanwhile: nothing to show
                continue
            if q is not None:
                reason = q.reason.split("; last: ")[0]
                self._log("quarantined", mod_id, f"stopped ({q.kind}): {reason}; save a new "
                          "version to load it again")

    def _package(self, mod_id: str) -> Any:
        state = self.host.mods.get(mod_id)
        return state.package if state is not None else None


def _entries(n: int) -> str:
    return f"{n} earlier entr{'y' if n == 1 else 'ies'}"


def describe_failure(failure: Failure) -> str:
    """A failed call as the log shows it: the error (``file:line: message``), then which
    handler it was and where that was defined."""
    called = f", called by mod {failure.caller!r}" if failure.caller is not None else ""
    return f"{failure.error} (in {failure.handler}{called}, defined at {failure.where})"


def describe_problem(problem: DevProblem) -> str:
    """One log entry for a plain terminal: ``[tick] mod: kind: text``, and the source line
    under it."""
    repeat = f" (x{problem.count} since tick {problem.first_tick})" if problem.count > 1 else ""
    who = problem.mod if problem.mod is not None else "host"
    text = f"[{problem.tick:4}] {who}: {problem.kind}: {problem.text}{repeat}"
    return text + (f"\n{problem.source}" if problem.source else "")


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _short(n: int) -> str:
    """A count in at most 5 characters: 9999, 12.3k, 4.5M."""
    for size, unit in ((10**9, "G"), (10**6, "M"), (10**4, "k")):
        if n >= size:
            value = n / (size if unit != "k" else 1000)
            return f"{value:.1f}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return str(n)


def describe_workers(game: Game) -> list[str]:
    """One line per worker process of an isolated game (``[]`` in process): its pid,
    memory, CPU and the mods pinned to it, read now; then the spare workers booted to take
    over a lost one."""
    lines = []
    for w in game.worker_stats():
        pid = str(w.pid) if w.pid is not None else "down"
        lines.append(f"worker {pid}: rss {_mib(w.rss_bytes)}, cpu {w.cpu_percent:.0f}% "
                     f"({w.cpu_user_s + w.cpu_system_s:.2f} s), respawns {w.respawns}, "
                     f"mods {', '.join(w.mods) or '-'}")
    spares = game.pool.spare_pids if game.pool is not None else ()
    if spares:
        lines.append(f"spare {', '.join(map(str, spares))}: booted, takes over a lost worker")
    return lines


def describe_store(store: Store | None) -> list[str]:
    """What a session must say about its versions store: nothing when it is sound (or
    there is none); for a damaged one, that it is read-only this session and how to
    recover it."""
    if store is None or store.corruption is None:
        return []
    path = str(store.path)
    return [
        f"versions store {path} is damaged: {store.corruption.findings[0]}",
        "it is read-only for this session: what it can still read is restored, nothing is "
        "recorded and nothing is written to it",
        f"to recover: moonbox versions export FILE --store {path}, move {path} and "
        f"{path}-wal aside, then moonbox versions import FILE --store {path}",
    ]


_COLOURS = {"running": "green", "quarantined": "red", "failed_reload": "yellow",
            "failed": "red"}
_KIND_STYLES = {"refused": "yellow", "error": "red", "trip": "magenta",
                "quarantined": "bold red", "host": "yellow", "fixed": "green",
                "removed": "dim"}
SHOWN_PROBLEMS = 8
"""Log entries the live view shows, newest last."""


class DevView:
    """The live view of a :class:`DevSession`, laid out for the width it is given.

    It reads the session, the host and the game as it renders: render it on the thread
    that ticks the game (``Live(..., auto_refresh=False)`` and ``refresh()`` after a tick),
    never from another.

    A table of the mods: version, status, reloads and stats (calls, steps, errors,
    trips, refused commands); in an isolated game each mod's worker too, and a panel of
    the workers. Then a warning when the versions store is read-only (damaged), the
    log's latest entries (errors, trips, refusals, quarantines, each with its tick and
    time, mod, handler and ``file:line``; what a new version cleared) and the latest
    reports. Where the full table does not fit, a compact one (short headers, counts
    such as ``12.3k``) keeps every mod's name, status, errors and trips whole.
    """

    def __init__(self, session: DevSession) -> None:
        self.session = session

    def __rich_console__(self, console: Console, options: ConsoleOptions,
                         ) -> Iterator[RenderableType]:
        session = self.session
        game = session.game
        workers = game.worker_stats()  # read now; each mod's stats.worker too
        table = self._table(compact=False)
        # Measured as if there were room: its natural width, before any column gives way.
        if Measurement.get(console, options.update_width(1 << 12),
                           table).maximum > options.max_width:
            table = self._table(compact=True)
        yield Text(f"moonbox dev  {session.host.mods_dir}  tick {game.tick_count}",
                   style="bold", overflow="fold")
        yield table
        if game.pool is not None:
            lines = []
            for w in workers:
                pid = str(w.pid) if w.pid is not None else "down"
                lines.append(f"{pid:>8}  rss {_mib(w.rss_bytes):>10}  cpu "
                             f"{w.cpu_percent:3.0f}%  respawns {w.respawns}  mods "
                             f"{', '.join(w.mods) or '-'}")
            yield Panel(Text("\n".join(lines) or "none", overflow="fold"), title="workers")
        store = describe_store(session.host.store)
        if store:
            yield Panel(Text("\n".join(store), overflow="fold"), title="versions store",
                        border_style="yellow")
        yield Panel(self._problems(), title="errors and trips (newest last)",
                    border_style="red", title_align="left")
        yield Panel(self._reports(), title="reports", title_align="left")

    def _table(self, *, compact: bool) -> Table:
        session, game = self.session, self.session.game
        isolated = game.pool is not None
        if compact:
            table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0))
            columns = ["mod", "ver", "status", "rel", "calls", "steps", "err", "trips",
                       "ref"] + (["rst", "pid"] if isolated else [])
            number: Callable[[int], str] = _short
        else:
            table = Table(expand=True)
            columns = ["mod", "version", "status", "reloads", "calls", "steps", "errors",
                       "trips", "refused"] + (["restores", "worker", "rss", "cpu"]
                                              if isolated else [])
            number = "{:,}".format
        for i, column in enumerate(columns):
            # Where there is no room, the mod's name folds and its version is cut; the
            # status and the numbers never give way.
            table.add_column(column, justify="left" if i < 3 else "right",
                             no_wrap=i > 1, overflow="fold" if i == 0 else "ellipsis",
                             min_width=min(len(column), 8) if i == 0 else None)
        for state in sorted(session.host.mods.values(), key=lambda s: s.id):
            version = state.package.manifest.version if state.package else "-"
            cells: list[str]
            try:
                stats = game.mod(state.id).stats
                cells = [number(n) for n in (stats.calls, stats.steps, stats.errors,
                                             stats.trips, stats.commands_refused)]
                if isolated:
                    w = stats.worker
                    cells += [str(stats.restores), str(w.pid) if w and w.pid else "-"]
                    if not compact:
                        cells += [_mib(w.rss_bytes) if w else "-",
                                  f"{w.cpu_percent:.0f}%" if w else "-"]
            except Exception:  # noqa: BLE001 - not loaded: no stats to show
                cells = ["-"] * (len(columns) - 4)
            table.add_row(escape(state.id), escape(version),
                          f"[{_COLOURS[state.status]}]{state.status.replace('_', ' ')}[/]",
                          str(state.reloads), *cells)
        return table

    def _problems(self) -> RenderableType:
        shown = self.session.problems[-SHOWN_PROBLEMS:]
        if not shown:
            return Text("none", style="dim")
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, style="dim")
        grid.add_column(overflow="fold")
        for p in shown:
            style = _KIND_STYLES[p.kind]
            line = Text.assemble((p.kind, style), " ", (f"{p.mod}:" if p.mod else "host:",
                                                        "bold"), " ", p.text)
            if p.count > 1:
                line.append(f" (x{p.count} since tick {p.first_tick})", style="dim")
            if p.source:
                line.append("\n" + p.source.strip(), style="cyan")
            grid.add_row(p.stamp, line)
        return grid

    def _reports(self) -> RenderableType:
        shown = self.session.reports[-6:]
        if not shown:
            return Text("none", style="dim")
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, style="dim", justify="right")
        grid.add_column(overflow="fold")
        for tick, mod, line in shown:
            grid.add_row(str(tick), Text.assemble((f"{mod}:", "bold"), " ", line))
        return grid


def render(session: DevSession) -> Group:
    """The live view of ``session`` (see :class:`DevView`)."""
    return Group(DevView(session))


def describe_result(result: ReloadResult) -> str:
    """One line (or a few, for an error) for a load or reload, for a plain terminal."""
    if result.ok:
        what = ("unchanged" if result.unchanged else "removed: unloaded" if result.removed
                else f"live {result.version_hash[:12]}")
        return f"{result.mod}: {what} ({result.elapsed_s * 1000:.0f} ms)"
    return f"{result.mod}: refused, the previous version (if any) runs on\n  {result.error}"
