"""The world: entities, the command queue, and the one place that changes them."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from typing import Any

import msgpack
from pydantic import BaseModel, ValidationError

from .._errors import ConfigError, first_error
from ._commands import (
    MAX_FIND,
    ChangeArgs,
    ChangeFields,
    Command,
    CommandKind,
    CommandResult,
    DestroyArgs,
    GridArgs,
    SetColorArgs,
    SpawnArgs,
    SpawnBatchArgs,
    new_result,
)
from ._errors import WorldError
from ._model import Entity, Prefab, Prefabs, default_prefabs

__all__ = ["World", "SNAPSHOT_FORMAT", "SNAPSHOT_VERSION", "unit_direction"]

SNAPSHOT_FORMAT = "moonbox.world"
SNAPSHOT_VERSION = 1
DEFAULT_BOUND = 100_000.0
MAX_SCALE = 1000.0
MAX_NAME_CHARS = 64
MAX_TRANSACTION = 256
DEFAULT_MAX_ENTITIES = 100_000
DEFAULT_MAX_PENDING = 100_000
DEFAULT_MAX_PENDING_PER_MOD = 10_000
_AXES = ("x", "y", "z", "rx", "ry", "rz")
_PLACEMENT = frozenset((*_AXES, "scale"))  # the change fields _apply_change takes itself

_ARGS: dict[str, type[BaseModel]] = {
    "spawn": SpawnArgs, "change": ChangeArgs, "set_color": SetColorArgs,
    "destroy": DestroyArgs, "spawn_batch": SpawnBatchArgs, "grid": GridArgs,
}


class _Refused(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _plain(value: float) -> float:
    # One float form per value: -0.0 becomes 0.0, so equal worlds hash alike.
    return float(value) + 0.0


def unit_direction(direction: tuple[float, float, float]) -> tuple[float, float, float]:
    """``direction`` scaled to length 1.

    Raises:
        ValueError: a zero or non-finite direction.
    """
    dx, dy, dz = direction
    length = math.hypot(dx, dy, dz)
    if not (length > 0 and math.isfinite(length)):
        raise ValueError("the direction must be a non-zero finite vector")
    return dx / length, dy / length, dz / length


class World:
    """Entities, a prefab whitelist and a queue of commands.

    Reads (:meth:`get`, :meth:`find`, :meth:`raycast`, ...) see applied state only.
    Writes are :class:`Command`\\ s: :meth:`submit` queues one, :meth:`apply` applies every
    queued command in order, validating each; nothing else changes an entity.

    Args:
        prefabs: what may be spawned (default: :func:`default_prefabs`).
        bound: every coordinate and rotation must satisfy ``|v| <= bound``.
        max_entities: spawns past this are refused (``world_full``).
        max_pending: commands queued at once, in all; past it :meth:`submit` raises.
        max_pending_per_mod: commands one mod may have queued at once (a transaction
            counts as its commands), so one mod cannot fill the queue for the others.

    Raises:
        ConfigError: a bound or limit that is not positive and finite.
    """

    def __init__(
        self,
        prefabs: Prefabs | None = None,
        *,
        bound: float = DEFAULT_BOUND,
        max_entities: int = DEFAULT_MAX_ENTITIES,
        max_pending: int = DEFAULT_MAX_PENDING,
        max_pending_per_mod: int = DEFAULT_MAX_PENDING_PER_MOD,
    ) -> None:
        if not (0 < bound < math.inf):
            raise ConfigError("bound must be a positive finite number")
        if min(max_entities, max_pending, max_pending_per_mod) < 1:
            raise ConfigError("max_entities and the pending limits must be at least 1")
        self.prefabs = prefabs if prefabs is not None else default_prefabs()
        self.bound = float(bound)
        self.max_entities = max_entities
        self.max_pending = max_pending
        self.max_pending_per_mod = max_pending_per_mod
        self._pending_by_mod: dict[str | None, int] = {}
        self._entities: dict[int, Entity] = {}
        self._by_name: dict[str, int] = {}
        self._children: dict[int, set[int]] = {}
        self._next_id = 1
        self._next_command = 1
        self._next_auto = 1
        # Commands in order; a change of placement queued by submit_placement is the
        # tuple (id, mod, name, fields), or (id, mod, name, field, value) for a change of
        # one field (see _modelled).
        self._pending: list[Command | tuple[Any, ...]] = []
        self._transactions: dict[str | None, list[Command]] = {}

    # -- reads -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entities)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def exists(self, name: str) -> bool:
        return name in self._by_name

    def get(self, name: str) -> Entity | None:
        """A copy of the entity named ``name``, or ``None``."""
        eid = self._by_name.get(name)
        return None if eid is None else self._entities[eid].copy()

    def position(self, name: str) -> tuple[float, float, float] | None:
        eid = self._by_name.get(name)
        if eid is None:
            return None
        e = self._entities[eid]
        return (e.x, e.y, e.z)

    def name_of(self, entity_id: int | None) -> str | None:
        e = self._entities.get(entity_id) if entity_id is not None else None
        return None if e is None else e.name

    def entities(self) -> list[Entity]:
        """Copies of every entity, by id."""
        return [self._entities[i].copy() for i in sorted(self._entities)]

    def find(self, text: str, limit: int = MAX_FIND) -> list[str]:
        """Names that contain ``text``, ignoring case, by id; at most ``limit`` (<= 100)."""
        needle = text.casefold()
        limit = max(0, min(limit, MAX_FIND))
        out: list[str] = []
        if limit == 0:
            return out
        for eid in sorted(self._entities):
            name = self._entities[eid].name
            if needle in name.casefold():
                out.append(name)
                if len(out) >= limit:
                    break
        return out

    def raycast(
        self,
        origin: tuple[float, float, float],
        direction: tuple[float, float, float],
        max_distance: float = 1000.0,
    ) -> tuple[str, float] | None:
        """The nearest entity a ray hits (each entity a sphere of its prefab's radius times
        its scale), with the distance; ``None`` when nothing is within ``max_distance``.

        The distance is measured along the direction scaled to length 1
        (:func:`unit_direction`): the hit point is ``origin + distance * unit``, whatever
        the length of ``direction``.

        Raises:
            ValueError: a zero or non-finite direction.
        """
        dx, dy, dz = unit_direction(direction)
        ox, oy, oz = origin
        best: tuple[float, int, str] | None = None
        for e in self._entities.values():
            prefab = self.prefabs.get(e.prefab)
            radius = (prefab.radius if prefab else 0.5) * e.scale
            cx, cy, cz = e.x - ox, e.y - oy, e.z - oz
            along = cx * dx + cy * dy + cz * dz
            miss2 = cx * cx + cy * cy + cz * cz - along * along
            r2 = radius * radius
            if miss2 > r2:
                continue
            half = math.sqrt(max(0.0, r2 - miss2))
            t = along - half if along - half >= 0 else along + half
            if t < 0 or t > max_distance:
                continue
            if best is None or (t, e.id) < best[:2]:
                best = (t, e.id, e.name)
        return None if best is None else (best[2], best[0])

    # -- commands --------------------------------------------------------------------------

    @property
    def pending(self) -> tuple[Command, ...]:
        """Commands queued and not yet applied, in order."""
        return tuple(_modelled(c) for c in self._pending)

    def submit(self, kind: CommandKind, args: BaseModel | dict[str, Any],
               mod: str | None = None) -> Command:
        """Queue a command (into ``mod``'s open transaction, if it has one).

        ``args`` is the kind's model or a dict for it. A spawn without a name gets one
        now (``<prefab>#<n>``), so the issuer knows it before the command applies.

        Raises:
            WorldError: ``queue_full``, or ``transaction`` when the open transaction holds
                256 commands already (the transaction is rolled back).
            ValueError: ``args`` does not fit the kind's model (pydantic's error).
        """
        model_cls = _ARGS.get(kind)
        if model_cls is None:
            raise ConfigError(f"unknown command kind {kind!r}")
        # The exact class first: a bindings' model always is, and isinstance on a model
        # class costs more than the rest of a submit.
        if type(args) is model_cls or isinstance(args, model_cls):
            model = args
        else:
            model = model_cls.model_validate(args)
        if kind == "spawn" and model.name is None:  # type: ignore[attr-defined]
            model = model.model_copy(update={"name": f"{model.prefab}#{self._next_auto}"})  # type: ignore[attr-defined]
            self._next_auto += 1
        elif kind == "spawn_batch" and any(i.name is None for i in model.items):  # type: ignore[attr-defined]
            items = []
            for item in model.items:
                if item.name is None:
                    item = item.model_copy(update={"name": f"{item.prefab}#{self._next_auto}"})
                    self._next_auto += 1
                items.append(item)
            model = model.model_copy(update={"items": items})
        tx = self._transactions.get(mod) if self._transactions else None
        if tx is None:
            # _check_room(mod, 1), which raises, only when there is no room.
            pending, by_mod = self._pending, self._pending_by_mod
            mine = by_mod.get(mod, 0)
            if len(pending) >= self.max_pending or (
                    mod is not None and mine >= self.max_pending_per_mod):
                self._check_room(mod, 1)
            command = Command(self._next_command, mod, kind, model)
            self._next_command += 1
            pending.append(command)
            by_mod[mod] = mine + 1
            return command
        command = Command(self._next_command, mod, kind, model)
        self._next_command += 1
        if len(tx) >= MAX_TRANSACTION:
            del self._transactions[mod]
            raise WorldError(
                f"a transaction holds at most {MAX_TRANSACTION} commands; it was rolled "
                "back: commit in smaller parts", code="transaction")
        tx.append(command)
        return command

    def submit_placement(self, name: str, fields: dict[str, float],
                         mod: str | None = None) -> int | None:
        """Queue a change of placement only, as :meth:`submit` queues
        ``ChangeArgs(name=name, fields=fields)``, with no model built; returns the
        command's id. ``fields`` (taken as it is: the caller gives it up) maps some of
        ``x y z rx ry rz scale`` to floats, and ``name`` is a string of at most 256
        characters: the values the model would hold (the caller checked them; the
        ``coreai_world_change`` binding's fast path does, with a checker compiled from
        the model). Returns ``None``, queuing nothing, when ``fields`` is empty or holds
        another field, or ``mod`` has a transaction open: :meth:`submit` serves those.

        Raises:
            WorldError: ``queue_full``, as :meth:`submit`.
        """
        if not fields or not fields.keys() <= _PLACEMENT or (
                self._transactions and mod in self._transactions):
            return None
        pending, by_mod = self._pending, self._pending_by_mod
        mine = by_mod.get(mod, 0)
        if len(pending) >= self.max_pending or (
                mod is not None and mine >= self.max_pending_per_mod):
            self._check_room(mod, 1)
        command_id = self._next_command
        self._next_command = command_id + 1
        if len(fields) == 1:
            # The commonest change: no dict kept until the apply. A thousand mods' dicts,
            # held through the tick, were a few hundred KiB of fresh memory each tick,
            # and the cache misses of it on every later call.
            for field, value in fields.items():
                pending.append((command_id, mod, name, field, value))
        else:
            pending.append((command_id, mod, name, fields))  # no object made: see _modelled
        by_mod[mod] = mine + 1
        return command_id

    def _check_room(self, mod: str | None, n: int) -> None:
        if len(self._pending) + n > self.max_pending:
            raise WorldError(f"{len(self._pending)} commands are queued already; "
                             "wait for the next tick", code="queue_full")
        mine = self._pending_by_mod.get(mod, 0)
        if mod is not None and mine + n > self.max_pending_per_mod:
            raise WorldError(f"this mod has {mine} commands queued already (at most "
                             f"{self.max_pending_per_mod}); wait for the next tick",
                             code="queue_full")

    def begin(self, mod: str | None = None) -> None:
        """Open a transaction for ``mod``: its commands collect until :meth:`commit`.

        Raises:
            WorldError: ``transaction``: one is open already.
        """
        if mod in self._transactions:
            raise WorldError("a transaction is open already; commit or roll it back first",
                             code="transaction")
        self._transactions[mod] = []

    def in_transaction(self, mod: str | None = None) -> bool:
        return mod in self._transactions

    def commit(self, mod: str | None = None) -> int:
        """Queue ``mod``'s transaction as one command, applied all or none; returns how many
        commands it holds (an empty transaction queues nothing).

        Raises:
            WorldError: ``transaction``: none is open; ``queue_full``.
        """
        tx = self._transactions.get(mod)
        if tx is None:
            raise WorldError("no transaction is open; call begin first", code="transaction")
        if tx:
            try:
                self._check_room(mod, len(tx))
            except WorldError:
                del self._transactions[mod]
                raise
        del self._transactions[mod]
        if tx:
            self._pending.append(Command(tx[0].id, mod, "transaction", tuple(tx)))
            self._pending_by_mod[mod] = self._pending_by_mod.get(mod, 0) + len(tx)
        return len(tx)

    def rollback(self, mod: str | None = None) -> int:
        """Drop ``mod``'s open transaction; returns how many commands it held (0 if none
        was open)."""
        return len(self._transactions.pop(mod, ()))

    @property
    def next_command_id(self) -> int:
        """The id the next queued command gets (ids only grow)."""
        return self._next_command

    def discard(self, mod: str | None, since_id: int) -> int:
        """Take back what ``mod`` queued from command ``since_id`` on, and its open
        transaction; returns how many commands were dropped. For a host that undoes what a
        mod asked (the engine, when it builds again a mod whose worker was lost)."""
        dropped = self.rollback(mod)
        kept: list[Command] = []
        for command in self._pending:
            if type(command) is tuple:
                command_id, command_mod = command[0], command[1]
            else:
                command_id, command_mod = command.id, command.mod
            if command_mod == mod and command_id >= since_id:
                n = (len(command.args)  # type: ignore[union-attr]
                     if type(command) is not tuple and command.kind == "transaction" else 1)
                dropped += n
                self._pending_by_mod[mod] = self._pending_by_mod.get(mod, 0) - n
            else:
                kept.append(command)
        self._pending = kept
        return dropped

    def apply(self) -> list[CommandResult]:
        """Apply every queued command in order: the one place the world changes.

        Each command is validated now, against the state the commands before it left;
        a refused one changes nothing (a transaction, batch or grid: all of it or none).
        """
        pending, self._pending = self._pending, []
        self._pending_by_mod.clear()
        results: list[CommandResult] = []
        append = results.append
        place = self._place
        by_name, entities, bound = self._by_name, self._entities, self.bound
        for command in pending:
            if type(command) is tuple:  # a change of placement (submit_placement)
                if len(command) == 5:
                    command_id, mod, name, field, value = command
                    # One coordinate or rotation within bounds, by the entity's owner or
                    # the host: the commonest command of all, as _place applies it,
                    # written out (a frame a command was a cost at 1,000 mods); anything
                    # else, a refusal included, _place applies.
                    eid = by_name.get(name)
                    if eid is not None and field != "scale" and value is not None and \
                            -bound <= value <= bound:
                        entity = entities[eid]
                        if mod is None or entity.owner == mod:
                            setattr(entity, field, float(value) + 0.0)
                            append(new_result(command_id, mod, "change", "applied", None,
                                              f"changed {name}", (entity.name,)))
                            continue
                    append(place(command_id, mod, name, {field: value}))
                else:
                    append(place(*command))
                continue
            kind = command.kind
            if kind == "change":
                append(self._apply_change(command))
            elif kind == "transaction":
                results += self._apply_transaction(command)
            else:
                append(self._apply_single(command))
        return results

    def _apply_change(self, command: Command) -> CommandResult:
        """One change command (not in a transaction): :meth:`_apply_single` of it, with
        less work when it sets coordinates, rotations or the scale only (the commonest
        write of all). The same checks in the same order, the same result; the entity is
        changed in place once every check has passed, where the general path replaces it
        with a changed copy (no one outside the world holds an entity: it hands out
        copies)."""
        a = command.args
        f = a.fields
        given = f.__pydantic_fields_set__
        if not given <= _PLACEMENT:
            return self._apply_single(command)
        return self._place(command.id, command.mod, a.name, f.__dict__, given)

    def _place(self, command_id: int, mod: str | None, name: str, values: dict[str, Any],
               given: Any = None) -> CommandResult:
        """A change of placement only, as :meth:`_apply_change` applies it: ``given``
        the fields given (``values``' keys if ``None``: a placement queued by
        :meth:`submit_placement`, whose tuple is these arguments), ``values`` theirs."""
        if given is None:
            given = values
        eid = self._by_name.get(name)
        try:
            if eid is None:
                raise _Refused("not_found", f"no entity is named {name[:80]!r}")
            entity = self._entities[eid]
            if mod is not None and entity.owner != mod:
                self._touch(entity, mod)
            bound = self.bound
            if len(given) == 1 and "scale" not in given:
                # One coordinate or rotation, the commonest change: no loop over the
                # axes, nothing to collect (the checks and the result are the same).
                for axis in given:
                    v = values[axis]
                if v is not None:
                    if -bound <= v <= bound:  # in bounds: finite too
                        v = float(v) + 0.0
                    else:
                        v = self._number(v, axis)
                    setattr(entity, axis, v)
                return new_result(command_id, mod, "change", "applied", None,
                                  f"changed {name}", (entity.name,))
            new: list[tuple[str, float]] = []
            for axis in _AXES:
                if axis in given:
                    v = values[axis]
                    if v is not None:
                        # In bounds: finite too (NaN fails every comparison).
                        if -bound <= v <= bound:
                            new.append((axis, float(v) + 0.0))
                        else:
                            new.append((axis, self._number(v, axis)))
            if "scale" in given:
                v = values["scale"]
                if v is not None:
                    new.append(("scale", self._scale(v)))
        except _Refused as r:
            # (name,): what _names_of gives for a change
            return new_result(command_id, mod, "change", "refused", r.reason, r.message,
                              (name,))
        for axis, v in new:
            setattr(entity, axis, v)
        return new_result(command_id, mod, "change", "applied", None, f"changed {name}",
                          (entity.name,))

    def _apply_single(self, command: Command) -> CommandResult:
        undo: list[tuple[str, Any]] = []
        mark = self._next_id
        try:
            names, message = self._apply(command, undo)
        except _Refused as r:
            self._undo(undo, mark)
            return new_result(command.id, command.mod, command.kind, "refused", r.reason,
                              r.message, _names_of(command))
        return new_result(command.id, command.mod, command.kind, "applied", None, message,
                          names)

    def _apply_transaction(self, command: Command) -> list[CommandResult]:
        undo: list[tuple[str, Any]] = []
        mark = self._next_id
        done: list[tuple[Command, tuple[str, ...], str]] = []
        for sub in command.args:
            try:
                names, message = self._apply(sub, undo)
            except _Refused as r:
                self._undo(undo, mark)
                out = []
                for other in command.args:
                    if other is sub:
                        out.append(CommandResult(sub.id, sub.mod, sub.kind, "refused",
                                                 r.reason, r.message, _names_of(sub)))
                    else:
                        out.append(CommandResult(
                            other.id, other.mod, other.kind, "refused", "transaction_failed",
                            f"rolled back with its transaction: command {sub.id} "
                            f"({sub.kind}) was refused", _names_of(other)))
                return out
            done.append((sub, names, message))
        return [CommandResult(c.id, c.mod, c.kind, "applied", None, m, n) for c, n, m in done]

    def _apply(self, command: Command, undo: list[tuple[str, Any]]) -> tuple[tuple[str, ...], str]:
        args = command.args
        mod = command.mod
        kind = command.kind
        if kind == "spawn":
            return (self._spawn(args, mod, undo),), f"spawned {args.name}"
        if kind == "change":
            return self._change(args, mod, undo), f"changed {args.name}"
        if kind == "set_color":
            return self._set_color(args, mod, undo), f"colored {args.name}"
        if kind == "destroy":
            names = self._destroy(args, mod, undo)
            return names, f"destroyed {len(names)} entit{'y' if len(names) == 1 else 'ies'}"
        if kind == "spawn_batch":
            names = []
            for i, item in enumerate(args.items, 1):
                try:
                    names.append(self._spawn(item, mod, undo))
                except _Refused as r:
                    raise _Refused(r.reason, f"item {i}: {r.message}") from None
            return tuple(names), f"spawned {len(names)} entities"
        if kind == "grid":
            self._check_name(args.name)
            names = []
            for i in range(args.nx):
                for j in range(args.nz):
                    spec = SpawnArgs(
                        prefab=args.prefab, name=f"{args.name}_{i}_{j}",
                        x=args.x + i * args.spacing, y=args.y, z=args.z + j * args.spacing,
                        scale=args.scale, properties=args.properties)
                    names.append(self._spawn(spec, mod, undo))
            return tuple(names), f"spawned a grid of {len(names)} entities"
        raise ConfigError(f"unknown command kind {kind!r}")  # unreachable via submit

    # -- validation ------------------------------------------------------------------------

    def _number(self, value: float, what: str) -> float:
        if not math.isfinite(value):
            raise _Refused("not_finite", f"{what} must be a finite number, got {value}")
        if abs(value) > self.bound:
            raise _Refused("out_of_bounds",
                           f"{what} must be within ±{self.bound:g}, got {value:g}")
        return _plain(value)

    def _scale(self, value: float) -> float:
        if not math.isfinite(value):
            raise _Refused("not_finite", f"scale must be a finite number, got {value}")
        if not 0 < value <= MAX_SCALE:
            raise _Refused("out_of_bounds", f"scale must be in (0, {MAX_SCALE:g}], got {value:g}")
        return _plain(value)

    @staticmethod
    def _check_name(name: str) -> None:
        if not 1 <= len(name) <= MAX_NAME_CHARS or not name.isprintable():
            raise _Refused("invalid_name",
                           f"name {name[:80]!r} must be 1-{MAX_NAME_CHARS} printable characters")

    def _entity(self, name: str) -> Entity:
        eid = self._by_name.get(name)
        if eid is None:
            raise _Refused("not_found", f"no entity is named {name[:80]!r}")
        return self._entities[eid]

    @staticmethod
    def _touch(entity: Entity, mod: str | None, what: str = "") -> None:
        if mod is not None and entity.owner != mod:
            owner = "the host" if entity.owner is None else f"mod {entity.owner!r}"
            raise _Refused("not_owner", f"{what}{entity.name!r} belongs to {owner}")

    def _parent(self, name: str, mod: str | None) -> Entity:
        eid = self._by_name.get(name)
        if eid is None:
            raise _Refused("missing_parent", f"the parent {name[:80]!r} does not exist")
        parent = self._entities[eid]
        self._touch(parent, mod, "the parent ")
        return parent

    def _properties(self, prefab: Prefab, values: dict[str, Any]) -> dict[str, Any]:
        # NaN and infinities are refused before the schema sees them (whatever the schema
        # allows) and after (a schema's default or validator could make one); -0.0 is
        # stored as 0.0, as in coordinates.
        self._finite_properties(prefab, values)
        try:
            validated = prefab.validate_properties(values)
        except ValidationError as exc:
            first = first_error(exc.errors())
            where = ".".join(str(p) for p in first["loc"]) or "properties"
            raise _Refused("invalid_properties",
                           f"{prefab.name} property {where}: {first['msg']}") from None
        self._finite_properties(prefab, validated)
        return {k: _plain(v) if type(v) is float else v for k, v in validated.items()}

    @staticmethod
    def _finite_properties(prefab: Prefab, values: dict[str, Any]) -> None:
        for key, value in values.items():
            if type(value) is float and not math.isfinite(value):
                raise _Refused("not_finite", f"{prefab.name} property {str(key)[:80]} must "
                               f"be a finite number, got {value}")

    # -- the changes -----------------------------------------------------------------------

    def _spawn(self, a: SpawnArgs, mod: str | None, undo: list[tuple[str, Any]]) -> str:
        prefab = self.prefabs.get(a.prefab)
        if prefab is None:
            raise _Refused("unknown_prefab", f"no prefab is named {a.prefab[:80]!r}; "
                           "coreai_world_list_prefabs() lists them")
        name = a.name or ""
        self._check_name(name)
        if name in self._by_name:
            raise _Refused("duplicate_name", f"an entity named {name!r} exists already")
        x, y, z = (self._number(a.x, "x"), self._number(a.y, "y"), self._number(a.z, "z"))
        rx, ry, rz = (self._number(a.rx, "rx"), self._number(a.ry, "ry"),
                      self._number(a.rz, "rz"))
        scale = self._scale(a.scale)
        parent = self._parent(a.parent, mod).id if a.parent else None
        properties = self._properties(prefab, a.properties or {})
        if len(self._entities) >= self.max_entities:
            raise _Refused("world_full", f"the world holds {self.max_entities} entities, "
                           "its maximum")
        entity = Entity(self._next_id, prefab.name, name, x, y, z, rx, ry, rz, scale, parent,
                        properties=properties, owner=mod)
        self._next_id += 1
        self._put(entity)
        undo.append(("created", entity.id))
        return name

    def _change(self, a: ChangeArgs, mod: str | None,
                undo: list[tuple[str, Any]]) -> tuple[str, ...]:
        entity = self._entity(a.name)
        self._touch(entity, mod)
        f = a.fields
        given = f.model_fields_set
        new = entity.copy()
        for axis in ("x", "y", "z", "rx", "ry", "rz"):
            if axis in given and getattr(f, axis) is not None:
                setattr(new, axis, self._number(getattr(f, axis), axis))
        if "scale" in given and f.scale is not None:
            new.scale = self._scale(f.scale)
        if "parent" in given and f.parent is not None:
            if f.parent == "":
                new.parent = None
            else:
                parent = self._parent(f.parent, mod)
                walk: Entity | None = parent
                while walk is not None:
                    if walk.id == entity.id:
                        raise _Refused("parent_cycle",
                                       f"{entity.name!r} cannot be a descendant of itself")
                    walk = self._entities.get(walk.parent) if walk.parent is not None else None
                new.parent = parent.id
        if "properties" in given and f.properties is not None:
            prefab = self.prefabs.get(entity.prefab)
            if prefab is None:
                raise _Refused("unknown_prefab", f"the prefab {entity.prefab!r} is gone")
            new.properties = self._properties(prefab, {**entity.properties, **f.properties})
        self._replace(entity, new, undo)
        return (entity.name,)

    def _set_color(self, a: SetColorArgs, mod: str | None,
                   undo: list[tuple[str, Any]]) -> tuple[str, ...]:
        entity = self._entity(a.name)
        self._touch(entity, mod)
        rgba = []
        for what, v in (("r", a.r), ("g", a.g), ("b", a.b), ("a", a.a)):
            if not math.isfinite(v):
                raise _Refused("not_finite", f"color {what} must be a finite number")
            if not 0.0 <= v <= 1.0:
                raise _Refused("out_of_bounds", f"color {what} must be in 0..1, got {v:g}")
            rgba.append(_plain(v))
        new = entity.copy()
        new.color = (rgba[0], rgba[1], rgba[2], rgba[3])
        self._replace(entity, new, undo)
        return (entity.name,)

    def _destroy(self, a: DestroyArgs, mod: str | None,
                 undo: list[tuple[str, Any]]) -> tuple[str, ...]:
        entity = self._entity(a.name)
        doomed = [entity]
        i = 0
        while i < len(doomed):
            for child in sorted(self._children.get(doomed[i].id, ())):
                doomed.append(self._entities[child])
            i += 1
        for e in doomed:
            self._touch(e, mod, "" if e is entity else "the descendant ")
        for e in reversed(doomed):
            self._remove(e.id)
            undo.append(("deleted", e))
        return tuple(e.name for e in doomed)

    # -- bookkeeping -----------------------------------------------------------------------

    def _put(self, entity: Entity) -> None:
        self._entities[entity.id] = entity
        self._by_name[entity.name] = entity.id
        if entity.parent is not None:
            self._children.setdefault(entity.parent, set()).add(entity.id)

    def _remove(self, entity_id: int) -> Entity:
        entity = self._entities.pop(entity_id)
        del self._by_name[entity.name]
        if entity.parent is not None:
            siblings = self._children.get(entity.parent)
            if siblings is not None:
                siblings.discard(entity_id)
                if not siblings:
                    del self._children[entity.parent]
        return entity

    def _replace(self, old: Entity, new: Entity, undo: list[tuple[str, Any]]) -> None:
        self._remove(old.id)
        self._put(new)
        undo.append(("modified", old))

    def _undo(self, undo: list[tuple[str, Any]], next_id: int) -> None:
        for action, item in reversed(undo):
            if action == "created":
                self._remove(item)
            elif action == "deleted":
                self._put(item)
            else:  # modified
                self._remove(item.id)
                self._put(item)
        self._next_id = next_id

    # -- snapshots -------------------------------------------------------------------------

    def _content(self) -> dict[str, Any]:
        return {
            "next_id": self._next_id,
            "entities": [self._entities[i].to_dict() for i in sorted(self._entities)],
        }

    def snapshot(self, *, pending: bool = False) -> bytes:
        """The applied state as msgpack.

        With ``pending``, also the commands queued and not yet applied and the open
        transactions, each command as its kind and arguments (what a game's snapshot at a
        tick boundary holds: commands the host queued between ticks, transactions a mod
        left open); :meth:`load` and :meth:`restore` queue them again, with their ids.
        """
        doc = {
            "format": SNAPSHOT_FORMAT, "version": SNAPSHOT_VERSION,
            "next_command": self._next_command, "next_auto": self._next_auto,
            **self._content(),
        }
        if pending:
            doc["pending"] = [_command_doc(c) for c in self._pending]
            doc["transactions"] = [[mod, [_command_doc(c) for c in tx]]
                                   for mod, tx in self._transactions.items()]
        return msgpack.packb(doc, use_bin_type=True)

    def restore(self, data: bytes) -> None:
        """Replace everything this world holds by a :meth:`snapshot`'s: entities, counters
        and (if the snapshot has them) queued commands and open transactions. The prefabs,
        bounds and limits stay this world's; every entity and command is checked against
        them, and on a refusal nothing changes.

        Raises:
            WorldError: ``bad_snapshot`` (see :meth:`load`).
        """
        loaded = type(self).load(data, self.prefabs, bound=self.bound,
                                 max_entities=self.max_entities, max_pending=self.max_pending,
                                 max_pending_per_mod=self.max_pending_per_mod)
        for name in ("_pending_by_mod", "_entities", "_by_name", "_children", "_next_id",
                     "_next_command", "_next_auto", "_pending", "_transactions"):
            setattr(self, name, getattr(loaded, name))

    def content_hash(self) -> str:
        """sha256 (hex) of a canonical msgpack encoding of the entities and the next id.

        Equal worlds hash alike whatever order their entities were made in; the pending
        queue and counters of generated names are not content.
        """
        return hashlib.sha256(msgpack.packb(self._content(), use_bin_type=True)).hexdigest()

    @classmethod
    def load(cls, data: bytes, prefabs: Prefabs | None = None, **options: Any) -> World:
        """A world from :meth:`snapshot` bytes, every entity validated as a spawn would be.

        Raises:
            WorldError: ``bad_snapshot``: not a snapshot, a newer version, or an entity the
                world refuses (unknown prefab, bad value, duplicate name, missing parent).
        """
        world = cls(prefabs, **options)
        try:
            doc = msgpack.unpackb(data, raw=False, strict_map_key=True)
        except Exception as exc:
            raise WorldError(f"not a world snapshot: {exc}", code="bad_snapshot") from None
        if not isinstance(doc, dict) or doc.get("format") != SNAPSHOT_FORMAT:
            raise WorldError("not a world snapshot (no moonbox.world format marker)",
                             code="bad_snapshot")
        if doc.get("version") != SNAPSHOT_VERSION:
            raise WorldError(f"snapshot version {doc.get('version')!r} is not supported "
                             f"(this moonbox reads version {SNAPSHOT_VERSION})",
                             code="bad_snapshot")
        try:
            world._load_entities(doc)
            world._load_pending(doc)
        except (_Refused, KeyError, TypeError, ValueError, WorldError) as exc:
            message = exc.message if isinstance(exc, _Refused) else f"{type(exc).__name__}: {exc}"
            raise WorldError(f"the snapshot holds an invalid entity: {message}",
                             code="bad_snapshot") from None
        return world

    def _load_entities(self, doc: dict[str, Any]) -> None:
        raw = doc["entities"]
        if not isinstance(raw, list):
            raise TypeError("entities must be a list")
        parents: dict[int, Any] = {}
        for item in raw:
            if len(self._entities) >= self.max_entities:
                raise _Refused("world_full", "more entities than max_entities")
            eid = item["id"]
            if type(eid) is not int or eid < 1 or eid in self._entities:
                raise ValueError(f"bad or repeated id {eid!r}")
            owner = item["owner"]
            if owner is not None and not isinstance(owner, str):
                raise TypeError("owner must be a string or nil")
            spec = SpawnArgs(
                prefab=item["prefab"], name=item["name"], x=item["x"], y=item["y"],
                z=item["z"], rx=item["rx"], ry=item["ry"], rz=item["rz"], scale=item["scale"],
                properties=item["properties"])
            self._next_id = eid
            self._spawn(spec, owner, [])
            color = item["color"]
            if not (isinstance(color, list) and len(color) == 4):
                raise TypeError("color must be 4 numbers")
            entity = self._entities[eid]
            self._set_color(SetColorArgs(name=entity.name, r=color[0], g=color[1], b=color[2],
                                         a=color[3]), None, [])
            parents[eid] = item["parent"]
        for eid, parent in parents.items():
            if parent is None:
                continue
            if type(parent) is not int or parent not in self._entities:
                raise _Refused("missing_parent", f"entity {eid}: parent {parent!r} is missing")
            entity = self._entities[eid]
            new = entity.copy()
            new.parent = parent
            self._replace(entity, new, [])
        for eid in self._entities:  # no cycles
            seen = {eid}
            walk = self._entities[eid].parent
            while walk is not None:
                if walk in seen:
                    raise _Refused("parent_cycle", f"entity {eid} is its own ancestor")
                seen.add(walk)
                walk = self._entities[walk].parent
        next_id = doc["next_id"]
        top = max(self._entities, default=0)
        if type(next_id) is not int or next_id <= top:
            raise ValueError(f"next_id {next_id!r} must be above every entity id")
        self._next_id = next_id
        self._next_command = int(doc.get("next_command", 1))
        self._next_auto = int(doc.get("next_auto", 1))

    def _load_pending(self, doc: dict[str, Any]) -> None:
        pending = doc.get("pending", [])
        transactions = doc.get("transactions", [])
        if not isinstance(pending, list) or not isinstance(transactions, list):
            raise TypeError("pending and transactions must be lists")
        for item in pending:
            command = self._command_from(item)
            n = len(command.args) if command.kind == "transaction" else 1
            self._check_room(command.mod, n)
            self._pending.append(command)
            self._pending_by_mod[command.mod] = self._pending_by_mod.get(command.mod, 0) + n
        for mod, commands in transactions:
            if (mod is not None and not isinstance(mod, str)) or mod in self._transactions:
                raise ValueError(f"bad or repeated transaction owner {mod!r}")
            if not isinstance(commands, list) or len(commands) > MAX_TRANSACTION:
                raise ValueError("a transaction holds a list of at most "
                                 f"{MAX_TRANSACTION} commands")
            self._transactions[mod] = [self._command_from(c, mod) for c in commands]
        ids = [c.id for c in self._pending] + [
            c.id for tx in self._transactions.values() for c in tx]
        if any(i >= self._next_command for i in ids):
            raise ValueError("a queued command's id is not below next_command")

    def _command_from(self, item: Any, owner: Any = ...) -> Command:
        """A queued command from its snapshot form, its arguments validated again."""
        cid, mod, kind, args = item["id"], item["mod"], item["kind"], item["args"]
        if type(cid) is not int or cid < 1:
            raise ValueError(f"bad command id {cid!r}")
        if (mod is not None and not isinstance(mod, str)) or (owner is not ... and mod != owner):
            raise ValueError(f"bad command owner {mod!r}")
        if kind == "transaction":
            if not isinstance(args, list) or not 1 <= len(args) <= MAX_TRANSACTION:
                raise ValueError("a transaction holds 1 to 256 commands")
            subs = tuple(self._command_from(sub, mod) for sub in args)
            if any(sub.kind == "transaction" for sub in subs):
                raise ValueError("transactions do not nest")
            return Command(cid, mod, "transaction", subs)
        model_cls = _ARGS.get(kind)
        if model_cls is None:
            raise ValueError(f"unknown command kind {kind!r}")
        return Command(cid, mod, kind, model_cls.model_validate(args))

    def __iter__(self) -> Iterator[Entity]:
        return iter(self.entities())


def _modelled(command: Command | tuple[Any, ...]) -> Command:
    # The command as submit would have queued it. A change of placement queued by
    # World.submit_placement is the tuple (id, mod, name, fields), or (id, mod, name,
    # field, value) for one field: what ChangeArgs would hold, without the model or a
    # Command (making them costs more than the rest of the write). Only the world sees
    # it: World.pending and snapshots give the model.
    if type(command) is tuple:
        if len(command) == 5:
            command_id, mod, name, field, value = command
            fields = {field: value}
        else:
            command_id, mod, name, fields = command
        # In the model's field order, as a submitted model would dump.
        return Command(command_id, mod, "change", ChangeArgs.model_validate({
            "name": name,
            "fields": {k: fields[k] for k in ChangeFields.model_fields if k in fields}}))
    return command  # type: ignore[return-value]


def _command_doc(command: Command) -> dict[str, Any]:
    # Only the fields the command was given: a change applies exactly those.
    command = _modelled(command)
    args = command.args
    if command.kind == "transaction":
        args = [_command_doc(sub) for sub in args]
    else:
        args = args.model_dump(mode="python", exclude_unset=True)
    return {"id": command.id, "mod": command.mod, "kind": command.kind, "args": args}


def _names_of(command: Command) -> tuple[str, ...]:
    args = command.args
    if isinstance(args, SpawnBatchArgs):
        return tuple(i.name or "" for i in args.items)
    name = getattr(args, "name", None)
    return (name,) if isinstance(name, str) else ()
