"""Mod packages in a running game: load, dry-run, swap, persist and restore."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgpack
from pydantic import BaseModel

from .._errors import MoonboxError, ScriptError
from ..bindings import Permissions, Registry
from ..engine import Game, Mod
from ..isolation import WorkerPool
from ..store import Store, StoreError
from ..world import World
from ._errors import ModError
from ._manifest import MANIFEST_NAME, parse_manifest
from ._order import discover, grant, order_packages
from ._package import ModPackage
from ._require import preparer
from ._withheld import withheld

__all__ = ["ACTIVE_KEY", "ModHost", "ModState", "ReloadResult", "describe", "source_line"]

ACTIVE_KEY = "mods:active"
"""The data key in the versions store that lists the active mods and their file revisions."""

ON_RELOAD_CHUNK = "=(moonbox on_reload)"
_ON_RELOAD = """local old_state = ...
if type(on_reload) == "function" then on_reload(old_state) end"""

Status = Literal["running", "quarantined", "failed_reload", "failed"]


class _ActiveMod(BaseModel):
    id: str
    version: str
    hash: str
    files: dict[str, int]
    folder: str | None = None  # its folder's name; records made before it lack it


class _Active(BaseModel):
    mods: list[_ActiveMod] = []


@dataclass
class ModState:
    """One mod as the host sees it.

    Attributes:
        id: the mod's id.
        package: the version live in the game (``None`` if none ever loaded).
        status: ``running``, ``quarantined`` (the engine stopped it), ``failed_reload``
            (the last change was refused; the previous version runs on) or ``failed``
            (no version could load).
        error: the latest problem, as a sentence naming mod, file, line and source line.
        reloads: versions swapped in since the first load.
        pending: a version that failed, kept to show what was refused.
    """

    id: str
    package: ModPackage | None = None
    status: Status = "failed"
    error: str | None = None
    reloads: int = 0
    pending: ModPackage | None = None


@dataclass(frozen=True)
class ReloadResult:
    """What one load or reload did.

    Attributes:
        mod: the mod's id (or folder name).
        ok: the new version is live.
        version_hash: the version tried (empty when the folder could not be read).
        error: why it was refused (mod, file, line and source line), else ``None``.
        elapsed_s: read + dry run + swap, in seconds.
        unchanged: the folder held the live version already; nothing was done.
        removed: the mod's folder was deleted and the mod unloaded.
        reports: what the new version's ``on_reload`` reported (``report()``,
            ``print()``). What its main chunk reports goes in the game's next tick report.
    """

    mod: str
    ok: bool
    version_hash: str = ""
    error: str | None = None
    elapsed_s: float = 0.0
    unchanged: bool = False
    removed: bool = False
    reports: tuple[str, ...] = ()


def source_line(error: BaseException, package: ModPackage | None) -> str | None:
    """The line of ``package`` a script error points at, as ``    12 | text``, if any."""
    if isinstance(error, ScriptError) and package is not None and error.chunk and error.line:
        prefix = f"@mods/{package.id}/"
        if error.chunk.startswith(prefix):
            source = package.files.get(error.chunk[len(prefix):])
            lines = source.splitlines() if source is not None else []
            if 0 < error.line <= len(lines):
                return f"    {error.line} | {lines[error.line - 1].strip()}"
    return None


def describe(error: BaseException, package: ModPackage | None, where: str = "") -> str:
    """A sentence for a failed load: mod, file, line, message (then ``where``, such as
    ``(in on('tick'))``), and the source line."""
    if isinstance(error, ModError):
        return str(error)
    text = str(error) + (f" {where}" if where else "")
    line = source_line(error, package)
    if line is not None:
        text += "\n" + line
    mod = package.id if package is not None else "?"
    return f"mod {mod!r}: {text}"


def _plain_copy(value: Any) -> Any:
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False,
                           strict_map_key=False)


class ModHost:
    """Loads mod packages from a directory into a :class:`~moonbox.engine.Game`, and swaps
    in new versions of them while the game runs.

    A new version is compiled and dry-run first, in a scratch game (a copy of the world,
    the live versions of its dependencies, a copy of its state, ``on_reload``, one tick),
    and goes live only if all of that succeeds. A swap unloads the old version (its
    timers, handlers, waiting tasks and exports go with its sandbox), loads the new one,
    hands it the old per-mod state and calls its ``on_reload(old_state)`` if it defines
    one. Versions that went live are recorded in the versions store, and
    :meth:`restore` loads them again after a restart. A store that is read-only (its file
    is damaged, see :attr:`Store.corruption`) is read to restore what it can and never
    written; a record the store refuses goes to :attr:`errors`, and the mod runs on.

    In an isolated game (``Game(isolation="process")``) the dry run is isolated too: the
    scratch game runs in a worker process of the host's own (started at the first dry run,
    stopped by :meth:`close`), so a version that crashes its worker is refused like any
    other and never touches the live game's workers.

    Args:
        game: the game to load into.
        mods_dir: the mods directory: one folder per mod, each with a ``mod.toml``.
        policy: the most the host grants any mod (default: mode ``auto``); a mod gets,
            per binding, the stricter of this and what its manifest asks for.
        store: where live versions are recorded (optional).
        label: how errors name the mods directory.
        author: the author recorded with each version.

    Attributes:
        mods: mod id -> :class:`ModState`, for every mod tried.
        errors: the latest 50 problems, as sentences: refused loads and reloads, and what
            the versions store could not record or restore.
        on_result: called with each :class:`ReloadResult` as it is made.
        on_error: called with ``(mod id or None, sentence)`` for each problem as it goes
            in :attr:`errors`.
    """

    def __init__(
        self,
        game: Game,
        mods_dir: Path | str,
        *,
        policy: Permissions | None = None,
        store: Store | None = None,
        label: str = "mods",
        author: str = "modder",
    ) -> None:
        self.game = game
        self.mods_dir = Path(mods_dir)
        self.policy = policy or Permissions(mode="auto")
        self.store = store
        self.label = label
        self.author = author
        self.mods: dict[str, ModState] = {}
        self.errors: list[str] = []
        self.on_result: Callable[[ReloadResult], None] | None = None
        self.on_error: Callable[[str | None, str], None] | None = None
        self._dry_pool: WorkerPool | None = None
        if store is not None and not store.data.registered(ACTIVE_KEY):
            store.data.register(ACTIVE_KEY, _Active, {"mods": []})

    def close(self) -> None:
        """Stop the worker of isolated dry runs, if one was started. The game (and the
        store) are the caller's to close. Idempotent."""
        if self._dry_pool is not None:
            self._dry_pool.close()
            self._dry_pool = None

    def _scratch_isolation(self) -> dict[str, Any]:
        """The isolation options of a scratch game: those of the live game, in a worker of
        the host's own."""
        live = self.game
        if live.pool is None:
            return {}
        if self._dry_pool is None or self._dry_pool.closed:
            # No spare: a dry run that loses its worker can wait for a fresh one (nothing
            # else waits on it), and a spare would hold a process's memory all along.
            self._dry_pool = WorkerPool(1, memory_limit_bytes=live.pool.memory_limit_bytes,
                                        spare_workers=0, _test_hooks=live.pool._test_hooks)
        return {"isolation": "process", "pool": self._dry_pool,
                "wall_margin_s": live.wall_margin_s}

    # -- loading -------------------------------------------------------------------------

    def permissions_for(self, package: ModPackage, registry: Registry | None = None) -> Permissions:
        """What ``package`` gets under the host's policy (see :func:`grant`)."""
        return grant(package.manifest.permissions, self.policy, registry or self.game.registry)

    def load_all(self) -> list[ReloadResult]:
        """Restore recorded versions (with a store), then load what is on disk and differs.

        Returns one result per mod tried, in load order; unreadable folders, missing
        dependencies and cycles are in the results as refused loads.
        """
        results: list[ReloadResult] = []
        if self.store is not None:
            results.extend(self.restore())
        packages, errors = discover(self.mods_dir, self.label)
        ordered, order_errors = order_packages(packages, available=self.mods)
        for error in (*errors, *order_errors):
            results.append(self._refused(error.mod or "?", str(error), None))
        for package in ordered:
            results.append(self.apply(package))
        return results

    def folder_of(self, path: Path | str) -> str | None:
        """The name of the mod folder that holds ``path``, if any."""
        try:
            rel = Path(path).resolve().relative_to(self.mods_dir.resolve())
        except ValueError:
            return None
        return rel.parts[0] if len(rel.parts) > 1 else None

    def reload_folder(self, folder: str) -> ReloadResult:
        """Read the mod folder ``folder`` of the mods directory again and apply it."""
        from ._package import read_package

        start = time.perf_counter()
        if not (self.mods_dir / folder).exists():
            return self._removed(folder, start)
        try:
            package = read_package(self.mods_dir / folder, f"{self.label}/{folder}")
        except ModError as exc:
            mod = exc.mod or folder
            for state in self.mods.values():
                if state.package is not None and state.package.root.name == folder:
                    mod = state.id
            return self._refused(mod, str(exc), None, start)
        return self.apply(package, start=start)

    def apply(self, package: ModPackage, *, start: float | None = None,
              author: str | None = None, role: str = "modder",
              trace_id: str | None = None) -> ReloadResult:
        """Load ``package``, or swap it in for the live version of its mod, if its dry run
        succeeds. A failure leaves the live version running.

        ``author`` (default: the host's), ``role`` and ``trace_id`` are recorded with the
        files of a version that goes live (the Programmer records its own this way).

        A package whose id is live from another folder (that still exists) is refused with
        a ``duplicate_mod`` error: a folder cannot take over another mod or its state.
        """
        start = time.perf_counter() if start is None else start
        state = self.mods.get(package.id)
        if state is not None and state.package is not None \
                and state.package.root != package.root and state.package.root.is_dir():
            return self._taken(package, state.package, start)
        if state is not None and state.package is not None \
                and state.package.version_hash == package.version_hash \
                and state.status != "failed":
            state.package = package  # the same version; where it lives now
            if state.status == "failed_reload":
                state.status = self._status_of(state.id)
                state.pending = None
            return self._emit(ReloadResult(package.id, True, package.version_hash,
                                           elapsed_s=time.perf_counter() - start,
                                           unchanged=True))
        missing = [d for d in package.manifest.dependencies
                   if d not in self.mods or self.mods[d].package is None]
        if missing:
            return self._refused(package.id, str(ModError(
                f"depends on {', '.join(map(repr, missing))}, which is not loaded",
                code="missing_dependency", mod=package.id,
                file=f"{package.label}/{MANIFEST_NAME}", field="dependencies")),
                package, start)
        old_state = self._live_state(package.id)
        error = self._dry_run(package, old_state)
        if error is not None:
            return self._refused(package.id, error, package, start)
        error, reports = self._swap(package, old_state,
                                    (author or self.author, role, trace_id))
        if error is not None:
            return self._refused(package.id, error, package, start)
        return self._emit(ReloadResult(package.id, True, package.version_hash,
                                       elapsed_s=time.perf_counter() - start,
                                       reports=reports))

    # -- dry run and swap ----------------------------------------------------------------

    def _live_state(self, mod_id: str) -> dict[str, Any] | None:
        try:
            mod = self.game.mod(mod_id)
        except MoonboxError:
            return None
        return _plain_copy(mod.state)

    def _load(self, game: Game, package: ModPackage, *, replacing: bool = False) -> Mod:
        return game.load_mod(package.id, package.entry_source,
                             chunk=package.chunk(package.manifest.entry),
                             permissions=self.permissions_for(package, game.registry),
                             prepare=preparer(package, withheld(package, game.registry,
                                                                self.policy)),
                             replacing=replacing)

    def _carry(self, game: Game, mod: Mod, old_state: dict[str, Any] | None,
               ) -> tuple[str | None, tuple[str, ...]]:
        """Hand ``old_state`` to the new version: its per-mod state, then ``on_reload``.
        What went wrong (``None``: nothing), and what ``on_reload`` reported."""
        if old_state is None:
            return None, ()
        try:
            game.set_state(mod.id, old_state)
        except MoonboxError as exc:
            return f"its state could not be carried: {exc}", ()
        outcome = mod.sandbox.run(_ON_RELOAD, ON_RELOAD_CHUNK, args=(_plain_copy(old_state),),
                                  max_resumes=1)
        if outcome.error is not None:
            return f"on_reload failed: {outcome.error}", outcome.reports
        if outcome.status != "done":
            return "on_reload waited or yielded; it must return at once", outcome.reports
        return None, outcome.reports

    def _dry_run(self, package: ModPackage, old_state: dict[str, Any] | None) -> str | None:
        """Compile and run the new version in a scratch game; ``None`` when it ran clean."""
        live = self.game
        registry = Registry(b for b in live.registry
                            if b.group not in ("engine", "world") and b.name != "query")
        w = live.world
        options = {"bound": w.bound, "max_entities": w.max_entities}
        try:
            world = World.load(w.snapshot(), w.prefabs, **options)
        except MoonboxError:
            world = World(w.prefabs, **options)
        scratch = Game(world, registry=registry, budget=live.budget, limits=live.limits,
                       seed=live.seed, jit=live.jit, **self._scratch_isolation())
        try:
            for dep in self._dependencies(package):
                dep_package = self.mods[dep].package
                assert dep_package is not None
                self._load(scratch, dep_package)
            mod = self._load(scratch, package)
            if mod.quarantine is not None:
                failure = mod.quarantine.failure
                return describe(failure.error, package) if failure else \
                    f"mod {package.id!r}: {mod.quarantine.reason}"
            problem, _ = self._carry(scratch, mod, old_state)
            if problem is not None:
                return f"mod {package.id!r}: {problem}"
            report = scratch.tick()
            for failure in report.failures:
                if failure.mod == package.id:
                    return describe(failure.error, package,
                                    f"(in {failure.handler}, on the dry run's tick)")
            return None
        except MoonboxError as exc:
            return describe(exc, package)
        finally:
            scratch.close()
            registry.close()

    @contextmanager
    def fork(self) -> Iterator[Game]:
        """A copy of the running game, to try things in: the whole game as of now (world,
        every mod with its state, timers and tasks, the events in flight) restored from
        :meth:`Game.snapshot` into a game of its own, with the live game's bindings but
        not its world or engine (the fork has its own). Nothing done in it reaches the
        live game. Closed when the ``with`` block ends.

        Raises:
            MoonboxError: the live game cannot be taken now (``busy`` during a tick) or
                restored (see :meth:`Game.restore`).
        """
        live = self.game
        registry = Registry(b for b in live.registry
                            if b.group not in ("engine", "world") and b.name != "query")
        w = live.world
        fork = Game(World(w.prefabs, bound=w.bound, max_entities=w.max_entities),
                    registry=registry, budget=live.budget, limits=live.limits, seed=live.seed,
                    permissions=live.permissions, jit=live.jit, **self._scratch_isolation())
        try:
            fork.restore(live.snapshot(), prepare=self._preparation)
            yield fork
        finally:
            fork.close()
            registry.close()

    def _preparation(self, mod_id: str) -> Callable[[Any], None] | None:
        # As _load prepares a mod: its require, and what its permissions withhold.
        state = self.mods.get(mod_id)
        if state is None or not state.package:
            return None
        return preparer(state.package, withheld(state.package, self.game.registry,
                                                self.policy))

    def try_version(self, game: Game, package: ModPackage) -> tuple[Mod, str | None]:
        """Swap ``package`` into ``game`` (a :meth:`fork`) as a reload swaps it into the
        live game: the old version unloaded (its timers, handlers and tasks go with it),
        the new one loaded at its place, the old state carried and ``on_reload`` called.
        Returns the new mod and the problem, if loading or carrying failed."""
        old_state = None
        try:
            old_state = _plain_copy(game.mod(package.id).state)
        except MoonboxError:
            pass
        mod = self._load(game, package, replacing=old_state is not None)
        if mod.quarantine is not None:
            failure = mod.quarantine.failure
            return mod, (describe(failure.error, package) if failure
                         else f"mod {package.id!r}: {mod.quarantine.reason}")
        problem, _reports = self._carry(game, mod, old_state)
        return mod, (f"mod {package.id!r}: {problem}" if problem else None)

    def _dependencies(self, package: ModPackage) -> list[str]:
        """The live dependencies of ``package``, transitively, dependencies first."""
        seen: list[str] = []

        def walk(p: ModPackage) -> None:
            for dep in p.manifest.dependencies:
                state = self.mods.get(dep)
                if dep not in seen and state is not None and state.package is not None:
                    walk(state.package)
                    seen.append(dep)

        walk(package)
        return [d for d in seen if d != package.id]

    def _swap(self, package: ModPackage, old_state: dict[str, Any] | None,
              who: tuple[str, str, str | None] | None = None,
              ) -> tuple[str | None, tuple[str, ...]]:
        """Swap ``package`` in; what went wrong (``None``: nothing), and what its
        ``on_reload`` reported."""
        game = self.game
        state = self.mods.get(package.id)
        old_package = state.package if state is not None else None
        mod = self._load(game, package, replacing=old_state is not None)
        problem: str | None = None
        reports: tuple[str, ...] = ()
        if mod.quarantine is not None:
            failure = mod.quarantine.failure
            problem = describe(failure.error, package) if failure else mod.quarantine.reason
        else:
            carried, reports = self._carry(game, mod, old_state)
            problem = f"mod {package.id!r}: {carried}" if carried else None
        if problem is not None:
            # It ran in the dry run but not here: put the old version back.
            if old_package is not None:
                back = self._load(game, old_package, replacing=True)
                self._carry(game, back, old_state)
            else:
                game.unload_mod(package.id)
            return problem, reports
        if state is None:
            state = self.mods[package.id] = ModState(package.id)
        elif state.package is not None:
            state.reloads += 1
        state.package = package
        state.pending = None
        state.error = None
        state.status = self._status_of(package.id)
        self._record(package, who)
        return None, reports

    def _refused(self, mod_id: str, error: str, package: ModPackage | None,
                 start: float | None = None) -> ReloadResult:
        state = self.mods.get(mod_id)
        if state is None:
            state = self.mods[mod_id] = ModState(mod_id)
        state.error = error
        state.pending = package
        state.status = "failed_reload" if state.package is not None else "failed"
        self._error(mod_id, error)
        if package is not None:
            self._record_failure(package, error)
        elapsed = time.perf_counter() - start if start is not None else 0.0
        return self._emit(ReloadResult(mod_id, False, package.version_hash if package else "",
                                       error, elapsed))

    def _taken(self, package: ModPackage, live: ModPackage, start: float) -> ReloadResult:
        """``package`` claims the id of a mod live from another folder: refuse it. The live
        mod is untouched; the error goes to the mod the folder held, if any."""
        error = str(ModError(f"mod id {package.id!r} is taken already by {live.label}; "
                             "give this mod an id of its own", code="duplicate_mod",
                             mod=package.id, file=f"{package.label}/{MANIFEST_NAME}",
                             field="id"))
        for state in self.mods.values():
            if state.package is not None and state.package.root == package.root:
                return self._refused(state.id, error, None, start)
        self._error(package.root.name, error)  # the folder's, as the result names it
        return self._emit(ReloadResult(package.root.name, False, package.version_hash, error,
                                       time.perf_counter() - start))

    def _removed(self, folder: str, start: float) -> ReloadResult:
        """The folder of a live mod is gone: unload the mod and drop it from the active
        list (its recorded versions stay in the store's history)."""
        for state in list(self.mods.values()):
            if state.package is not None and state.package.root.name == folder:
                if state.id in {m.id for m in self.game.mods}:
                    self.game.unload_mod(state.id)
                del self.mods[state.id]
                store = self._recording()
                if store is not None:
                    try:
                        active = self._active()
                        mods = [m for m in active.mods if m.id != state.id]
                        store.data.record_success(ACTIVE_KEY, _Active(mods=mods).model_dump(),
                                                  author=self.author, role="modder")
                    except StoreError as exc:
                        self._not_recorded(f"the removal of mod {state.id!r}", exc)
                return self._emit(ReloadResult(state.id, True, "", None,
                                               time.perf_counter() - start, removed=True))
        return self._emit(ReloadResult(folder, True, unchanged=True))

    def _emit(self, result: ReloadResult) -> ReloadResult:
        if self.on_result is not None:
            self.on_result(result)
        return result

    def _status_of(self, mod_id: str) -> Status:
        try:
            mod = self.game.mod(mod_id)
        except MoonboxError:
            return "failed"
        return "quarantined" if mod.quarantine is not None else "running"

    def refresh(self) -> None:
        """Bring each mod's status up to date with the engine (quarantines happen in ticks)."""
        for state in self.mods.values():
            if state.package is not None and state.status in ("running", "quarantined"):
                state.status = self._status_of(state.id)
                if state.status == "quarantined" and state.error is None:
                    q = self.game.mod(state.id).quarantine
                    if q is not None:
                        state.error = (describe(q.failure.error, state.package)
                                       if q.failure else q.reason)

    # -- the versions store --------------------------------------------------------------

    @staticmethod
    def _key(mod_id: str, path: str) -> str:
        return f"mods/{mod_id}/{path}"

    def _recording(self) -> Store | None:
        """The store to record into: ``None`` without one, or if it is read-only (its file
        is damaged; nothing is ever written to it)."""
        store = self.store
        return None if store is None or store.read_only else store

    def _error(self, mod_id: str | None, text: str) -> None:
        """Keep a problem in :attr:`errors` (the latest 50) and pass it to ``on_error``."""
        self.errors.append(text)
        del self.errors[:-50]
        if self.on_error is not None:
            self.on_error(mod_id, text)

    def _not_recorded(self, what: str, exc: StoreError) -> None:
        self._error(None, f"versions store: {what} was not recorded: {exc}")

    def _record(self, package: ModPackage, who: tuple[str, str, str | None] | None = None
                ) -> None:
        try:
            self._record_live(package, who or (self.author, "modder", None))
        except StoreError as exc:  # the mod runs on; only its record is missing
            self._not_recorded(f"mod {package.id!r} {package.manifest.version}", exc)

    def _record_live(self, package: ModPackage, who: tuple[str, str, str | None]) -> None:
        store = self._recording()
        if store is None:
            return
        author, role, trace_id = who
        files: dict[str, int] = {}
        for path, text in {MANIFEST_NAME: package.manifest_text, **package.files}.items():
            key = self._key(package.id, path)
            if key in store.scripts and store.scripts.current(key).content == text:
                files[path] = store.scripts.current(key).rev
            else:
                files[path] = store.scripts.record_success(
                    key, text, author=author, role=role, trace_id=trace_id).rev
        active = self._active()
        mods = [m for m in active.mods if m.id != package.id]
        mods.append(_ActiveMod(id=package.id, version=package.manifest.version,
                               hash=package.version_hash, files=files,
                               folder=package.root.name))
        store.data.record_success(ACTIVE_KEY, _Active(mods=mods).model_dump(),
                                  author=self.author, role="modder")

    def _record_failure(self, package: ModPackage, error: str) -> None:
        store = self._recording()
        if store is None:
            return
        try:
            for path, text in {MANIFEST_NAME: package.manifest_text, **package.files}.items():
                key = self._key(package.id, path)
                if key in store.scripts and store.scripts.current(key).content != text:
                    store.scripts.record_failure(key, text, error=error[:4000],
                                                 author=self.author, role="modder")
        except StoreError as exc:
            self._not_recorded(f"the failed version of mod {package.id!r}", exc)

    def _active(self) -> _Active:
        store = self.store
        if store is None or ACTIVE_KEY not in store.data:
            return _Active()
        return _Active.model_validate(store.data.current(ACTIVE_KEY).content or {"mods": []})

    def recorded_package(self, mod_id: str) -> ModPackage:
        """The mod as the store has it now: the current revision of each of its files (the
        files of the version listed as active), e.g. after one of them was rolled back.

        Raises:
            ModError: ``unknown_mod``: no store, or the store lists no active version of
                ``mod_id``; ``invalid_manifest``: its recorded manifest no longer parses.
        """
        store = self.store
        entry = next((m for m in self._active().mods if m.id == mod_id), None)
        if store is None or entry is None:
            raise ModError(f"the versions store lists no active version of mod {mod_id!r}",
                           code="unknown_mod", mod=mod_id)
        try:
            files = {path: store.scripts.current(self._key(mod_id, path)).content
                     for path in entry.files}
        except MoonboxError as exc:
            raise ModError(f"mod {mod_id!r}: its recorded files cannot be read: {exc}",
                           code="unknown_mod", mod=mod_id) from None
        manifest_text = files.pop(MANIFEST_NAME)
        state = self.mods.get(mod_id)
        folder = entry.folder or entry.id
        root = state.package.root if state is not None and state.package is not None \
            else (self.mods_dir / folder).resolve()
        label = f"{self.label}/{folder}"
        manifest = parse_manifest(manifest_text, f"{label}/{MANIFEST_NAME}")
        return ModPackage(root, manifest, manifest_text, files, {}, label)

    def apply_recorded(self, mod_id: str) -> ReloadResult:
        """Swap in :meth:`recorded_package` through the usual dry run: how a rollback or
        reset of one of the mod's files in the store reaches the running game. The files
        on disk are not touched; the next save of the mod's folder reloads from disk.

        Raises:
            ModError: as :meth:`recorded_package`.
        """
        return self.apply(self.recorded_package(mod_id))

    def restore(self) -> list[ReloadResult]:
        """Load the versions the store lists as active, as they were when they went live.

        Runs before anything is read from disk, so a file broken while the game was down
        does not stop the last good version from running; :meth:`load_all` then tries
        what is on disk through the usual dry run.
        """
        store = self.store
        if store is None:
            return []
        packages: list[ModPackage] = []
        results: list[ReloadResult] = []
        try:
            active = self._active()
        except StoreError as exc:
            self._error(None, "versions store: could not read the recorded versions to "
                        f"restore them; loading what is on disk: {exc}")
            return []
        for entry in active.mods:
            try:
                files = {path: store.scripts.revision(self._key(entry.id, path), rev).content
                         for path, rev in entry.files.items()}
                manifest_text = files.pop(MANIFEST_NAME)
                folder = entry.folder or entry.id
                label = f"{self.label}/{folder}"
                manifest = parse_manifest(manifest_text, f"{label}/{MANIFEST_NAME}")
                packages.append(ModPackage((self.mods_dir / folder).resolve(), manifest,
                                           manifest_text, files, {}, label))
            except (MoonboxError, KeyError) as exc:
                results.append(self._refused(entry.id, f"mod {entry.id!r}: could not restore "
                                             f"its recorded version: {exc}", None))
        ordered, errors = order_packages(packages, available=self.mods)
        for error in errors:
            results.append(self._refused(error.mod or "?", str(error), None))
        for package in ordered:
            results.append(self.apply(package))
        return results
