"""``moonbox versions``: inspect, roll back and reset the versions store from a shell.

Every subcommand takes ``--store PATH`` (or the ``MOONBOX_STORE`` environment variable;
default ``moonbox-versions.db`` in the current directory) and ``--json`` for one JSON
document on stdout. Exit status: 0 done, 1 a store error (unknown key or revision, a
failed attempt as a rollback target, a bad export, no store at the path, a damaged store
for a write or a read that fails), 2 usage. A damaged store is read-only: reads show what
they can, with a warning on stderr, and ``export`` salvages what can be read.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from ..store import KeyInfo, Kind, Revision, RevisionRef, Store, StoreError

__all__ = ["DEFAULT_STORE", "STORE_ENV", "versions"]

DEFAULT_STORE = "moonbox-versions.db"
"""The store the CLI opens when neither ``--store`` nor ``MOONBOX_STORE`` names one."""

STORE_ENV = "MOONBOX_STORE"

EXIT_OK, EXIT_STORE = 0, 1

F = TypeVar("F", bound=Callable[..., Any])


class _RevisionParam(click.ParamType):
    name = "REV"

    def convert(self, value: Any, param: Any, ctx: Any) -> RevisionRef:
        if isinstance(value, int) or value in ("original", "current"):
            return value  # type: ignore[no-any-return]
        try:
            number = int(value)
        except ValueError:
            self.fail(f"{value!r} is not a revision: give a number, 'original' or 'current'",
                      param, ctx)
        if number < 1:
            self.fail("revision numbers start at 1", param, ctx)
        return number


REV = _RevisionParam()


def _common(kind_default: Kind | None = "script", *, kind: bool = True) -> Callable[[F], F]:
    """``--store``, ``--json`` and (unless ``kind`` is false) ``--kind`` on a subcommand."""

    def decorate(f: F) -> F:
        f = click.option("--json", "as_json", is_flag=True,
                         help="Print one JSON document instead of a table.")(f)
        if kind:
            kind_help = ("script versions or data overlays" if kind_default
                         else "only script versions or only data overlays (default: both)")
            f = click.option("--kind", type=click.Choice(["script", "data"]),
                             default=kind_default, show_default=bool(kind_default),
                             help=kind_help)(f)
        return click.option(
            "--store", "store_path", type=click.Path(dir_okay=False, path_type=Path),
            default=DEFAULT_STORE, envvar=STORE_ENV, show_default=True, show_envvar=True,
            help="The store's SQLite file (one per game).")(f)

    return decorate


@contextmanager
def _opened(store_path: Path, as_json: bool, *, create: bool = False,
            warn: bool = True) -> Iterator[Store]:
    """Open the store; report a :class:`StoreError` (here or inside) and exit 1.

    A damaged store opens read-only: what it can still read is shown, with a warning on
    stderr (unless ``warn`` is false); a write to it, or a read that fails, is a
    ``corrupt_store`` error."""
    try:
        with Store(store_path, create=create) as store:
            yield store
    except StoreError as exc:
        if as_json:
            click.echo(json.dumps({"error": exc.to_dict()}, ensure_ascii=False))
        else:
            click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_STORE)
    if warn and store.corruption is not None:
        click.echo(f"warning: {store.corruption}", err=True)


def _console() -> Console:
    return Console(highlight=False)


def _when(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


def _emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


@click.group()
def versions() -> None:
    """Script versions and data overlays: list, show, diff, roll back, reset, export, import.

    Each key has its original, its current revision and a bounded history. A rollback or a
    reset moves the current revision and keeps the history, so it can be undone.
    """


@versions.command("list")
@_common(kind_default=None)
@click.option("--prefix", default="", help="Only keys that start with this.")
def list_(store_path: Path, kind: Kind | None, as_json: bool, prefix: str) -> None:
    """List the keys: original, current and latest revision, how many are kept."""
    with _opened(store_path, as_json) as store:
        infos = store.keys(kind, prefix=prefix)
    if as_json:
        _emit({"store": str(store_path), "keys": [i.to_dict() for i in infos]})
        return
    _console().print(_keys_table(infos, f"{len(infos)} key{'s' if len(infos) != 1 else ''} "
                                        f"in {store_path}"))


def _keys_table(infos: list[KeyInfo], title: str) -> Table:
    """The keys, one row each. A key too long for its column folds onto more lines, never
    cut: two keys must not read alike. The other columns never give way."""
    table = Table(title=escape(title), title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, padding=(0, 0))
    for column in ("kind", "key", "original", "current", "latest", "kept", "updated"):
        numeric = column in ("original", "current", "latest", "kept")
        table.add_column(column, justify="right" if numeric else "left",
                         no_wrap=column != "key", overflow="fold")
    for i in infos:
        current = f"[bold]{i.current}[/]" if i.current != i.original else str(i.current)
        table.add_row(i.kind, escape(i.key), str(i.original), current, str(i.latest),
                      str(i.revisions), _when(i.updated_at_s))
    return table


@versions.command()
@click.argument("key")
@click.argument("rev", type=REV, required=False)
@_common()
def show(key: str, rev: RevisionRef | None, store_path: Path, kind: Kind, as_json: bool) -> None:
    """Show KEY's history, or with REV (a number, original, current) that revision's content."""
    with _opened(store_path, as_json) as store:
        v = store.versions(kind)
        if rev is not None:
            revision = v.revision(key, rev)
            info = v.info(key)
        else:
            info = v.info(key)
            history = v.history(key)
    if rev is not None:
        _show_revision(revision, info, as_json)
        return
    if as_json:
        _emit({"key": info.to_dict(), "revisions": [
            {**r.to_dict(content=False), **_marks(r, info)} for r in history]})
        return
    console = _console()
    console.print(_info_line(info))
    console.print(_history_table(info, history))
    failed = [r for r in history if r.error]
    if failed:
        errors = Table.grid(padding=(0, 1))
        errors.add_column(no_wrap=True, justify="right")
        errors.add_column(overflow="fold")
        for r in failed:
            errors.add_row(f"rev {r.rev}:", escape((r.error or "").splitlines()[0]))
        console.print("errors:")
        console.print(Padding(errors, (0, 0, 0, 2)))


def _history_table(info: KeyInfo, history: list[Revision]) -> Table:
    """A key's revisions, newest first. The revision number (what rollback takes), its
    marks, outcome, time and hash never give way; who wrote it folds onto more lines where
    there is no room. The errors of failed revisions are listed under the table."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0))
    for column in ("rev", "", "outcome", "recorded", "sha256", "author", "role", "trace"):
        table.add_column(column, justify="right" if column == "rev" else "left",
                         no_wrap=column not in ("author", "role", "trace"), overflow="fold")
    for r in history:
        marks = "".join(name[0].upper() for name, on in _marks(r, info).items() if on)
        outcome = "[green]ok[/]" if r.outcome == "ok" else "[red]failed[/]"
        table.add_row(str(r.rev), marks, outcome, _when(r.recorded_at_s), r.hash[:8],
                      escape(r.author or "-"), escape(r.role or "-"), escape(r.trace_id or "-"))
    return table


def _marks(r: Revision, info: KeyInfo) -> dict[str, bool]:
    return {"original": r.rev == info.original, "current": r.rev == info.current}


def _info_line(info: KeyInfo) -> str:
    return (f"{info.kind} [bold]{escape(info.key)}[/]: original {info.original} (O), current "
            f"{info.current} (C), latest {info.latest}, {info.revisions} kept")


def _show_revision(r: Revision, info: KeyInfo, as_json: bool) -> None:
    if as_json:
        _emit({**r.to_dict(), **_marks(r, info)})
        return
    marks = ", ".join(name for name, on in _marks(r, info).items() if on)
    header = f"{r.kind} {r.key} revision {r.rev}" + (f" ({marks})" if marks else "")
    details = [f"outcome {r.outcome}", f"recorded {_when(r.recorded_at_s)}"]
    details += [f"{name} {value}" for name, value in
                (("author", r.author), ("role", r.role), ("trace", r.trace_id)) if value]
    click.echo(f"# {header}\n# {', '.join(details)}\n# sha256 {r.hash}")
    if r.error:
        for line in r.error.splitlines():
            click.echo(f"# error: {line}")
    text = r.content if r.kind == "script" else json.dumps(r.content, indent=2, sort_keys=True,
                                                           ensure_ascii=False)
    click.echo(text, nl=not text.endswith("\n"))


@versions.command()
@click.argument("key")
@click.argument("a", type=REV)
@click.argument("b", type=REV, default="current")
@_common()
def diff(key: str, a: RevisionRef, b: RevisionRef, store_path: Path, kind: Kind,
         as_json: bool) -> None:
    """A unified diff of KEY from revision A to B (default: current)."""
    with _opened(store_path, as_json) as store:
        v = store.versions(kind)
        old, new = v.revision(key, a), v.revision(key, b)
        text = v.diff(key, old.rev, new.rev)
    if as_json:
        _emit({"kind": kind, "key": key, "from": old.rev, "to": new.rev, "diff": text})
        return
    if not text:
        click.echo(f"{key}: revisions {old.rev} and {new.rev} are the same")
        return
    colours = {"+": "green", "-": "red", "@": "cyan"}
    for line in text.splitlines():
        bold = line.startswith(("+++", "---"))
        click.echo(click.style(line, fg=None if bold else colours.get(line[:1]), bold=bold))


def _moved(store: Store, kind: Kind, r: Revision, as_json: bool, verb: str) -> None:
    info = store.versions(kind).info(r.key)
    if as_json:
        _emit({"key": info.to_dict(), "current": r.to_dict(content=False)})
    else:
        _console().print(f"{verb} {kind} [bold]{escape(r.key)}[/]: current is now revision "
                         f"{r.rev} ({info.revisions} kept, latest {info.latest})")


@versions.command()
@click.argument("key")
@click.argument("rev", type=REV)
@_common()
def rollback(key: str, rev: RevisionRef, store_path: Path, kind: Kind, as_json: bool) -> None:
    """Make revision REV of KEY current again (it must have succeeded)."""
    with _opened(store_path, as_json) as store:
        _moved(store, kind, store.versions(kind).rollback(key, rev), as_json, "rolled back")


@versions.command()
@click.argument("key")
@_common()
def reset(key: str, store_path: Path, kind: Kind, as_json: bool) -> None:
    """Make KEY's original current again."""
    with _opened(store_path, as_json) as store:
        _moved(store, kind, store.versions(kind).reset(key), as_json, "reset")


@versions.command("reset-all")
@_common(kind_default=None)
@click.option("--prefix", default="", help="Only keys that start with this.")
def reset_all(store_path: Path, kind: Kind | None, as_json: bool, prefix: str) -> None:
    """Reset every key (of one kind, under a prefix) to its original, in one transaction."""
    with _opened(store_path, as_json) as store:
        changed = store.reset_all(kind, prefix=prefix)
    if as_json:
        _emit({"changed": changed})
    else:
        click.echo(f"reset {changed} key{'s' if changed != 1 else ''} to their original")


@versions.command("export")
@click.argument("path", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@_common(kind=False)
def export_(path: Path, store_path: Path, as_json: bool) -> None:
    """Write every key and revision, of both kinds, to PATH as readable JSON (- for stdout).

    From a damaged store, everything that can still be read; what could not is listed
    under "lost" in the export (and --json), and summed up on stderr.
    """
    with _opened(store_path, as_json, warn=False) as store:
        data = store.export()
        if str(path) == "-":
            click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        else:
            store.export_json(path, data=data)
    count, lost = len(data["keys"]), data.get("lost")
    if lost is not None:
        _salvage_summary(store, lost, path)
    if str(path) == "-":
        return
    if as_json:
        _emit({"path": str(path), "keys": count, **({"lost": lost} if lost is not None else {})})
    else:
        click.echo(f"exported {count} key{'s' if count != 1 else ''} to {path}")


def _salvage_summary(store: Store, lost: list[dict[str, Any]], path: Path) -> None:
    """On stderr: that the store is damaged, what the salvaged export could not carry (at
    most ten lines of it), and what to do next."""
    where = "the export" if str(path) == "-" else str(path)
    damage = store.corruption.findings[0] if store.corruption else "damaged"
    click.echo(f"warning: the versions store {store.path} is damaged ({damage}); the export "
               f"holds what could still be read, and {len(lost)} "
               f"thing{'s' if len(lost) != 1 else ''} could not be read as they were (all "
               f"listed under \"lost\" in {where})" + (":" if lost else ""), err=True)
    for entry in lost[:10]:
        name = " ".join(str(entry[k]) for k in ("kind", "key") if entry[k] is not None)
        rev = f" revision {entry['rev']}" if entry["rev"] is not None else ""
        click.echo(f"  lost {entry['what']}: {name + rev + ': ' if name else ''}"
                   f"{entry['reason']}", err=True)
    if len(lost) > 10:
        click.echo(f"  ... and {len(lost) - 10} more", err=True)
    saved = "the export" if str(path) == "-" else str(path)
    click.echo(f"next: move {store.path} and {store.path}-wal aside, then moonbox versions "
               f"import {saved} --store {store.path}", err=True)


@versions.command("import")
@click.argument("path", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@click.option("--replace", is_flag=True,
              help="Overwrite keys the store already has (their history too).")
@_common(kind=False)
def import_(path: Path, replace: bool, store_path: Path, as_json: bool) -> None:
    """Load an export from PATH (- for stdin) into the store, creating it if needed.

    Keys already in the store are refused unless --replace.
    """
    with _opened(store_path, as_json, create=True) as store:
        if str(path) == "-":
            try:
                data = json.loads(sys.stdin.read())
            except ValueError as exc:
                raise StoreError(f"cannot read the export from stdin: {exc}",
                                 code="invalid_export") from None
            count = store.import_data(data, replace=replace)
        else:
            count = store.import_json(path, replace=replace)
    if as_json:
        _emit({"path": str(path), "keys": count})
    else:
        click.echo(f"imported {count} key{'s' if count != 1 else ''} from {path}")
