"""``moonbox dev``: a game that runs while its mods are edited, and a view of it."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from ..engine import Game
from ..store import Store
from ..world import Prefab, World, default_prefabs
from ._host import ModHost, ReloadResult
from ._watch import DEBOUNCE_MS, STEP_MS, ModWatcher

__all__ = ["DevSession", "arena_game", "describe_result", "describe_store", "describe_workers",
           "game_factory", "render"]


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


class DevSession:
    """A game ticking at a fixed rate while a :class:`ModWatcher` feeds changed mod
    folders to a :class:`ModHost`. Reloads happen between ticks, as soon as a burst of
    saves settles; the game never waits for a file.

    Args:
        host: the mods and their game.
        tick_s: seconds between ticks.
        watch: watch the directory (``False``: load once, tick, no reloads).
        debounce_ms, step_ms: the watcher's settings (see :class:`ModWatcher`).
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
        self.last_tick_s = 0.0
        """How long the latest :meth:`Game.tick` took, in seconds."""
        self._next_tick = 0.0

    def start(self) -> list[ReloadResult]:
        """Start watching, then load (or restore) every mod; the load results."""
        if self.watcher is not None:
            self.watcher.start()
        results = self.host.load_all()
        self.results.extend(results)
        self._next_tick = time.monotonic()
        return results

    def step(self, on_tick: Callable[[Any], None] | None = None) -> None:
        """Apply the changes that arrive before the next tick is due, then tick if due."""
        timeout = self._next_tick - time.monotonic()
        if self.watcher is not None:
            for folder in sorted(self.watcher.get(timeout)):
                self.results.append(self.host.reload_folder(folder))
                del self.results[:-100]
        elif timeout > 0:
            time.sleep(timeout)
        if time.monotonic() >= self._next_tick:
            started = time.perf_counter()
            report = self.game.tick()
            self.last_tick_s = time.perf_counter() - started
            self._next_tick = max(self._next_tick + self.tick_s, time.monotonic() - self.tick_s)
            self.reports.extend((report.tick, mod, line) for mod, line in report.reports)
            del self.reports[:-20]
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


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


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


def render(session: DevSession) -> Group:
    """The live view: each mod's version, status and stats, the latest errors, and a
    warning when the versions store is read-only (damaged). In an isolated game each mod
    also shows its worker (pid, resident memory, CPU share, shared with the mods pinned to
    it) and how often it was built again in a fresh worker, and a panel lists the workers."""
    game = session.game
    isolated = game.pool is not None
    workers = game.worker_stats()  # read now; each mod's stats.worker too
    table = Table(title=f"moonbox dev  {escape(str(session.host.mods_dir))}  "
                        f"tick {game.tick_count}", expand=True)
    columns = ["mod", "version", "status", "reloads", "calls", "steps", "errors", "trips",
               "refused"]
    if isolated:
        columns += ["restores", "worker", "rss", "cpu"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("mod", "version", "status")
                         else "right")
    colours = {"running": "green", "quarantined": "red", "failed_reload": "yellow",
               "failed": "red"}
    for state in sorted(session.host.mods.values(), key=lambda s: s.id):
        version = state.package.manifest.version if state.package else "-"
        cells: list[str]
        try:
            stats = game.mod(state.id).stats
            numbers: tuple[Any, ...] = (stats.calls, stats.steps, stats.errors, stats.trips,
                                        stats.commands_refused)
            cells = [f"{n:,}" for n in numbers]
            if isolated:
                w = stats.worker
                cells += [str(stats.restores), str(w.pid) if w and w.pid else "-",
                          _mib(w.rss_bytes) if w else "-",
                          f"{w.cpu_percent:.0f}%" if w else "-"]
        except Exception:
            cells = ["-"] * (len(columns) - 4)
        table.add_row(escape(state.id), escape(version),
                      f"[{colours[state.status]}]{state.status.replace('_', ' ')}[/]",
                      str(state.reloads), *cells)
    errors = [escape(e) for e in session.host.errors[-5:]] or ["[dim]none[/]"]
    reports = [f"[dim]{t:>5}[/] {escape(m)}: {escape(line)}"
               for t, m, line in session.reports[-6:]] or ["[dim]none[/]"]
    parts: list[Any] = [table]
    if isolated:
        lines = []
        for w in workers:
            pid = str(w.pid) if w.pid is not None else "down"
            lines.append(f"{pid:>8}  rss {_mib(w.rss_bytes):>10}  cpu {w.cpu_percent:3.0f}%  "
                         f"respawns {w.respawns}  mods {escape(', '.join(w.mods) or '-')}")
        parts.append(Panel("\n".join(lines) or "[dim]none[/]", title="workers"))
    store = describe_store(session.host.store)
    if store:
        parts.append(Panel("\n".join(escape(line) for line in store), title="versions store",
                           border_style="yellow"))
    parts += [Panel("\n".join(errors), title="latest errors", border_style="red"),
              Panel("\n".join(reports), title="reports")]
    return Group(*parts)


def describe_result(result: ReloadResult) -> str:
    """One line (or a few, for an error) for a load or reload, for a plain terminal."""
    if result.ok:
        what = ("unchanged" if result.unchanged else "removed: unloaded" if result.removed
                else f"live {result.version_hash[:12]}")
        return f"{result.mod}: {what} ({result.elapsed_s * 1000:.0f} ms)"
    return f"{result.mod}: refused, the previous version (if any) runs on\n  {result.error}"


