"""``moonbox stubs``: the LuaLS meta file for what a permission set lets a mod call."""

from __future__ import annotations

import importlib
import os
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from ..bindings import MODES, Decision, Permissions, Registry

__all__ = ["stubs"]


@click.command()
@click.option("--mode", type=click.Choice(list(MODES)), default="auto", show_default=True,
              help="Permission mode the stubs are for.")
@click.option("--allow", multiple=True, metavar="NAME",
              help="Allow a binding (NAME or prefix*); repeatable.")
@click.option("--ask", "ask_", multiple=True, metavar="NAME",
              help="Make a binding ask the host (NAME or prefix*); repeatable.")
@click.option("--deny", multiple=True, metavar="NAME",
              help="Deny a binding (NAME or prefix*); repeatable.")
@click.option("--registry", "registry_ref", metavar="MODULE:ATTR",
              help="The host's registry, or a zero-argument function returning it "
                   "[default: a game's: the default, world and engine bindings].")
@click.option("--manifest", "manifest_path", metavar="MOD.TOML",
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Stubs for this mod: what its [permissions] ask for, within --mode and "
                   "the rules (as moonbox dev --grant MODE grants it).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to FILE (replaced whole, never half-written) instead of stdout.")
def stubs(mode: str, allow: tuple[str, ...], ask_: tuple[str, ...], deny: tuple[str, ...],
          registry_ref: str | None, manifest_path: Path | None, output: Path | None) -> None:
    """Write LuaLS annotations (---@meta) for the modding API a mod may call.

    Every binding the permissions grant (report, the coreai_world_* bindings, emit, now,
    state_get, state_set, query...), with its argument and result types, then the engine
    library's Lua functions (on, after, every, cancel, spawn, wait, export, import) and
    require. Put the file in the mods' workspace for completion and type checks in the
    editor (moonbox dev --init writes one, with a .luarc.json).

    Exit status: 0 on success, 2 for usage errors, a registry or manifest that cannot be
    loaded, or a file that cannot be written.
    """
    from ..mods import ModError, grant, parse_manifest
    from ..mods._stubs import mod_stubs

    permissions = _permissions(mode, {"allow": allow, "ask": ask_, "deny": deny})
    with _registry(registry_ref) as registry:
        if manifest_path is not None:
            try:
                manifest = parse_manifest(manifest_path.read_text("utf-8"), str(manifest_path))
            except (ModError, OSError, UnicodeDecodeError) as exc:
                raise click.BadParameter(str(exc), param_hint="--manifest") from None
            permissions = grant(manifest.permissions, permissions, registry)
        text = mod_stubs(registry, permissions)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        _write_whole(output, text)
    except OSError as exc:
        error = click.FileError(str(output), hint=exc.strerror or str(exc))
        error.exit_code = 2
        raise error from None
    count = sum(1 for line in text.splitlines() if line.startswith("function "))
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"[green]wrote[/] {count} binding{'s' * (count != 1)} to {escape(str(output))}"
    )


def _permissions(mode: str, options: dict[str, tuple[str, ...]]) -> Permissions:
    rules: dict[str, Decision] = {}
    for decision, names in options.items():
        for name in names:
            if name in rules and rules[name] != decision:
                raise click.UsageError(f"--{rules[name]} {name} and --{decision} {name} conflict")
            rules[name] = decision  # type: ignore[assignment]
    try:
        return Permissions(mode=mode, rules=rules)  # type: ignore[arg-type]
    except ValueError as exc:
        errors = getattr(exc, "errors", None)
        message = errors()[0]["msg"] if callable(errors) else str(exc)
        raise click.UsageError(message.removeprefix("Value error, ")) from None


@contextmanager
def _registry(ref: str | None) -> Iterator[Registry]:
    """The registry named by ``ref`` (``module:attr``), or a game's (the default, world and
    engine bindings, as a game without a registry of its own has).

    A registry made here is closed afterwards; one the host made is left as it is.

    Raises:
        click.BadParameter: ``ref`` cannot be imported, or is not a registry.
    """
    if ref is None:
        from ..engine import Game

        with Game() as game:
            yield game.registry
        return
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter("use MODULE:ATTR, such as game.mods:registry",
                                 param_hint="--registry")
    target: Any = _import(module_name)
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise click.BadParameter(f"{module_name} has no attribute {attr!r}",
                                     param_hint="--registry") from None
    if not isinstance(target, Registry) and callable(target):
        try:
            target = target()
        except Exception as exc:
            raise click.BadParameter(f"{ref}() failed: {type(exc).__name__}: {exc}",
                                     param_hint="--registry") from None
    if not isinstance(target, Registry):
        raise click.BadParameter(f"{ref} is a {type(target).__name__}, not a Registry "
                                 "or a function returning one", param_hint="--registry")
    yield target


def _import(module_name: str) -> Any:
    """Import a host module; the current directory is searched first, as ``python -m`` does."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        raise click.BadParameter(f"cannot import {module_name}: {type(exc).__name__}: {exc}",
                                 param_hint="--registry") from None
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _write_whole(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then move it into place.

    Readers see the old file or the new one, never a part. The temporary file is removed
    on every failure.

    Raises:
        OSError: the directory cannot be written, or the move failed.
    """
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
