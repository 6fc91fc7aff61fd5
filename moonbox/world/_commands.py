"""World commands: what a mod (or the host) asks the world to do, and what came of it.

A command's arguments are checked for *types* when it is issued (a wrong type fails the
call); its *values* are checked when the world applies it (a refused command becomes a
result with a reason code). The argument models here are the bindings' models too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)

__all__ = [
    "MAX_BATCH",
    "MAX_FIND",
    "ChangeArgs",
    "ChangeFields",
    "Command",
    "CommandKind",
    "CommandResult",
    "DestroyArgs",
    "FindArgs",
    "GridArgs",
    "NameArgs",
    "NoArgs",
    "RaycastArgs",
    "SetColorArgs",
    "SpawnArgs",
    "SpawnBatchArgs",
]

MAX_BATCH = 100
"""Entities one ``spawn_batch`` or ``grid`` command may spawn."""
MAX_FIND = 100
"""Names one ``find`` returns at most."""
MAX_ARG_CHARS = 256
"""Longest string a world binding accepts (names are refused past 64 at apply time)."""
MAX_PROPERTIES = 64

CommandKind = Literal["spawn", "change", "set_color", "destroy", "spawn_batch", "grid",
                      "transaction"]

# Numbers as Lua gives them: NaN and infinities pass here and are refused when applied
# (``not_finite``), coordinates and property values alike: a command's values are checked
# against the world it applies to, its types when it is issued.
Number = StrictFloat
Finite = Annotated[StrictFloat, AllowInfNan(False)]
Text = Annotated[StrictStr, Field(max_length=MAX_ARG_CHARS)]
PropertyValue = StrictBool | Number | Annotated[StrictStr, Field(max_length=4096)]
Properties = Annotated[dict[Text, PropertyValue], Field(max_length=MAX_PROPERTIES)]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SpawnArgs(_Args):
    """``coreai_world_spawn{prefab=, name=, x=, y=, z=, rx=, ry=, rz=, scale=, parent=,
    properties=}``: only ``prefab`` is required; a missing name is generated."""

    prefab: Text
    name: Text | None = None
    x: Number = 0.0
    y: Number = 0.0
    z: Number = 0.0
    rx: Number = 0.0
    ry: Number = 0.0
    rz: Number = 0.0
    scale: Number = 1.0
    parent: Text | None = None
    properties: Properties | None = None


class ChangeFields(_Args):
    """The fields ``coreai_world_change`` may set; only those given change.

    ``parent = ""`` detaches from the parent; ``properties`` merges into the current ones.
    """

    x: Number | None = None
    y: Number | None = None
    z: Number | None = None
    rx: Number | None = None
    ry: Number | None = None
    rz: Number | None = None
    scale: Number | None = None
    parent: Text | None = None
    properties: Properties | None = None


class ChangeArgs(_Args):
    """``coreai_world_change(name, {fields})``."""

    name: Text
    fields: ChangeFields


class SetColorArgs(_Args):
    """``coreai_world_set_color(name, r, g, b, a = 1)``, each component in 0..1."""

    name: Text
    r: Number
    g: Number
    b: Number
    a: Number = 1.0


class DestroyArgs(_Args):
    """``coreai_world_destroy(name)``: the entity and all its descendants."""

    name: Text


class SpawnBatchArgs(_Args):
    """``coreai_world_spawn_batch({ {spawn args}, ... })``: 1 to 100 spawns, all or none."""

    items: Annotated[list[SpawnArgs], Field(min_length=1, max_length=MAX_BATCH)]


class GridArgs(_Args):
    """``coreai_world_grid{prefab=, name=, x=, y=, z=, nx=, nz=, spacing=}``.

    Spawns ``nx * nz`` (at most 100) entities named ``<name>_<i>_<j>`` on the x/z plane,
    from ``(x, y, z)`` in steps of ``spacing``; all or none.
    """

    prefab: Text
    name: Text
    x: Number = 0.0
    y: Number = 0.0
    z: Number = 0.0
    nx: Annotated[StrictInt, Field(ge=1, le=MAX_BATCH)] = 1
    nz: Annotated[StrictInt, Field(ge=1, le=MAX_BATCH)] = 1
    spacing: Number = 1.0
    scale: Number = 1.0
    properties: Properties | None = None

    @model_validator(mode="after")
    def _size(self) -> GridArgs:
        if self.nx * self.nz > MAX_BATCH:
            raise ValueError(f"a grid spawns at most {MAX_BATCH} entities (nx * nz)")
        return self


class NameArgs(_Args):
    name: Text


class FindArgs(_Args):
    text: Text
    limit: Annotated[StrictInt, Field(ge=1, le=MAX_FIND)] = MAX_FIND


class RaycastArgs(_Args):
    x: Finite
    y: Finite
    z: Finite
    dx: Finite
    dy: Finite
    dz: Finite
    max_distance: Annotated[Finite, Field(gt=0, le=1e6)] = 1000.0


class NoArgs(_Args):
    pass


@dataclass(frozen=True, slots=True)
class Command:
    """One queued request to change the world.

    Attributes:
        id: increasing per world; results and refusal events carry it.
        mod: the issuing mod, or ``None`` for the host (which may touch anything).
        kind: ``spawn``, ``change``, ``set_color``, ``destroy``, ``spawn_batch``, ``grid``
            or ``transaction`` (a committed transaction: ``args`` is its commands).
        args: the validated arguments (one of the ``*Args`` models), or for a transaction
            the tuple of its commands.
    """

    id: int
    mod: str | None
    kind: CommandKind
    args: Any

    # One is made for every write of every mod: the slots are set through their
    # descriptors, which costs about two thirds of the object.__setattr__ calls the
    # generated __init__ of a frozen class makes. The instance is the same.
    def __init__(self, id: int, mod: str | None, kind: CommandKind, args: Any) -> None:
        _command_id(self, id)
        _command_mod(self, mod)
        _command_kind(self, kind)
        _command_args(self, args)


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What became of one command.

    Attributes:
        id, mod, kind: those of the command (a transaction yields one result per command
            in it, with that command's id and kind).
        status: ``applied`` or ``refused``.
        reason: the reason code of a refusal (see :data:`moonbox.world.REASONS`).
        message: one sentence on what was done or refused.
        names: the entities the command created, changed or destroyed.
    """

    id: int
    mod: str | None
    kind: str
    status: Literal["applied", "refused"]
    reason: str | None = None
    message: str = ""
    names: tuple[str, ...] = ()

    # As Command's: one for every command of every tick.
    def __init__(self, id: int, mod: str | None, kind: str,
                 status: Literal["applied", "refused"], reason: str | None = None,
                 message: str = "", names: tuple[str, ...] = ()) -> None:
        _result_id(self, id)
        _result_mod(self, mod)
        _result_kind(self, kind)
        _result_status(self, status)
        _result_reason(self, reason)
        _result_message(self, message)
        _result_names(self, names)

    @property
    def applied(self) -> bool:
        return self.status == "applied"

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (``moonbox run --json``'s ``commands``)."""
        return {
            "id": self.id, "mod": self.mod, "command": self.kind, "status": self.status,
            "reason": self.reason, "message": self.message, "names": list(self.names),
        }


class _NewResult:
    """Makes a :class:`CommandResult` (``new_result(id, mod, kind, status, reason,
    message, names)``, every field given) at a third of what its constructor costs, for
    the world's apply: it sets the same slots plainly, then becomes the frozen class,
    whose layout is the same. What it makes is a CommandResult like any other."""

    __slots__ = CommandResult.__slots__  # the same slots, in the same order

    def __init__(self, id: int, mod: str | None, kind: str,
                 status: Literal["applied", "refused"], reason: str | None, message: str,
                 names: tuple[str, ...]) -> None:
        self.id = id
        self.mod = mod
        self.kind = kind
        self.status = status
        self.reason = reason
        self.message = message
        self.names = names
        self.__class__ = CommandResult  # type: ignore[assignment]


new_result: Callable[..., CommandResult] = _NewResult  # type: ignore[assignment]

_command_id, _command_mod, _command_kind, _command_args = (
    Command.__dict__[name].__set__ for name in ("id", "mod", "kind", "args"))
(_result_id, _result_mod, _result_kind, _result_status, _result_reason, _result_message,
 _result_names) = (CommandResult.__dict__[name].__set__ for name in (
    "id", "mod", "kind", "status", "reason", "message", "names"))
