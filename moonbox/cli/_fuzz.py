"""``moonbox fuzz``: run generated hostile programs and check the sandbox's invariants."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["fuzz"]


@click.command()
@click.option("--examples", type=click.IntRange(min=0), default=200, show_default=True,
              help="Programs to generate and run.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the generator: the same seed runs the same programs.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("fuzz-failures"), show_default=True,
              help="Directory for reproducers (one .lua file per failing program).")
@click.option("--no-jit", is_flag=True, help="JIT off, metered by a count hook.")
@click.option("--wall-s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Wall budget of each resume of a program [default: 0.2].")
@click.option("--wall-margin-s", type=click.FloatRange(min=0), default=None,
              help="How late past its wall budget a resume may end [default: 0.75].")
@click.option("--isolate", is_flag=True,
              help="Also run every program through an isolated sandbox (moonbox.isolation) "
                   "and check that isolation holds: outcomes across the pipes, kills, "
                   "restores, parity with the in-process run, an isolated sibling.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def fuzz(examples: int, seed: int, out_dir: Path, no_jit: bool, wall_s: float | None,
         wall_margin_s: float | None, isolate: bool, as_json: bool) -> None:
    """Run EXAMPLES generated hostile programs, each checked against every invariant.

    Most programs are composed from dangerous primitives; the others are of the kinds of
    attack on the host (hostile sizes, metering gaps, colliding keys, error values, source
    sizes, report floods, long operations), each with the invariants that catch it
    (docs/threat-model.md, Fuzzing).

    Every program runs in a worker process, so a crash of the VM is a finding, not the end
    of the run. With --isolate each program runs a second time through moonbox.isolation's
    IsolatedSandbox (in a worker of that worker), so the isolation layer is fuzzed too. Each
    failing program is written to --out as a reproducer whose header names the broken
    invariants. Exit status: 0 if no program broke an invariant, 1 if any did, 2 for usage
    errors (or when the generator's package is not installed).
    """
    try:
        from ..fuzz import DEFAULT_MARGIN_S, DEFAULT_WALL_S
        from ..fuzz._runner import FuzzReport
        from ..fuzz._runner import fuzz as run_fuzz
    except ImportError as exc:
        raise click.UsageError(
            f"moonbox fuzz needs the dev extras ({exc.name} is missing): "
            "pip install 'moonbox[fuzz]'"
        ) from None
    wall = DEFAULT_WALL_S if wall_s is None else wall_s
    margin = DEFAULT_MARGIN_S if wall_margin_s is None else wall_margin_s
    console = Console(stderr=as_json, highlight=False, soft_wrap=True)
    mode = ("jit" if not no_jit else "no-jit") + (", isolated" if isolate else "")
    progress = Progress(
        TextColumn(f"fuzz [dim]({mode}, seed {seed})[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[found]}"),
        TimeElapsedColumn(),
        console=console,
        transient=as_json,
        disable=as_json and not console.is_terminal,
    )

    def on_example(index: int, report: FuzzReport) -> None:
        found = len(report.failures)
        progress.update(task, advance=1,
                        found=f"[red]{found} failing[/]" if found else "[green]0 failing[/]")

    with progress:
        task = progress.add_task("fuzz", total=examples, found="[green]0 failing[/]")
        report = run_fuzz(examples, seed=seed, jit=not no_jit, wall_s=wall, margin_s=margin,
                          out_dir=out_dir, on_example=on_example, isolate=isolate)
    if as_json:
        print(json.dumps(report.to_dict()), flush=True)
    else:
        _print_report(report, console)
    sys.exit(0 if report.ok else 1)


def _print_report(report: object, console: Console) -> None:
    from ..fuzz._runner import FuzzReport

    assert isinstance(report, FuzzReport)
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(report.statuses.items()))
    console.print(
        f"{report.examples} programs in {report.elapsed_s:.1f} s "
        f"({report.program_s:.1f} s inside the sandbox); worker memory grew at most "
        f"{report.rss_peak_growth_bytes / 2**20:.0f} MiB"
    )
    console.print(f"[dim]outcomes: {escape(statuses)}[/]")
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(report.kinds.items()))
    console.print(f"[dim]kinds: {escape(kinds)}[/]")
    if report.ok:
        console.print("[bold green]no invariant broken[/]")
        return
    console.print(f"[bold red]{len(report.failures)} failing program"
                  f"{'s' * (len(report.failures) != 1)}[/]")
    for failure in report.failures:
        where = escape(str(failure.path)) if failure.path else f"example {failure.index}"
        console.print(f"  [bold]{where}[/]")
        for violation in failure.violations:
            console.print(f"    [red]{escape(violation.invariant)}[/] "
                          f"{escape(violation.detail[:300])}")
