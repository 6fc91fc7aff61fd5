"""``moonbox bench``: the command; what it measures lives in :mod:`moonbox.bench`."""

from __future__ import annotations

import sys

import click
from rich.console import Console

__all__ = ["bench"]


@click.command()
@click.option("--quick", is_flag=True, help="Fewer rounds: a rough table in a few seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--suite", is_flag=True,
              help="The benchmark programs of moonbox/bench/suite/ instead, each against raw "
                   "LuaJIT, every sample in a fresh runtime.")
@click.option("--rounds", type=click.IntRange(1, 100), default=None,
              help="With --suite: samples per program and mode (default 7, 3 with --quick).")
@click.option("--nojit", is_flag=True, help="With --suite: also time Sandbox(jit=False).")
@click.option("--program", "programs", multiple=True, metavar="NAME",
              help="With --suite: only this program (repeatable).")
@click.option("--engine", is_flag=True,
              help="The engine instead: 1,000 mods' budgeted tick handlers (500 with --quick) "
                   "against raw LuaJIT's floor, one runtime per mod.")
def bench(quick: bool, as_json: bool, suite: bool, rounds: int | None, nojit: bool,
          programs: tuple[str, ...], engine: bool) -> None:
    """Sandbox overhead: metered, hook-metered and raw LuaJIT, interleaved, as ratios."""
    console = Console(highlight=False, soft_wrap=True)
    if engine:
        if suite or rounds is not None or nojit or programs:
            raise click.UsageError("--engine goes with --quick and --json only")
        from ..bench import run_engine_bench

        if not console.is_terminal:
            console = Console(highlight=False, soft_wrap=True, width=140)
        sys.exit(run_engine_bench(console, quick=quick, as_json=as_json))
    if not suite:
        if rounds is not None or nojit or programs:
            raise click.UsageError("--rounds, --nojit and --program go with --suite")
        from ..bench import run_bench

        sys.exit(run_bench(console, quick=quick, as_json=as_json))
    from ..bench import QUICK_SUITE_ROUNDS, SUITE_ROUNDS, run_suite_bench

    if rounds is None:
        rounds = QUICK_SUITE_ROUNDS if quick else SUITE_ROUNDS
    if not console.is_terminal:
        # Piped or redirected (a log, a file): the whole table, not cut to 80 columns.
        console = Console(highlight=False, soft_wrap=True, width=140)
    sys.exit(run_suite_bench(console, rounds=rounds, nojit=nojit, names=programs or None,
                             as_json=as_json))
