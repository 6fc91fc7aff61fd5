"""The ``coreai_world_*`` bindings: what a mod may ask of the world.

Reads answer from the applied state. Writes never change the world: they queue a command
(:meth:`World.submit`) that the world applies at the tick boundary, and return at once with
the command's id, so a refusal event can be matched to the call that caused it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field
from typing_extensions import TypedDict  # pydantic reads only this one on Python 3.11

from .._errors import BindingError
from ..bindings import Binding
from ..sandbox import HostCall
from ._commands import (
    MAX_ARG_CHARS,
    ChangeArgs,
    DestroyArgs,
    FindArgs,
    GridArgs,
    NameArgs,
    NoArgs,
    RaycastArgs,
    SetColorArgs,
    SpawnArgs,
    SpawnBatchArgs,
)
from ._errors import WorldError
from ._model import Entity
from ._world import _PLACEMENT, World, unit_direction

# The placement fields as a flat table's keys cross (bytes), and the largest int a number
# field takes as a float without pydantic (moonbox.bindings' compiled checks: the same).
_PLACEMENT_KEYS = {name.encode(): name for name in sorted(_PLACEMENT)}
_INT_AS_FLOAT = 2**63

__all__ = ["WORLD_BINDINGS", "EntityTable", "PrefabInfo", "RaycastHit", "entity_table",
           "world_bindings"]

WORLD_BINDINGS = (
    "coreai_world_begin", "coreai_world_change", "coreai_world_commit", "coreai_world_destroy",
    "coreai_world_exists", "coreai_world_find", "coreai_world_get", "coreai_world_grid",
    "coreai_world_list_prefabs", "coreai_world_pos", "coreai_world_raycast",
    "coreai_world_rollback", "coreai_world_set_color", "coreai_world_spawn",
    "coreai_world_spawn_batch",
)
"""The names :func:`world_bindings` makes, sorted."""


def _mod_of(call: HostCall) -> str:
    api = call.mod
    mod_id = getattr(api, "mod_id", None)
    if not isinstance(mod_id, str):
        # A world binding outside Registry.mod() would act with no owner: refused.
        raise BindingError("needs a mod identity: grant it through Registry.mod() [failed]",
                           reason="failed")
    return mod_id


# What the bindings return, as types: the editor stubs show them (moonbox stubs).

class EntityTable(TypedDict):
    """An entity as coreai_world_get returns it."""

    id: Annotated[int, Field(description="stable within the world")]
    prefab: str
    name: str
    x: float
    y: float
    z: float
    rx: Annotated[float, Field(description="rotation in degrees")]
    ry: float
    rz: float
    scale: float
    parent: Annotated[str | None, Field(description="the parent's name, if any")]
    color: Annotated[list[float], Field(description="r, g, b, a in 0..1")]
    properties: Annotated[dict[str, Any], Field(description="the prefab's properties")]
    owner: Annotated[str | None, Field(description="the mod that spawned it (nil: the host)")]


class PrefabInfo(TypedDict):
    """A prefab that may be spawned."""

    name: str
    description: str
    properties: Annotated[dict[str, Any], Field(description="their defaults")]


class RaycastHit(TypedDict):
    """The nearest entity a ray hits."""

    name: str
    distance: Annotated[float, Field(description="along the ray")]
    x: Annotated[float, Field(description="the hit point")]
    y: float
    z: float


Name = Annotated[str, Field(description="the entity's name")]
CommandId = Annotated[int, Field(description="the command's id, as world:refused events "
                                             "carry it")]


def entity_table(e: Entity, world: World) -> EntityTable:
    """An entity as the table a mod sees (``parent`` by name)."""
    return {
        "id": e.id, "prefab": e.prefab, "name": e.name, "x": e.x, "y": e.y, "z": e.z,
        "rx": e.rx, "ry": e.ry, "rz": e.rz, "scale": e.scale,
        "parent": world.name_of(e.parent), "color": list(e.color),
        "properties": dict(e.properties), "owner": e.owner,
    }


def world_bindings(world: World | Callable[[], World]) -> tuple[Binding, ...]:
    """The ``coreai_world_*`` bindings over ``world`` (or a function returning the world to
    use at call time, for hosts that swap worlds).

    Risks: reads are ``read``; every write, ``destroy`` included, is ``write``: a mod may
    only change or destroy entities it owns (checked when the command applies), so destroy
    reaches no further than change does. All are in the group ``world``.
    """
    get_world: Callable[[], World] = world if callable(world) else (lambda: world)  # type: ignore[assignment]

    def submit(call: HostCall, kind: str, args: Any) -> CommandId:
        try:
            return get_world().submit(kind, args, _mod_of(call)).id  # type: ignore[arg-type]
        except WorldError as exc:
            raise BindingError(f"{exc} [{exc.code}]", reason=exc.code) from None

    def spawn(call: HostCall, args: SpawnArgs) -> tuple[Name, CommandId]:
        """Queue a spawn; returns the entity's name (generated if not given) and the command id."""
        try:
            command = get_world().submit("spawn", args, _mod_of(call))
        except WorldError as exc:
            raise BindingError(f"{exc} [{exc.code}]", reason=exc.code) from None
        return (command.args.name, command.id)

    def change(call: HostCall, args: ChangeArgs) -> CommandId:
        """Queue a change of the given fields of an entity you own; returns the command id."""
        return submit(call, "change", args)

    def change_fast(call: HostCall, name: str, fields: dict[str, Any]) -> CommandId | None:
        # change's fast path (Binding.fast_pairs), for a call nothing observes: the name
        # and the table's values come checked as ChangeArgs checks them; a change of
        # placement queues with no model built, anything else declines to change.
        # _mod_of, written out for the identity it finds: one frame less on every write.
        mod_id = getattr(call.mod, "mod_id", None)
        if not isinstance(mod_id, str):
            mod_id = _mod_of(call)  # refuses
        try:
            return get_world().submit_placement(name, fields, mod_id)
        except WorldError as exc:
            raise BindingError(f"{exc} [{exc.code}]", reason=exc.code) from None

    def set_color(call: HostCall, args: SetColorArgs) -> CommandId:
        """Queue a color change (r, g, b, a in 0..1); returns the command id."""
        return submit(call, "set_color", args)

    def destroy(call: HostCall, args: DestroyArgs) -> CommandId:
        """Queue the destruction of an entity you own and its descendants; returns the id."""
        return submit(call, "destroy", args)

    def spawn_batch(call: HostCall, args: SpawnBatchArgs,
                    ) -> tuple[Annotated[list[str], Field(description="their names")], CommandId]:
        """Queue 1-100 spawns applied all or none; returns their names and the command id."""
        try:
            command = get_world().submit("spawn_batch", args, _mod_of(call))
        except WorldError as exc:
            raise BindingError(f"{exc} [{exc.code}]", reason=exc.code) from None
        return ([i.name for i in command.args.items], command.id)

    def grid(call: HostCall, args: GridArgs) -> CommandId:
        """Queue a grid of nx * nz (<= 100) spawns named <name>_<i>_<j>; returns the id."""
        return submit(call, "grid", args)

    def begin(call: HostCall, args: NoArgs) -> bool:
        try:
            get_world().begin(_mod_of(call))
        except WorldError as exc:
            raise BindingError(f"{exc} [{exc.code}]", reason=exc.code) from None
        return True

    def commit(call: HostCall, args: NoArgs) -> Annotated[int, Field(
            description="how many commands it queued")]:
        try:
            return get_world().commit(_mod_of(call))
        except WorldError as exc:
            raise BindingError(f"{exc} [{exc.code}]", reason=exc.code) from None

    def rollback(call: HostCall, args: NoArgs) -> Annotated[int, Field(
            description="how many commands it dropped")]:
        try:
            return get_world().rollback(_mod_of(call))
        except WorldError as exc:
            raise BindingError(f"{exc} [{exc.code}]", reason=exc.code) from None

    # The reads take their arguments unpacked: a handler reads the world every tick, and
    # an unpacking binding with simple fields skips building a model (see Binding.unpack).
    def exists(call: HostCall, name: str) -> bool:
        """Whether an entity of that name exists (applied state)."""
        return get_world().exists(name)

    def pos(call: HostCall, name: str) -> tuple[float, float, float] | tuple[None]:
        """x, y, z of the entity, or nil."""
        w = get_world()
        if type(w) is not World:
            p = w.position(name)
            return (None,) if p is None else p
        # World.position, written out: a handler reads a position every tick.
        eid = w._by_name.get(name)
        if eid is None:
            return (None,)
        e = w._entities[eid]
        return (e.x, e.y, e.z)

    def get(call: HostCall, name: str) -> EntityTable | None:
        """The entity as a table, or nil."""
        w = get_world()
        e = w.get(name)
        return None if e is None else entity_table(e, w)

    def find(call: HostCall, text: str, limit: int) -> list[str]:
        """Names containing text, ignoring case, by id (at most limit, <= 100)."""
        return get_world().find(text, limit)

    def list_prefabs(call: HostCall, args: NoArgs) -> list[PrefabInfo]:
        """The prefabs that may be spawned: name, description, properties with defaults."""
        out = []
        for p in get_world().prefabs:
            defaults = {}
            for name, f in p.properties.model_fields.items():
                if not f.is_required() and isinstance(f.default, (bool, int, float, str)):
                    defaults[name] = f.default
            out.append({"name": p.name, "description": p.description, "properties": defaults})
        return out

    def raycast(call: HostCall, args: RaycastArgs) -> RaycastHit | None:
        """The nearest entity a ray hits: {name, distance, x, y, z} (the hit point), or nil."""
        try:
            hit = get_world().raycast((args.x, args.y, args.z), (args.dx, args.dy, args.dz),
                                      args.max_distance)
        except ValueError as exc:
            raise BindingError(str(exc)) from None
        if hit is None:
            return None
        name, distance = hit
        # The distance is along the unit direction: the hit point is too.
        ux, uy, uz = unit_direction((args.dx, args.dy, args.dz))
        return {"name": name, "distance": distance,
                "x": args.x + ux * distance, "y": args.y + uy * distance,
                "z": args.z + uz * distance}

    # The commonest calls of all, answered by the sandbox's compiled crossing with no
    # dispatcher, lane or binding function between (Binding.direct): each is the lane's
    # checks and the function's work in one frame, answering only what it can vouch for
    # (a name of at most MAX_ARG_CHARS characters, placement fields of numbers) and
    # declining everything else to the full path, which answers and explains it. The
    # registry's version is read again before anything is answered or queued: a change
    # meanwhile (another thread unloading the mod, removing the binding) declines, as the
    # lane's check after its call aborts. Nothing observes these calls: they take no call
    # id, and they are O(1), so the dispatcher's check of the deadline after a call is
    # left to the meter's next poll.
    def read_direct(position: bool) -> Callable[..., Callable[..., Any]]:
        # pos's (position) or exists' direct answer: the same checks, then the read.
        def make(mf: Any, registry: Any, api: Any) -> Callable[..., Any]:
            def direct(*args: Any) -> Any:
                version = registry._version
                if mf._lane_version != version or len(args) != 1:
                    return None
                name = args[0]
                w = get_world()
                if type(name) is not bytes or type(w) is not World:
                    return None
                name = name.decode("utf-8", "replace")
                if len(name) > MAX_ARG_CHARS or registry._version != version:
                    return None  # an invalid name, or the registry changed meanwhile
                eid = w._by_name.get(name)
                if not position:
                    return eid is not None
                if eid is None:
                    return None  # nil: the full path answers it
                e = w._entities[eid]
                return (e.x, e.y, e.z)
            return direct
        return make

    def change_direct(mf: Any, registry: Any, api: Any) -> Callable[..., Any] | None:
        mod_id = getattr(api, "mod_id", None)
        if not isinstance(mod_id, str):
            return None  # the full path refuses it

        def direct(*args: Any) -> Any:
            # (a, n, k1, v1, ...): as change_fast, with what its lane checks, and
            # World.submit_placement written out (its call was the costliest frame of a
            # change at 1,000 mods): the same checks, the same queue.
            version = registry._version
            if mf._lane_version != version or len(args) < 4:
                return None
            name, n = args[0], args[1]
            if type(name) is not bytes or type(n) is not int or len(args) != 2 + 2 * n:
                return None
            fields = None if n == 1 else {}
            for i in range(2, 2 + 2 * n, 2):
                key = _PLACEMENT_KEYS.get(args[i])
                v = args[i + 1]
                t = type(v)
                if key is None:
                    return None
                if t is int and -_INT_AS_FLOAT <= v <= _INT_AS_FLOAT:
                    v = float(v)
                elif t is not float:
                    return None
                if fields is not None:
                    fields[key] = v
            name = name.decode("utf-8", "replace")
            w = get_world()
            if len(name) > MAX_ARG_CHARS or type(w) is not World or (
                    w._transactions and mod_id in w._transactions) or \
                    registry._version != version:
                return None  # a transaction's (submit_placement declines it too), or the
                # registry changed meanwhile (another thread: the full path decides)
            pending, by_mod = w._pending, w._pending_by_mod
            mine = by_mod.get(mod_id, 0)
            if len(pending) >= w.max_pending or mine >= w.max_pending_per_mod:
                return None  # maybe queue_full: the full path checks and explains
            command_id = w._next_command
            w._next_command = command_id + 1
            # As submit_placement queues it (see World._modelled).
            pending.append((command_id, mod_id, name, key, v) if fields is None
                           else (command_id, mod_id, name, fields))
            by_mod[mod_id] = mine + 1
            return command_id
        return direct

    def make(name: str, args: Any, fn: Callable[..., Any], risk: str, cost: int,
             description: str = "", *, unpack: bool = False,
             fast_pairs: Callable[..., Any] | None = None,
             direct: Callable[..., Any] | None = None,
             pairs_direct: Callable[..., Any] | None = None) -> Binding:
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        return Binding(f"coreai_world_{name}", args, fn, risk=risk, group="world",  # type: ignore[arg-type]
                       cost=cost, description=doc, unpack=unpack, fast_pairs=fast_pairs,
                       direct=direct, pairs_direct=pairs_direct)

    return (
        make("spawn", SpawnArgs, spawn, "write", 2),
        make("change", ChangeArgs, change, "write", 2, fast_pairs=change_fast,
             pairs_direct=change_direct),
        make("set_color", SetColorArgs, set_color, "write", 2),
        make("destroy", DestroyArgs, destroy, "write", 2),
        make("spawn_batch", SpawnBatchArgs, spawn_batch, "write", 20),
        make("grid", GridArgs, grid, "write", 20),
        make("begin", NoArgs, begin, "write", 1,
             "Open a transaction: later writes collect until commit (at most 256)."),
        make("commit", NoArgs, commit, "write", 1,
             "Queue the open transaction, applied all or none; returns its size."),
        make("rollback", NoArgs, rollback, "write", 1,
             "Drop the open transaction; returns how many commands it held."),
        make("exists", NameArgs, exists, "read", 1, unpack=True, direct=read_direct(False)),
        make("pos", NameArgs, pos, "read", 1, unpack=True, direct=read_direct(True)),
        make("get", NameArgs, get, "read", 2, unpack=True),
        make("find", FindArgs, find, "read", 10, unpack=True),
        make("list_prefabs", NoArgs, list_prefabs, "read", 5),
        make("raycast", RaycastArgs, raycast, "read", 10),
    )
