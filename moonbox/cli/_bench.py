"""``moonbox bench``: the command; what it measures lives in :mod:`moonbox.bench`."""

from __future__ import annotations

import sys

import click
from rich.console import Console

__all__ = ["bench"]


@click.command()
@click.option("--quick", is_flag=True, help="Fewer rounds: a rough table in a few seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench(quick: bool, as_json: bool) -> None:
    """Sandbox overhead: metered, hook-metered and raw LuaJIT, interleaved, as ratios."""
    from ..bench import run_bench

    sys.exit(run_bench(Console(highlight=False, soft_wrap=True), quick=quick, as_json=as_json))
