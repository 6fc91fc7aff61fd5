"""``moonbox run FILE...``: each file as its own mod, in order, in one host process.

``moonbox run`` keeps a fixed contract that other tools rely on (flags, JSON lines, exit
codes); see README.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from .._errors import MAX_SOURCE_BYTES, MoonboxError, ScriptError, SourceTooLarge
from ..bindings import Registry
from ..sandbox import Budget, Outcome, parse_size
from ..sandbox._marshal import format_value
from ..world import CommandResult, World
from ._run_world import (
    apply_file_commands,
    load_world,
    mod_permissions,
    save_world,
    world_registry,
)

__all__ = ["run"]

EXIT_OK, EXIT_SCRIPT, EXIT_USAGE, EXIT_BUDGET = 0, 1, 2, 3

DEFAULT_STEPS = 10_000_000
DEFAULT_TIME_S = 1.0
DEFAULT_MEMORY = "64MB"
DEFAULT_HEAP = "64MB"


class _Size(click.ParamType):
    name = "bytes"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--steps", type=click.IntRange(min=1), default=DEFAULT_STEPS, show_default=True,
              help="Metering steps per resume (one per loop iteration, call or goto).")
@click.option("--memory", type=_Size(), default=DEFAULT_MEMORY, show_default=True,
              help="Heap growth allowed per resume (64MB-style sizes).")
@click.option("--time", "time_s", type=click.FloatRange(min=0, min_open=True),
              default=DEFAULT_TIME_S, show_default=True, help="Wall-clock seconds per resume.")
@click.option("--heap", type=_Size(), default=DEFAULT_HEAP, show_default=True,
              help="The mod's heap cap (64MB-style sizes).")
@click.option("--no-jit", is_flag=True, help="JIT off, metered by a count hook.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per file, one per line.")
@click.option("--world", "world_file", type=click.Path(path_type=Path, dir_okay=False),
              help="Start from this world snapshot instead of an empty scratch world.")
@click.option("--save-world", "save_file", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the resulting world snapshot (msgpack) to this file.")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=None,
              help="Replay: seeded math.random per file and a fixed pairs order; the JSON "
                   "then holds only figures that replay (steps, not time or memory).")
@click.option("--isolate", is_flag=True,
              help="Run each file in a worker process with an OS memory limit and a kill "
                   "on wall overrun; bindings still run here.")
def run(files: tuple[Path, ...], steps: int, memory: int, time_s: float, heap: int,
        no_jit: bool, as_json: bool, world_file: Path | None, save_file: Path | None,
        isolate: bool, seed: int | None) -> None:
    """Run each FILE as its own mod, in order, in one host process.

    Scripts get the coreai_world_* bindings over one world; each file's commands are
    applied after its run, so later files see them.

    With --seed N, each file's math.random is seeded from N and the file's path (a file
    that reseeds its own generator changes nothing another file draws) and pairs visits
    keys in a fixed order, so two runs of the same files print the same JSON.

    With --isolate, a worker that crashes, overruns its wall budget or passes its memory
    limit is killed and the file ends as an error (kind ``crashed``) or a budget trip.

    Exit status: 0 if every file is ok, 3 if any tripped a budget (and none had another
    error), 1 if any had a script error, 2 for usage or host errors.
    """
    try:
        budget = Budget(steps=steps, alloc_bytes=memory, wall_s=time_s, max_memory=heap)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    world = load_world(world_file)
    registry = world_registry(world)
    console = Console(highlight=False, soft_wrap=True)
    worst = EXIT_OK
    try:
        for path in files:
            code = _run_file(path, budget, not no_jit, as_json, console, world, registry,
                             isolate, seed)
            worst = _combine(worst, code)
    finally:
        registry.close()
    if save_file is not None:
        save_world(world, save_file)
    sys.exit(worst)


def _combine(worst: int, code: int) -> int:
    rank = {EXIT_OK: 0, EXIT_BUDGET: 1, EXIT_SCRIPT: 2, EXIT_USAGE: 3}
    return code if rank[code] > rank[worst] else worst


def file_seed(seed: int, path: Path) -> int:
    """The seed of one file's runtime: from the run's seed and the file's path as given."""
    digest = hashlib.blake2b(f"{seed}\0{path.as_posix()}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 2**31


def _run_file(path: Path, budget: Budget, jit: bool, as_json: bool, console: Console,
              world: World, registry: Registry, isolate: bool = False,
              seed: int | None = None) -> int:
    chunk = "@" + path.as_posix()
    replay: dict[str, Any] = {}
    if seed is not None:
        replay = {"seed": file_seed(seed, path), "deterministic": True}
    try:
        with path.open("rb") as handle:  # no more than the limit and one byte: never all
            source = handle.read(MAX_SOURCE_BYTES + 1)
    except OSError as exc:
        return _host_failure(path, f"cannot read {path}: {exc.strerror or exc}", as_json, console)
    mod_id = str(path)
    try:
        with registry.mod(mod_id, mod_permissions()) as api:
            if len(source) > MAX_SOURCE_BYTES:  # refused unread: its real size, from the disk
                outcome = Outcome("error", (), SourceTooLarge(
                    path.stat().st_size, MAX_SOURCE_BYTES, chunk=chunk))
            elif isolate:
                from ..isolation import IsolatedSandbox

                with IsolatedSandbox(budget, jit=jit, host_functions=api.host_functions,
                                     state_global=None, mod_id=mod_id,
                                     **replay) as isolated:
                    outcome = isolated.run(source, chunk)
            else:
                with api.sandbox(budget, jit=jit, **replay) as sb:
                    outcome = sb.run(source, chunk)
    except MoonboxError as exc:
        world.rollback(mod_id)
        world.apply()  # nothing of a file that could not run stays queued
        return _host_failure(path, str(exc), as_json, console)
    results, events = apply_file_commands(world, mod_id)
    if as_json:
        record = _json_record(path, outcome)
        if seed is not None:  # only what replays: time and memory differ from run to run
            record["stats"] = {"steps": outcome.stats.steps}
        record["commands"] = [r.to_dict() for r in results]
        record["events"] = _jsonable(events)
        print(json.dumps(record, ensure_ascii=False), flush=True)
    else:
        _print_outcome(path, outcome, console)
        _print_commands(results, console)
    if outcome.status == "budget":
        return EXIT_BUDGET
    return EXIT_OK if outcome.ok else EXIT_SCRIPT


def _host_failure(path: Path, message: str, as_json: bool, console: Console) -> int:
    if as_json:
        record = {
            "file": str(path), "status": "error", "budget": None, "value": None, "reports": [],
            "error": {"kind": "host", "message": message, "chunk": None, "line": None,
                      "traceback": []},
            "stats": {"steps": 0, "memory_peak_bytes": 0, "wall_s": 0.0},
            "commands": [], "events": [],
        }
        print(json.dumps(record), flush=True)
    else:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"[bold red]{escape(str(path))}: host error:[/] {escape(message)}"
        )
    return EXIT_USAGE


def _json_record(path: Path, outcome: Outcome) -> dict[str, Any]:
    status = "ok" if outcome.ok else outcome.status
    return {
        "file": str(path),
        "status": status,
        "budget": outcome.budget,
        "value": _jsonable(outcome.value),
        "reports": list(outcome.reports),
        "error": outcome.error.to_dict() if outcome.error else None,
        "stats": outcome.stats.to_dict(),
    }


def _print_outcome(path: Path, outcome: Outcome, console: Console) -> None:
    s = outcome.stats
    figures = f"{s.steps:,} steps, {s.wall_s * 1000:.1f} ms, peak {s.memory_peak_bytes / 1024:,.0f} KiB"
    name = escape(str(path))
    if outcome.ok:
        console.print(f"[bold green]ok[/]      {name}  [dim]({figures})[/]")
    elif outcome.status == "budget":
        console.print(f"[bold yellow]budget[/]  {name}  [dim]({figures})[/]")
    else:
        console.print(f"[bold red]error[/]   {name}  [dim]({figures})[/]")
    for line in outcome.reports:
        console.print(f"  [cyan]report[/] {escape(line)}")
    if outcome.ok and outcome.values:
        console.print(f"  [cyan]value[/]  {escape(format_value(outcome.value, 400))}")
    if outcome.error is not None:
        _print_error(outcome.error, console)


def _print_commands(results: list[CommandResult], console: Console) -> None:
    for r in results[:50]:
        if r.applied:
            console.print(f"  [cyan]world[/]  {escape(r.kind)} applied: {escape(r.message)}")
        else:
            console.print(f"  [yellow]world[/]  {escape(r.kind)} refused ({escape(str(r.reason))}): "
                          f"{escape(r.message)}")
    if len(results) > 50:
        console.print(f"  [dim]... {len(results) - 50} more commands[/]")


def _print_error(error: ScriptError, console: Console) -> None:
    console.print(f"  [bold]{escape(error.kind)}[/] {escape(str(error))}")
    for frame in error.traceback[:10]:
        console.print(f"    [dim]{escape(str(frame))}[/]")

