"""Entities and prefabs: what the world holds and what may be spawned into it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import AllowInfNan, BaseModel, ConfigDict, StrictBool, StrictFloat, StrictStr

from .._errors import ConfigError

__all__ = ["Color", "Entity", "Prefab", "Prefabs", "default_prefabs"]

Color = tuple[float, float, float, float]
WHITE: Color = (1.0, 1.0, 1.0, 1.0)

_PREFAB_NAME = re.compile(r"^[a-z][a-z0-9_:-]{0,63}$")

FiniteFloat = Annotated[StrictFloat, AllowInfNan(False)]
"""A strict float that is not NaN or infinite: the type of a number property."""


@dataclass(slots=True)
class Entity:
    """One thing in the world. The world hands out copies; only the world changes its own.

    Attributes:
        id: stable id, never reused within a world.
        prefab: the prefab it was spawned from.
        name: unique within the world (exact match).
        x, y, z: position, each within the world's bounds.
        rx, ry, rz: rotation in degrees, each within the world's bounds.
        scale: uniform scale, ``0 < scale <= MAX_SCALE``.
        parent: id of the parent entity, or ``None``.
        color: red, green, blue, alpha, each in ``0..1``.
        properties: the prefab's properties, validated by its schema.
        owner: the mod that spawned it, or ``None`` for the host.
    """

    id: int
    prefab: str
    name: str
    x: float = 0.0
    y: float = 0.0
    z: float = 0.0
    rx: float = 0.0
    ry: float = 0.0
    rz: float = 0.0
    scale: float = 1.0
    parent: int | None = None
    color: Color = WHITE
    properties: dict[str, Any] = field(default_factory=dict)
    owner: str | None = None

    def copy(self) -> Entity:
        return Entity(self.id, self.prefab, self.name, self.x, self.y, self.z, self.rx,
                      self.ry, self.rz, self.scale, self.parent, self.color,
                      dict(self.properties), self.owner)

    def to_dict(self) -> dict[str, Any]:
        """Plain data, keys in a fixed order (the snapshot and hash form)."""
        return {
            "id": self.id, "prefab": self.prefab, "name": self.name,
            "x": self.x, "y": self.y, "z": self.z,
            "rx": self.rx, "ry": self.ry, "rz": self.rz, "scale": self.scale,
            "parent": self.parent, "color": list(self.color),
            "properties": {k: self.properties[k] for k in sorted(self.properties)},
            "owner": self.owner,
        }


class NoProperties(BaseModel):
    """The schema of a prefab without properties: none are accepted."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class Prefab:
    """A kind of entity the world may spawn.

    Attributes:
        name: lower-case id (``crate``, ``arena:enemy``): letters, digits, ``_ : -``.
        properties: a pydantic model of the entity's properties (``extra="forbid"``
            recommended); every field must be a number, string or boolean. Defaults fill in
            at spawn; a change validates the merged result. The world refuses NaN and
            infinite numbers (``not_finite``) whatever the schema says, and stores -0.0 as
            0.0; a schema says so too with ``AllowInfNan(False)`` on its floats.
        description: one line for mods (``coreai_world_list_prefabs``).
        radius: collision radius for raycasts, multiplied by the entity's scale.

    Raises:
        ConfigError: a bad name, a non-model schema, a non-positive radius.
    """

    name: str
    properties: type[BaseModel] = NoProperties
    description: str = ""
    radius: float = 0.5

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _PREFAB_NAME.match(self.name):
            raise ConfigError(f"prefab name {self.name!r}: use 1-64 of a-z 0-9 _ : - "
                              "starting with a letter")
        if not (isinstance(self.properties, type) and issubclass(self.properties, BaseModel)):
            raise ConfigError(f"prefab {self.name}: properties must be a pydantic model class")
        if not (self.radius > 0 and self.radius < float("inf")):
            raise ConfigError(f"prefab {self.name}: radius must be a positive finite number")

    def validate_properties(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The full, validated property dict; raises pydantic's ``ValidationError``."""
        model = self.properties.model_validate(dict(values))
        return model.model_dump(mode="python")


class Prefabs:
    """The whitelist of prefabs a world may spawn, by name."""

    def __init__(self, prefabs: Iterable[Prefab] = ()) -> None:
        self._prefabs: dict[str, Prefab] = {}
        for prefab in prefabs:
            self.register(prefab)

    def register(self, prefab: Prefab) -> Prefab:
        """Add a prefab.

        Raises:
            ConfigError: a prefab of that name exists, or ``prefab`` is not a Prefab.
        """
        if not isinstance(prefab, Prefab):
            raise ConfigError(f"not a Prefab: {prefab!r}")
        if prefab.name in self._prefabs:
            raise ConfigError(f"a prefab named {prefab.name!r} is already registered")
        self._prefabs[prefab.name] = prefab
        return prefab

    def get(self, name: str) -> Prefab | None:
        return self._prefabs.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._prefabs

    def __iter__(self) -> Iterator[Prefab]:
        return iter(sorted(self._prefabs.values(), key=lambda p: p.name))

    def __len__(self) -> int:
        return len(self._prefabs)


class _LightProperties(BaseModel):
    model_config = ConfigDict(extra="forbid")
    intensity: FiniteFloat = 1.0


class _LabelProperties(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: StrictStr = ""


class _PickupProperties(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: StrictStr = "coin"
    value: FiniteFloat = 1.0
    taken: StrictBool = False


def default_prefabs() -> Prefabs:
    """The prefab registry of a scratch world: simple shapes, a light, a label, a pickup."""
    return Prefabs([
        Prefab("cube", description="A unit cube."),
        Prefab("sphere", description="A unit sphere."),
        Prefab("marker", description="An invisible point to parent things to.", radius=0.1),
        Prefab("light", _LightProperties, "A point light; property intensity."),
        Prefab("label", _LabelProperties, "Floating text; property text."),
        Prefab("pickup", _PickupProperties, "Something to collect; kind, value, taken."),
    ])
