"""What ``moonbox bench`` prints: tables of the figures and targets, or one JSON object."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from .._errors import MoonboxError
from ._measure import COSTS, TARGET_WORKLOAD, TRIP_LOOPS, TRIP_WALL_S, _environment, measure
from ._suite import TARGET_SUITE_PROGRAM, run_suite
from ._workloads import MODES, Mode

__all__ = ["run_bench", "run_engine_bench", "run_suite_bench"]

MODE_HEADERS = ("raw", "metered", "no-jit")


def _verdict(met: bool) -> str:
    return "[green]PASS[/]" if met else "[red]MISS[/]"


def _machine(env: dict[str, Any]) -> str:
    """What ran the measurement, as each table's heading says it."""
    return f"{env['luajit']}, lupa {env['lupa']}, Python {env['python']}, {env['cpus']} CPUs"


def _render(report: dict[str, Any], console: Console) -> None:
    env = report["environment"]
    console.print(
        f"[bold]moonbox bench[/]{' --quick' if report['quick'] else ''}: "
        f"median of {report['rounds']} interleaved rounds, {_machine(env)}, "
        f"{report['elapsed_s']:.0f} s"
    )
    table = Table(title="Workloads: ms per run, and ratio to raw LuaJIT (JIT on)")
    for header in ("workload", *MODE_HEADERS, "metered/raw", "no-jit/raw",
                   f"≤{TARGET_WORKLOAD}x"):
        table.add_column(header, justify="left" if header == "workload" else "right",
                         no_wrap=True)
    for w in report["workloads"]:
        table.add_row(
            w["name"],
            f"{w['raw_ms']:.1f}", f"{w['metered_ms']:.1f}", f"{w['nojit_ms']:.1f}",
            f"{w['metered_ratio']:.2f}x", f"{w['nojit_ratio']:.2f}x",
            _verdict(w["metered_ratio"] <= TARGET_WORKLOAD),
        )
    geo = report["geomean"]
    table.add_section()
    table.add_row("geomean", "", "", "", f"{geo['metered_ratio']:.2f}x",
                  f"{geo['nojit_ratio']:.2f}x", "")
    table.caption = ("geomean: all workloads. raw LuaJIT calls the same add binding, "
                     "validation included, as a bare Python function")
    console.print(table)
    best = ", ".join(f"{w['name']} {w['metered_ratio_min']:.2f}x" for w in report["workloads"])
    console.print(f"[dim]metered/raw from the fastest round of each (less sensitive to other "
                  f"load): {best}; geomean {geo['metered_ratio_min']:.2f}x[/]")

    costs = report["costs"]
    fixed = Table(title="Fixed costs, µs (metered and no-jit: moonbox's sandbox)")
    for header in ("what", *MODE_HEADERS):
        fixed.add_column(header, justify="left" if header == "what" else "right", no_wrap=True)
    labels = ("create a runtime", "call add() from Lua", "resume a yielding handler")
    for key, label in zip(COSTS, labels, strict=True):
        fixed.add_row(label, *(f"{costs[key][m]:.2f}" for m in MODES))
    fixed.caption = (f"a bare lupa callback (no validation): "
                     f"{costs['bare_callback_us']['raw']:.2f} µs per call")
    console.print(fixed)
    trips = ", ".join(f"{mode} median {m['median_ms']:.1f} ms, worst {m['max_ms']:.1f} ms"
                      for mode, m in report["trip_margins"].items())
    console.print(f"Time trips past wall_s={TRIP_WALL_S:g} s ({', '.join(TRIP_LOOPS)}): {trips}")

    iso = Table(title="Process isolation: µs per call (in a worker: no state snapshot)")
    for header in ("handler", "in process", "in a worker", "round trips", "per round trip"):
        iso.add_column(header, justify="left" if header == "handler" else "right", no_wrap=True)
    for name, m in report["isolation"].items():
        iso.add_row(name, f"{m['in_process_us']:.1f}", f"{m['isolated_us']:.1f}",
                    str(m["round_trips"]), f"{m['per_round_trip_us']:.1f}")
    wire = ("compiled" if env["isolation_wire"] == "compiled"
            else "in Python (the compiled module is not built here)")
    contended = ", ".join(f"{name} {m['contended_samples']}/{m['samples']}"
                          for name, m in report["isolation"].items() if "samples" in m)
    iso.caption = (f"each side's wait and reads: {wire}; samples that found the CPUs "
                   f"contended, when both sides sleep instead of busy-waiting and a round trip "
                   f"costs several times more: {contended}; raw floor: a raw LuaJIT function "
                   "in a worker process, plain frames over pipes, nothing checked")
    console.print(iso)

    targets = Table(title="Targets")
    for header in ("target", "measured", "limit", ""):
        targets.add_column(header, justify="left" if header == "target" else "right")
    for t in report["targets"]:
        fmt = "{:.2f}" if t["unit"] == "x" else "{:.1f}"  # µs and ms: one decimal
        targets.add_row(t["name"], fmt.format(t["value"]) + " " + t["unit"],
                        f"≤ {t['limit']:g} {t['unit']}", _verdict(t["met"]))
    console.print(targets)
    console.print("[dim]Shared machines are noisy: a MISS is reported, never an error.[/]")


def run_bench(console: Console, *, quick: bool, as_json: bool) -> int:
    """Measure, then print a table (or one JSON object). Returns the exit status.

    0 whatever the targets say (timings on shared machines are noisy); 1 if the benchmark
    itself failed (a workload errored or the modes disagreed on a checksum).
    """
    return _measured(console, as_json, "measuring: raw LuaJIT, metered and no-jit, "
                     "interleaved; then process isolation...",
                     lambda progress: measure(quick), _render)


def _measured(console: Console, as_json: bool, status: str,
              measure_with: Callable[[Callable[[str], Any] | None], dict[str, Any]],
              render: Callable[[dict[str, Any], Console], None]) -> int:
    """What every ``moonbox bench`` does: ``measure_with(progress)`` (``progress`` None for
    JSON, else the status line's update, ``status`` first), then the report as one JSON
    object or rendered. 1 if the measurement failed (said on stderr), else 0."""
    try:
        if as_json:
            report = measure_with(None)
        else:
            with console.status(status) as shown:
                report = measure_with(shown.update)
    except MoonboxError as exc:
        Console(stderr=True, highlight=False).print(f"[bold red]bench failed:[/] {exc}")
        return 1
    if as_json:
        console.out(json.dumps(report, ensure_ascii=False), highlight=False)
    else:
        render(report, console)
    return 0


def _render_suite(report: dict[str, Any], console: Console) -> None:
    env = report["environment"]
    modes = report["modes"]
    console.print(
        f"[bold]moonbox bench --suite[/]: {len(report['programs'])} programs, median of "
        f"{report['rounds']} interleaved rounds, each sample in a fresh runtime; "
        f"{_machine(env)}, sandbox allocator: {env['heap']}, {report['elapsed_s']:.0f} s"
    )
    table = Table(title="Programs: ms per run, and moonbox's ratio to raw LuaJIT (JIT on)")
    headers = ["program", "raw ms", "moonbox ms", "ratio", "range"]
    if "nojit" in modes:
        headers += ["no-jit ms", "no-jit ratio"]
    headers.append(f"≤{TARGET_SUITE_PROGRAM:g}x")
    for header in headers:
        table.add_column(header, justify="left" if header == "program" else "right",
                         no_wrap=True)
    for p in report["programs"]:
        low, high = p["metered_ratio_range"]
        row = [p["name"], f"{p['raw_ms']:.1f}", f"{p['metered_ms']:.1f}",
               f"{p['metered_ratio']:.2f}x", f"{low:.2f}-{high:.2f}"]
        if "nojit" in modes:
            row += [f"{p['nojit_ms']:.1f}", f"{p['nojit_ratio']:.2f}x"]
        row.append(_verdict(p["metered_ratio"] <= TARGET_SUITE_PROGRAM))
        table.add_row(*row)
    table.add_section()
    geo = ["geomean", "", "", f"{report['metered_geomean']:.2f}x", ""]
    if "nojit" in modes:
        geo += ["", f"{report['nojit_geomean']:.2f}x"]
    table.add_row(*geo, "")
    table.caption = ("ratio: moonbox's median over raw's; range: the rounds' own ratios (each "
                     "round's two samples taken one after the other). moonbox: Sandbox with the "
                     "heap cap and the step, allocation and wall budgets in force")
    console.print(table)
    targets = Table(title="Targets")
    for header in ("target", "measured", "limit", ""):
        targets.add_column(header, justify="left" if header == "target" else "right")
    for t in report["targets"]:
        targets.add_row(t["name"], f"{t['value']:.2f} x", f"≤ {t['limit']:g} x",
                        _verdict(t["met"]))
    console.print(targets)
    above = report["metered_above_target"]
    if above:
        console.print(f"Above {TARGET_SUITE_PROGRAM:g}x: {', '.join(above)}")
    console.print("[dim]Shared machines are noisy: a MISS is reported, never an error.[/]")


def run_suite_bench(console: Console, *, rounds: int, nojit: bool,
                    names: tuple[str, ...] | None, as_json: bool) -> int:
    """Measure the benchmark suite, then print a table (or one JSON object). Returns the
    exit status: 0 whatever the targets say, 1 if the benchmark itself failed (a program
    failed, or returned another checksum than raw LuaJIT's)."""
    modes: tuple[Mode, ...] = ("raw", "metered", "nojit") if nojit else ("raw", "metered")

    def measure_with(progress: Callable[[str], Any] | None) -> dict[str, Any]:
        report = run_suite(rounds, modes, names, progress=progress)
        report["environment"] = _environment()
        return report

    return _measured(console, as_json, "measuring the suite: raw LuaJIT and moonbox, "
                     "interleaved...", measure_with, _render_suite)


def _render_engine(report: dict[str, Any], console: Console) -> None:
    console.print(
        f"[bold]moonbox bench --engine[/]: {report['mods']} mods, {report['warm']} ticks warm, "
        f"{report['blocks']} blocks of {max(1, report['ticks'] // report['blocks'])} ticks, "
        f"each of moonbox's followed by one of the floor's; {_machine(report['environment'])}, "
        f"{report['elapsed_s']:.0f} s"
    )
    table = Table(title="One tick handler per mod: CPU µs per call, and moonbox's ratio to the "
                        "raw LuaJIT floor")
    for header in ("handler", "moonbox µs", "range", "floor µs", "range", "ratio", "range",
                   "target", ""):
        table.add_column(header, justify="left" if header == "handler" else "right",
                         no_wrap=True)
    for h in report["handlers"]:
        table.add_row(h["name"], f"{h['moonbox_us']:.2f}",
                      "{:.2f}-{:.2f}".format(*h["moonbox_range"]), f"{h['floor_us']:.2f}",
                      "{:.2f}-{:.2f}".format(*h["floor_range"]), f"{h['ratio']:.2f}x",
                      "{:.2f}-{:.2f}".format(*h["ratio_range"]), f"≤ {h['target']:g}x",
                      _verdict(h["met"]))
    table.caption = ("empty: dispatch only; read: one coreai_world_pos; full: that read and "
                     "one coreai_world_change. Floor: one plain runtime per mod, bare Python "
                     "callbacks, a dict world, the changes applied after the tick. The median "
                     "block of each; the ratio is the median of the blocks' own ratios")
    console.print(table)
    console.print(f"Validating one change's arguments: {report['validate_change_us']:.1f} µs; "
                  f"a tick with no mods: {report['no_mods_tick_us']:.1f} µs")
    console.print("[dim]Shared machines are noisy: a MISS is reported, never an error.[/]")


def run_engine_bench(console: Console, *, quick: bool, as_json: bool) -> int:
    """Measure the engine's handler calls against their floor, then print a table (or one
    JSON object). Returns the exit status: 0 whatever the targets say, 1 if the benchmark
    itself failed (a handler failed, or the floor left another world)."""
    from ._engine import ENGINE_WARM_TICKS, measure_engine

    mods, warm = (500, 60) if quick else (1000, ENGINE_WARM_TICKS)

    def measure_with(progress: Callable[[str], Any] | None) -> dict[str, Any]:
        report = measure_engine(mods, 20, warm, progress=progress)
        report["quick"] = quick
        report["environment"] = _environment()
        return report

    return _measured(console, as_json, "measuring the engine...", measure_with,
                     _render_engine)
