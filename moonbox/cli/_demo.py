"""``moonbox demo``: a short, readable tour of what the sandbox does, on embedded mods."""

from __future__ import annotations

import sys
from importlib import resources

import click
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from ..bindings import Binding, LuaNumber, Permissions, Registry, default_bindings
from ..sandbox import Budget, Outcome, Run, Sandbox
from ..sandbox._marshal import format_value

__all__ = ["demo", "run_demo"]

_MODS = resources.files("moonbox.demo_mods")


def _source(name: str) -> str:
    return _MODS.joinpath(name).read_text(encoding="utf-8")


def _show(console: Console, title: str, name: str, outcome: Outcome, note: str) -> None:
    console.print(f"\n[bold]{escape(title)}[/]  [dim]{escape(name)}[/]")
    for line in _source(name).splitlines():
        if line.strip() and not line.lstrip().startswith("--"):
            console.print(f"  [dim]│[/] {escape(line)}")
    for report in outcome.reports:
        console.print(f"  [cyan]report[/] {escape(report)}")
    if outcome.error is not None:
        colour = "yellow" if outcome.status == "budget" else "red"
        console.print(f"  [{colour}]{outcome.status}[/] {escape(str(outcome.error))}")
    else:
        console.print(f"  [green]{outcome.status}[/] value = {escape(format_value(outcome.value))}")
    s = outcome.stats
    console.print(
        f"  [dim]{s.steps:,} steps · {s.wall_s * 1000:.1f} ms · "
        f"peak heap {s.memory_peak_bytes / 1024:,.0f} KiB[/]"
    )
    console.print(f"  [italic]{escape(note)}[/]")


def _run(sandbox: Sandbox, name: str) -> Outcome:
    return sandbox.run(_source(name), f"@{name}")


def _tick_until_done(sandbox: Sandbox, name: str) -> tuple[Outcome, Run]:
    """Resume once per game tick until the mod finishes; the outcome covers the whole run."""
    run = sandbox.start(_source(name), f"@{name}")
    last = run.resume()
    while not run.finished:
        last = run.resume()
    return Outcome(last.status, last.values, last.error, tuple(run.reports), run.stats), run


class _SpawnArgs(BaseModel):
    prefab: str
    x: LuaNumber = 0.0
    y: LuaNumber = 0.0


class _NoArgs(BaseModel):
    pass


def _demo_registry() -> Registry:
    registry = Registry(default_bindings())
    registry.register(Binding("spawn", _SpawnArgs, lambda call, args: args.prefab, risk="write",
                              group="world", explain_denial=True,
                              description="Spawn a prefab at x, y."))
    registry.register(Binding("nuke", _NoArgs, lambda call, args: None, risk="danger",
                              description="Remove everything."))
    return registry


def run_demo(console: Console) -> int:
    console.print(Panel.fit(
        "[bold]moonbox[/] runs untrusted Lua mods on LuaJIT [bold]with the JIT on[/],\n"
        "under step, memory and wall-clock budgets per coroutine resume.",
        border_style="cyan",
    ))
    bindings = default_bindings()
    small = Budget(steps=2_000_000, wall_s=1.0, alloc_bytes=8 << 20, max_memory=16 << 20)

    with Sandbox(small, host_functions=bindings) as sb:
        _show(console, "1. A well-behaved mod", "hello.lua", _run(sb, "hello.lua"),
              "Bindings are closures over one dispatcher; arguments are validated in Python.")
    with Sandbox(small, host_functions=bindings) as sb:
        _show(console, "2. A runaway loop, JIT-compiled", "runaway.lua",
              _run(sb, "runaway.lua"),
              "Stopped by the step budget inside a compiled trace, where hooks never run.")
    with Sandbox(small, host_functions=bindings) as sb:
        _show(console, "3. Trying to swallow the trip", "swallow.lua",
              _run(sb, "swallow.lua"),
              "A trip is sticky: pcall, xpcall and coroutines re-raise it.")
    with Sandbox(small, host_functions=bindings) as sb:
        _show(console, "4. Looking for a way out", "escape.lua", _run(sb, "escape.lua"),
              "The environment is an allowlist; the string metatable points at the mod's copy.")
    with Sandbox(small, host_functions=bindings) as sb:
        outcome = _run(sb, "membomb.lua")
        after = sb.run("return 'alive'", "=after")
        _show(console, "5. A memory bomb", "membomb.lua", outcome,
              f"The heap cap stops it; the host carries on (next run: {after.value!r}).")

    with Sandbox(small, host_functions=bindings) as sb:
        outcome, run = _tick_until_done(sb, "ticker.lua")
        _show(console, "6. A long-lived mod, resumed tick by tick", "ticker.lua", outcome,
              f"{run.resumes} resumes, each with a fresh budget.")

    slice_budget = Budget(steps=500_000, total_steps=50_000_000)
    with Sandbox(slice_budget, host_functions=bindings, preempt=True) as sb:
        outcome, run = _tick_until_done(sb, "crunch.lua")
        _show(console, "7. Preemption: a big job spread over ticks", "crunch.lua", outcome,
              f"Paused at each 500,000-step slice and resumed: {run.resumes} slices.")

    registry = _demo_registry()
    with registry.mod("demo", Permissions(mode="readonly")).sandbox(small) as sb:
        _show(console, "8. Permissions: a read-only mod", "permissions.lua",
              _run(sb, "permissions.lua"),
              "The registry builds each mod's environment from what its permissions grant.")
    registry.close()

    _arena(console)

    console.print("\nTry your own: [bold]moonbox run FILE.lua[/] (see --help).")
    return 0


def _arena(console: Console, ticks: int = 100) -> None:
    """9. The arena (also examples/arena/arena.py), headless: four mods play, one is quarantined."""
    from ..mods import arena_mods, load_packages
    from ..mods._dev import arena_game

    console.print(f"\n[bold]9. A game: four mods and a glitch, {ticks} ticks[/]  "
                  "[dim]demo_mods/arena/*/ (moonbox dev --init DIR copies them to edit)[/]")
    with arena_game() as game, arena_mods() as mods_dir:
        load_packages(game, mods_dir)
        refused = 0
        for _ in range(ticks):
            report = game.tick()
            refused += sum(1 for r in report.results if not r.applied)
            for mod_id, line in report.reports:
                if mod_id != "pickups":
                    console.print(f"  [dim]tick {report.tick:3}[/] [cyan]{mod_id}[/] "
                                  f"{escape(line)}")
            for mod_id in report.quarantined:
                q = game.mod(mod_id).quarantine
                assert q is not None
                console.print(f"  [dim]tick {report.tick:3}[/] [yellow]quarantined[/] "
                              f"{mod_id}: {escape(q.reason)}")
        for mod in game.mods:
            s = mod.stats
            state = "[yellow]quarantined[/]" if mod.quarantine else "[green]active[/]"
            console.print(f"  {mod.id:10} {state:25} {s.calls:4} calls {s.steps:9,} steps "
                          f"{s.trips} trips, {s.commands_refused} commands refused")
        console.print(f"  [italic]{len(game.world)} entities; {refused} commands refused at "
                      f"the tick boundary; world hash {game.world.content_hash()[:16]}. "
                      "The glitch was stopped three times and quarantined; the others "
                      "never noticed.[/]")


@click.command()
def demo() -> None:
    """A short showcase of the sandbox: budgets, trips, escapes refused."""
    sys.exit(run_demo(Console(highlight=False, soft_wrap=True)))
