"""``moonbox agent`` and ``moonbox eval-repair``: the Programmer loop from a shell.

``moonbox agent "TASK"`` asks a backend (``--base-url`` and ``--model``, the key from
``--api-key-env``) or replays a file (``--replay``) and streams the loop's progress: each
attempt's error and the final script. ``--json`` prints one JSON document instead. Exit
status: 0 solved, 1 not solved (rounds exhausted, rate limited), 2 usage or backend errors.

With ``--mods DIR --mod ID`` it writes a file of a mod for the game that ``moonbox dev
DIR`` runs (the same game factory, mods and versions store): each attempt runs in a fork
of that game, and the version that passes goes live by the hot reload path and is
recorded under ``mods/<id>/<path>``. ``--save-world FILE`` writes the live world after the
loop.

``moonbox eval-repair`` runs the repair corpus and prints, per round, how many tasks were
solved; ``--csv`` writes the same rows for plotting. Beside the pure tasks it runs the
game tasks (spawn, move, react to events) in the example arena's game, each in a mods
folder of its own (:func:`eval_game_host`).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table

from .._errors import MoonboxError
from ..agent import (
    DEFAULT_BUDGET,
    GAME_MOD,
    ChatClient,
    Event,
    LLMClient,
    Programmer,
    ProgrammerResult,
    ScriptedClient,
    Task,
    game_corpus_path,
    load_corpus,
    replies_path,
    run_repair_eval,
)
from ..bindings import MODES, Permissions, Registry, default_bindings
from ..sandbox import Budget

__all__ = ["agent", "eval_game_host", "eval_repair"]

EXIT_OK, EXIT_UNSOLVED, EXIT_USAGE = 0, 1, 2


def _client(base_url: str | None, model: str | None, api_key_env: str | None,
            replay: Path | None) -> LLMClient:
    if replay is not None:
        if base_url is not None:
            raise click.UsageError("give either --replay or --base-url, not both")
        return ScriptedClient.from_file(replay)
    if base_url is None or model is None:
        raise click.UsageError("give --base-url and --model (or --replay FILE)")
    return ChatClient(base_url, model, api_key_env=api_key_env)


def _backend_options(fn: Any) -> Any:
    for option in reversed([
        click.option("--base-url", help="A chat-completions API, e.g. http://127.0.0.1:8080/v1."),
        click.option("--model", help="The model name to ask for."),
        click.option("--api-key-env", metavar="VAR",
                     help="The environment variable holding the API key (none: no key)."),
        click.option("--replay", type=click.Path(path_type=Path, exists=True, dir_okay=False),
                     help="Replay scripted replies from a JSON Lines file instead."),
        click.option("--repairs", type=click.IntRange(min=0), default=3, show_default=True,
                     help="Repair rounds after the first attempt."),
    ]):
        fn = option(fn)
    return fn


@click.command()
@click.argument("task")
@_backend_options
@click.option("--mode", type=click.Choice(sorted(MODES)), default="auto", show_default=True,
              help="The permission mode the script runs with.")
@click.option("--key", default="agent:main", show_default=True,
              help="The script's key (<mod>:<name>) in the versions store.")
@click.option("--store", "store_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Record versions in this store (none: nothing is recorded).")
@click.option("--steps", type=click.IntRange(min=1), default=DEFAULT_BUDGET.steps,
              show_default=True, help="Steps each run may take.")
@click.option("--time", "time_s", type=click.FloatRange(min=0, min_open=True),
              default=DEFAULT_BUDGET.wall_s, show_default=True, help="Seconds each run may take.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document of the result.")
@click.option("--mods", "mods_dir", type=click.Path(path_type=Path, file_okay=False,
                                                    exists=True),
              help="Work on a mod of the game made from this mods folder (as moonbox dev).")
@click.option("--mod", "mod_id", metavar="ID", help="The mod to write (with --mods).")
@click.option("--file", "mod_file", metavar="PATH",
              help="The mod's file to write (default: its entry file).")
@click.option("--game", "game_spec", metavar="MODULE:FACTORY",
              help="The game factory, as moonbox dev takes it (default: the example arena).")
@click.option("--fork-ticks", type=click.IntRange(min=1), default=1, show_default=True,
              help="Ticks each attempt's fork runs (with --mods).")
@click.option("--save-world", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the live world (World.snapshot) here after the loop (with --mods).")
def agent(task: str, base_url: str | None, model: str | None, api_key_env: str | None,
          replay: Path | None, repairs: int, mode: str, key: str, store_path: Path | None,
          steps: int, time_s: float, as_json: bool, mods_dir: Path | None,
          mod_id: str | None, mod_file: str | None, game_spec: str | None, fork_ticks: int,
          save_world: Path | None) -> None:
    """Ask the Programmer for a script that does TASK, repairing it from its failures.

    The script runs with the default bindings (report, add) under --mode. With --mods DIR
    --mod ID it is a file of that mod instead, tried in forks of the game and put live by
    a hot reload; --mode is then the most the host grants (as moonbox dev --grant), the
    budget is the game's, and the store defaults to DIR/.moonbox-versions.db. Exit status:
    0 solved, 1 not solved, 2 usage or backend errors.
    """
    from ..store import Store

    console = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if mods_dir is not None or mod_id is not None:
        if mods_dir is None or mod_id is None:
            raise click.UsageError("give --mods DIR and --mod ID together")
        _agent_for_mod(task, _client(base_url, model, api_key_env, replay), repairs, mode,
                       store_path, as_json, mods_dir, mod_id, mod_file, game_spec,
                       fork_ticks, save_world, console, err)
        return
    if save_world is not None or mod_file is not None or game_spec is not None:
        raise click.UsageError("--save-world, --file and --game need --mods and --mod")
    try:
        client = _client(base_url, model, api_key_env, replay)
        budget = Budget(steps=steps, wall_s=time_s, alloc_bytes=DEFAULT_BUDGET.alloc_bytes,
                        max_memory=DEFAULT_BUDGET.max_memory)
        store = Store(store_path) if store_path is not None else None
    except (MoonboxError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    registry = Registry(default_bindings())
    progress = _Progress(console) if not as_json else None
    try:
        programmer = Programmer(client, registry, store=store, budget=budget,
                                max_repairs=repairs, stream=not as_json,
                                on_event=progress)
        result = programmer.run(Task(task, key=key, permissions=Permissions(mode=mode)))  # type: ignore[arg-type]
    except MoonboxError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        sys.exit(EXIT_USAGE)
    finally:
        registry.close()
        if store is not None:
            store.close()
        close = getattr(client, "close", None)
        if close is not None:
            close()
    if as_json:
        print(json.dumps(result.to_dict(), ensure_ascii=False), flush=True)
    else:
        _print_result(result, console)
    if result.status == "client_error":
        sys.exit(EXIT_USAGE)
    sys.exit(EXIT_OK if result.solved else EXIT_UNSOLVED)


def _agent_for_mod(task: str, client: LLMClient, repairs: int, mode: str,
                   store_path: Path | None, as_json: bool, mods_dir: Path, mod_id: str,
                   mod_file: str | None, game_spec: str | None, fork_ticks: int,
                   save_world: Path | None, console: Console, err: Console) -> None:
    from ..agent import LiveMod
    from ..mods import ModHost
    from ..mods._dev import game_factory
    from ..store import Store

    try:
        factory = game_factory(game_spec)
        store = Store(store_path or mods_dir / ".moonbox-versions.db")
    except (MoonboxError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    game = factory()
    host = ModHost(game, mods_dir, policy=Permissions(mode=mode), store=store,  # type: ignore[arg-type]
                   label=mods_dir.name or "mods")
    progress = _Progress(console) if not as_json else None
    try:
        loads = host.load_all()
        try:
            target = LiveMod(host, mod_id, mod_file)
        except MoonboxError:
            why = next((r.error for r in loads if r.mod == mod_id and r.error), None)
            err.print(f"[bold red]error:[/] mod {escape(mod_id)!r} is not running in "
                      f"{escape(str(mods_dir))}" + (f": {escape(why)}" if why else ""))
            sys.exit(EXIT_USAGE)
        if target.source is None:
            err.print(f"[bold red]error:[/] mod {escape(mod_id)!r} has no file "
                      f"{escape(target.path)!r}")
            sys.exit(EXIT_USAGE)
        target.ticks = fork_ticks
        programmer = target.programmer(client, max_repairs=repairs, stream=not as_json,
                                       on_event=progress)
        result = programmer.run(target.task(task))
        if save_world is not None:
            save_world.write_bytes(game.world.snapshot())
    except MoonboxError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        sys.exit(EXIT_USAGE)
    finally:
        host.close()
        game.close()
        store.close()
        close = getattr(client, "close", None)
        if close is not None:
            close()
    if as_json:
        data = result.to_dict()
        data["mod"] = mod_id
        data["tick"] = game.tick_count
        print(json.dumps(data, ensure_ascii=False), flush=True)
    else:
        _print_result(result, console)
        if save_world is not None:
            console.print(f"[dim]wrote the live world to {escape(str(save_world))}[/]")
    if result.status == "client_error":
        sys.exit(EXIT_USAGE)
    sys.exit(EXIT_OK if result.solved else EXIT_UNSOLVED)


class _Progress:
    """Prints the loop's events as they happen; streamed text is shown dimmed."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.streaming = False

    def __call__(self, event: Event) -> None:
        c = self.console
        if event.name == "generation_delta":
            self.streaming = True
            c.print(f"[dim]{escape(event.data['text'])}[/]", end="")
            return
        if self.streaming:
            c.print()
            self.streaming = False
        d = event.data
        if event.name == "generation_started":
            c.print(f"[bold]attempt {event.attempt}[/] [dim]asking {escape(str(d['model']))} "
                    f"(trace {event.trace_id})[/]")
        elif event.name == "execution_failed":
            c.print(f"  [bold red]failed[/] {escape(d['summary'])}")
        elif event.name == "execution_succeeded":
            c.print("  [bold green]ran cleanly[/]")
            for line in d.get("reports", []):
                c.print(f"  [cyan]report[/] {escape(line)}")
        elif event.name == "went_live":
            c.print(f"  [green]live[/] {escape(d['key'])}: swapped into the running game")
        elif event.name == "version_recorded":
            c.print(f"  [green]recorded[/] {escape(d['key'])} revision {d['revision']}")
        elif event.name == "repair_exhausted":
            c.print(f"[bold yellow]no working script after {d['attempts']} attempts[/]")
        elif event.name == "rate_limited":
            c.print(f"[bold yellow]rate limited[/]: retry in {d['retry_in_s']:.1f} s")
        elif event.name == "client_failed":
            c.print(f"[bold red]backend failed[/] {escape(d['message'])}")


def _print_result(result: ProgrammerResult, console: Console) -> None:
    colour = "green" if result.solved else "yellow" if result.status == "exhausted" else "red"
    console.print(f"[bold {colour}]{result.status}[/] after {len(result.attempts)} "
                  f"attempt(s), trace {result.trace_id}")
    if result.error is not None:
        console.print(f"  {escape(str(result.error))}")
    if result.source is not None:
        title = "the script" if result.solved else "the last good version (kept)"
        console.print(f"[bold]{title}[/]" + (f" [dim]revision {result.revision}[/]"
                                              if result.revision else ""))
        console.print(Syntax(result.source, "lua", line_numbers=True, theme="ansi_dark"))


_GAME_TASK_STUB = "-- the mod the Programmer writes\n"


@contextmanager
def eval_game_host(task: Any) -> Iterator[Any]:
    """The game of a game task of the corpus: the example arena, with a mods folder of
    its own holding the stub of the mod ``eval`` and the task's other mods, loaded by a
    :class:`~moonbox.mods.ModHost` (no versions store)."""
    from ..mods import ModHost
    from ..mods._dev import arena_game

    spec = task.game or {}
    with tempfile.TemporaryDirectory(prefix="moonbox-eval-") as tmp:
        root = Path(tmp)
        for mod_id, main in {GAME_MOD: spec.get("main", _GAME_TASK_STUB),
                             **spec.get("mods", {})}.items():
            folder = root / mod_id
            folder.mkdir()
            (folder / "mod.toml").write_text(f'id = "{mod_id}"\nversion = "1.0.0"\n'
                                             '[permissions]\nmode = "auto"\n')
            (folder / "main.lua").write_text(main)
        game = arena_game()
        host = ModHost(game, root, label="eval")
        try:
            bad = [r for r in host.load_all() if not r.ok]
            if bad:
                raise click.ClickException(f"task {task.id!r}: its game did not load: "
                                           f"{bad[0].error}")
            yield host
        finally:
            host.close()
            game.close()


@click.command("eval-repair")
@_backend_options
@click.option("--corpus", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="A corpus of tasks (default: the shipped one).")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the per-round rows here, as CSV.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document of the results.")
@click.option("--no-game", is_flag=True,
              help="Only the pure tasks, without the shipped game tasks.")
def eval_repair(base_url: str | None, model: str | None, api_key_env: str | None,
                replay: Path | None, repairs: int, corpus: Path | None,
                csv_path: Path | None, as_json: bool, no_game: bool) -> None:
    """Run the repair corpus through the loop and count what each round solved.

    Without --base-url it replays the shipped scripted replies (every failure kind:
    syntax, runtime, each budget, denied bindings, failed checks, no code). Round r counts
    the tasks solved within r repairs. Beside the pure tasks (in a scratch list) come the
    game tasks (spawn, move, react to events), each writing a mod of the example arena's
    game, tried in forks of it.
    """
    console = Console(highlight=False, soft_wrap=True)
    try:
        tasks = load_corpus(corpus)
        if corpus is None and not no_game:
            tasks += load_corpus(game_corpus_path())
        client = None
        if base_url is not None:
            client = _client(base_url, model, api_key_env, replay)
    except MoonboxError as exc:
        raise click.UsageError(str(exc)) from None

    def on_task(task: Any, result: ProgrammerResult) -> None:
        if as_json:
            return
        kinds = ", ".join(a.failure.kind for a in result.attempts if a.failure) or "-"
        colour = "green" if result.solved else "yellow"
        console.print(f"[{colour}]{result.status:<12}[/] {escape(task.id):<18} "
                      f"[dim]attempts {len(result.attempts)}, failures: {escape(kinds)}[/]")

    try:
        report = run_repair_eval(tasks, client=client, replies=replay or replies_path(),
                                 max_repairs=repairs, on_task=on_task,
                                 game_host=eval_game_host)
    except MoonboxError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(exc))}")
        sys.exit(EXIT_USAGE)
    finally:
        close = getattr(client, "close", None)
        if close is not None:
            close()
    if csv_path is not None:
        report.write_csv(csv_path)
    if as_json:
        print(json.dumps(report.to_dict()), flush=True)
        sys.exit(EXIT_OK)
    table = Table(box=box.SIMPLE, title="solved per round")
    for column in ("round", "attempted", "solved this round", "solved", "of"):
        table.add_column(column, justify="right")
    for row in report.rows():
        table.add_row(str(row["round"]), str(row["attempted"]), str(row["solved_this_round"]),
                      str(row["solved"]), str(row["total"]))
    console.print(table)
    if csv_path is not None:
        console.print(f"[dim]wrote {escape(str(csv_path))}[/]")
    sys.exit(EXIT_OK)
