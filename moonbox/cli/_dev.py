"""``moonbox dev DIR``: run a game and hot-reload its mods as they are edited.

Exit status: 0 when every mod loaded (``--once``/``--ticks``; interactive runs end on
Ctrl-C with 0), also when some later failed or were quarantined while the game ran (the
output says so), 1 when a mod failed to load, 2 for usage errors (an unknown ``--game``,
a directory that does not exist, ``--isolate`` with a factory that cannot take it).
Reports and loads go to stdout; errors, trips, refusals, quarantines and warnings to
stderr.
"""

from __future__ import annotations

import inspect
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.live import Live
from rich.markup import escape

from .._errors import ConfigError, MoonboxError
from ..bindings import Permissions
from ..sandbox import parse_size
from ..store import Store, StoreError

__all__ = ["dev"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
_ISOLATION_OPTIONS = ("isolation", "workers", "worker_memory_bytes")


def _size(ctx: Any, param: Any, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _takes_isolation(factory: Any) -> bool:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    names = {p.name for p in parameters}
    return any(p.kind is p.VAR_KEYWORD for p in parameters) or set(_ISOLATION_OPTIONS) <= names


@click.command()
@click.argument("mods_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--init", is_flag=True,
              help="First copy the example arena's mods into MODS_DIR (new or empty), to "
                   "edit them, with editor stubs of the mod API and a .luarc.json.")
@click.option("--game", "game_spec", metavar="MODULE:FACTORY",
              help="A function that returns the Game to run (default: the example arena).")
@click.option("--store", "store_path", type=click.Path(dir_okay=False, path_type=Path),
              help="The versions store (default: DIR/.moonbox-versions.db).")
@click.option("--no-store", is_flag=True, help="Record nothing; restore nothing.")
@click.option("--grant", "grant_mode", default="auto", show_default=True,
              type=click.Choice(["readonly", "ask", "auto", "full"]),
              help="The most any mod is granted, whatever its mod.toml asks for.")
@click.option("--tps", default=20.0, show_default=True, type=click.FloatRange(0.1, 1000),
              help="Ticks per second.")
@click.option("--ticks", type=click.IntRange(0), default=None,
              help="Run this many ticks, print plainly (reports on stdout; errors, trips "
                   "and quarantines on stderr), and exit (no live view).")
@click.option("--once", is_flag=True, help="Load (and restore) the mods, print, and exit.")
@click.option("--debounce-ms", default=400, show_default=True, type=click.IntRange(10, 10_000),
              help="The longest a burst of saves is grouped.")
@click.option("--step-ms", default=30, show_default=True, type=click.IntRange(5, 5_000),
              help="Quiet time after a save before the reload starts.")
@click.option("--isolate", is_flag=True,
              help="Run every mod in a worker process (and dry runs in one of their own); "
                   "the view shows each worker's memory and CPU.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="With --isolate: worker processes at most [default: 4].")
@click.option("--worker-memory", callback=_size, metavar="SIZE", default=None,
              help="With --isolate: each worker's memory limit, e.g. 512MB [default: 1GB].")
@click.option("--dashboard", "with_dashboard", is_flag=True,
              help="Serve a web dashboard of the running game (needs moonbox[dashboard]).")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="With --dashboard: the port, 0 for any free one [default: 8765].")
@click.option("--bind", "bind_host", metavar="ADDRESS", default=None,
              help="With --dashboard: the address to listen on [default: 127.0.0.1]; "
                   "any but a loopback address needs --token.")
@click.option("--token", envvar="MOONBOX_DASHBOARD_TOKEN", default=None,
              help="With --dashboard: a secret every API request must carry (16+ "
                   "characters; or MOONBOX_DASHBOARD_TOKEN).")
def dev(mods_dir: Path, init: bool, game_spec: str | None, store_path: Path | None,
        no_store: bool, grant_mode: str, tps: float, ticks: int | None, once: bool,
        debounce_ms: int, step_ms: int, isolate: bool, workers: int | None,
        worker_memory: int | None, with_dashboard: bool, port: int | None,
        bind_host: str | None, token: str | None) -> None:
    """Run a game with the mods of MODS_DIR and reload each mod when its files change.

    A changed mod is compiled and dry-run first; only a clean version is swapped in,
    carrying its state. A failed one is shown with its file and line, and the previous
    version runs on. Errors and trips of handlers, timers and tasks are shown with their
    mod, handler and file:line, stamped with their tick and time; a new version that goes
    live clears its mod's.

    With --isolate each mod runs in a worker process: a mod that crashes its worker,
    hangs in C or passes the worker's memory limit costs one call and is built again in a
    fresh worker. A --game factory gets the isolation options as keywords (isolation,
    workers, worker_memory_bytes); one that cannot take them is a usage error.

    With --dashboard a web page on http://127.0.0.1:8765/ shows the mods, their cost,
    tick health, the live log, errors with their source lines, versions (diff, rollback,
    reset), workers, the world and the event queues, while the game runs.

    A damaged versions store is read-only for the session: what it can still read is
    restored, nothing is recorded, and the start says how to recover it.

    To start from the example arena: moonbox dev my-mods --init, then edit
    my-mods/scoreboard/main.lua while it runs. --init also writes my-mods/moonbox-api.lua
    (the mod API for an editor, see moonbox stubs) and my-mods/.luarc.json. The example's
    glitch mod misbehaves on purpose: it passes its dry run, then trips its budget and is
    quarantined while the others play on.
    """
    from ..mods import ModError, ModHost, copy_arena_mods
    from ..mods._dev import (
        DevSession,
        describe_problem,
        describe_result,
        describe_store,
        describe_workers,
        game_factory,
        render,
    )
    from ..mods._stubs import write_editor_files

    console = Console(highlight=False, soft_wrap=True)
    errors = Console(stderr=True, highlight=False, soft_wrap=True)

    def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
        errors.print(f"[red]{escape(message)}[/]")
        sys.exit(code)

    if init:
        try:
            copied = copy_arena_mods(mods_dir)
        except (ModError, OSError) as exc:
            fail(f"--init: {exc}")
        console.print(f"copied the example mods into {escape(str(mods_dir))}: "
                      f"{', '.join(copied)}")
        if "glitch" in copied:
            console.print("(glitch misbehaves on purpose: it passes its dry run, then trips "
                          "its budget and is quarantined while the others play on)")
    elif not mods_dir.is_dir():
        fail(f"{mods_dir}: no such directory (--init copies the example mods into a new one)")
    try:
        factory = game_factory(game_spec)
    except ValueError as exc:
        fail(f"--game {exc}")
    options: dict[str, Any] = {}
    if isolate:
        if game_spec is not None and not _takes_isolation(factory):
            fail(f"--isolate: {game_spec} takes no isolation, workers and "
                 "worker_memory_bytes keywords; build an isolated Game in it, or let it "
                 "take them")
        options = {"isolation": "process", "workers": workers,
                   "worker_memory_bytes": worker_memory}
    elif workers is not None or worker_memory is not None:
        fail("--workers and --worker-memory need --isolate")
    if not with_dashboard and (port is not None or bind_host is not None or token is not None):
        fail("--port, --bind and --token need --dashboard")
    if with_dashboard and once:
        fail("--dashboard serves while the game runs: use it without --once")
    access = None
    if with_dashboard:
        from ..dashboard import DEFAULT_HOST, DEFAULT_PORT, INSTALL_HINT, Access

        try:
            access = Access(bind_host or DEFAULT_HOST, token)
            import sse_starlette  # noqa: F401
            import starlette  # noqa: F401
            import uvicorn  # noqa: F401
        except ConfigError as exc:
            fail(f"--bind: {exc}")
        except ImportError as exc:
            fail(f"--dashboard needs {exc.name}: {INSTALL_HINT}")
    store = None
    if not no_store:
        try:
            store = Store(store_path or mods_dir / ".moonbox-versions.db")
        except StoreError as exc:
            errors.print(f"[red]{escape(str(exc))}\nrunning without a versions store this "
                         "session: nothing is restored or recorded[/]")
        for line in describe_store(store):
            errors.print(f"[yellow]{escape(line)}[/]")
    game = factory(**options)
    policy = Permissions(mode=grant_mode)
    if init:
        try:
            written = write_editor_files(mods_dir, game.registry, policy)
        except OSError as exc:
            errors.print(f"[yellow]--init: the editor files were not written: "
                         f"{escape(str(exc))}[/]")
        else:
            console.print(f"wrote {', '.join(escape(p.name) for p in written)}: the mod "
                          f"API (mode {grant_mode}) for an editor")
    host = ModHost(game, mods_dir, policy=policy, store=store,
                   label=mods_dir.name or "mods")
    plain = once or ticks is not None
    session = DevSession(host, tick_s=1.0 / tps, watch=not once, debounce_ms=debounce_ms,
                         step_ms=step_ms)
    if plain:
        def on_result(result: Any) -> None:
            if result.ok:  # a refusal is a problem: on stderr, below
                console.print(escape(describe_result(result)))
            for line in result.reports:
                console.print(f"[{game.tick_count:4}] {escape(result.mod)}: {escape(line)} "
                              "(on_reload)")

        session.on_result = on_result
        session.on_problem = lambda p: errors.print(escape(describe_problem(p)))
    board = None
    if access is not None:
        from ..dashboard import Dashboard

        board = Dashboard(game, mods=host, host=access.host, token=access.token,
                          port=DEFAULT_PORT if port is None else port, tick_budget_s=1.0 / tps)
        try:
            url = board.start()
        except MoonboxError as exc:
            board.close()
            session.close()
            game.close()
            if store is not None:
                store.close()
            fail(f"--dashboard: {exc}")
        console.print(f"dashboard: {escape(url)}")

    def fed(show: Any) -> Any:
        """The tick callback, feeding the dashboard first."""
        if board is None:
            return show

        def on_tick(report: Any) -> None:
            board.after_tick(report, elapsed_s=session.last_tick_s)
            show(report)
        return on_tick

    try:
        results = session.start()
        failed = any(not r.ok for r in results)
        if once:
            for line in describe_workers(game):
                console.print(escape(line))
            sys.exit(EXIT_FAILED if failed else EXIT_OK)
        if ticks is not None:
            def show(report: object) -> None:
                # Failures, trips and quarantines: on stderr as the session logs them.
                tick = getattr(report, "tick", 0)
                for mod_id, line in getattr(report, "reports", ()):
                    console.print(f"[{tick:4}] {escape(mod_id)}: {escape(line)}")
                for mod_id in getattr(report, "restored", ()):
                    console.print(f"[{tick:4}] RESTORED {escape(mod_id)} in a fresh worker "
                                  "(its worker was lost)")

            session.run(ticks, on_tick=fed(show))
            for line in describe_workers(game):
                console.print(escape(line))
            troubled = sorted({p.mod for p in session.problems
                               if p.mod is not None and p.kind in ("error", "trip",
                                                                   "quarantined")})
            if troubled:
                errors.print(f"while the game ran, these mods failed or tripped (see above): "
                             f"{escape(', '.join(troubled))}")
            sys.exit(EXIT_FAILED if failed else EXIT_OK)
        # The live view wraps its own lines: a console that wraps. It reads the game as it
        # renders, so it is drawn here, on the game's thread, at most 8 times a second.
        view = Console(highlight=False)
        with Live(render(session), console=view, auto_refresh=False,
                  transient=False) as live:
            drawn = 0.0

            def redraw(_: object) -> None:
                nonlocal drawn
                now = time.monotonic()
                if now - drawn >= 0.125:
                    drawn = now
                    live.update(render(session), refresh=True)

            try:
                session.run(None, on_tick=fed(redraw))
            except KeyboardInterrupt:
                pass
    finally:
        if board is not None:
            board.close()
        session.close()
        game.close()
        if store is not None:
            store.close()
