"""The engine's bindings: handlers, timers, events, state and exports, as a mod calls them.

Several are raw forms the mod never sees by name: ``mod_runtime.lua`` takes ``on``,
``after``, ``every``, ``cancel``, ``export``, ``import``, ``engine_ready`` and
``engine_call`` out of the mod's environment and offers wrappers that keep the functions
on the Lua side. The rest (``emit``, ``now``, ``state_get``, ``state_set``) are called as
they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from ..bindings import Binding, LuaFunction
from ..sandbox import FunctionHandle, HostCall

if TYPE_CHECKING:
    from ._game import Game

__all__ = ["ENGINE_BINDINGS", "engine_bindings"]

ENGINE_BINDINGS = (
    "after", "cancel", "emit", "engine_call", "engine_ready", "every", "export", "import",
    "now", "on", "state_get", "state_set",
)
"""The names :func:`engine_bindings` makes, sorted."""

Name = Annotated[StrictStr, Field(min_length=1, max_length=64)]
Ticks = Annotated[StrictInt, Field(ge=1, le=1_000_000)]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class OnArgs(_Args):
    event: Name
    fn: LuaFunction


class TimerArgs(_Args):
    ticks: Ticks
    fn: LuaFunction


class CancelArgs(_Args):
    id: StrictInt


class ReadyArgs(_Args):
    fn: LuaFunction


class EmitArgs(_Args):
    event: Name
    data: Any = None


class KeyArgs(_Args):
    key: Annotated[StrictStr, Field(min_length=1, max_length=128)]


class StateSetArgs(_Args):
    key: Annotated[StrictStr, Field(min_length=1, max_length=128)]
    value: Any = None


class ExportArgs(_Args):
    name: Name
    value: LuaFunction | Any = None


class ImportArgs(_Args):
    mod: Name
    name: Name


class CallArgs(_Args):
    mod: Name
    name: Name
    arg: Any = None


class NoArgs(_Args):
    pass


def _where(handle: FunctionHandle) -> str:
    # Keep only where it was defined: the function itself stays on the Lua side (the
    # engine library holds it), and the handle is released while its run is alive.
    where = handle.where
    handle.release()
    return where


def engine_bindings(game: Game) -> tuple[Binding, ...]:
    """The engine bindings of ``game`` (group ``engine``).

    Risks: ``emit``, ``state_set`` and ``export`` are ``write`` (they reach other mods or
    keep data); the rest are ``read``.
    """

    def mod(call: HostCall) -> Any:
        return game._mod_for(call)

    def on(call: HostCall, args: OnArgs) -> int:
        """Call fn(data, event, from) for each event of that name (fn(tick) for "tick"); returns an id."""
        return game._add_callback(mod(call), "on", args.event, 0, _where(args.fn))

    def after(call: HostCall, args: TimerArgs) -> int:
        """Call fn(tick) once, ticks from now; returns an id for cancel."""
        return game._add_callback(mod(call), "after", None, args.ticks, _where(args.fn))

    def every(call: HostCall, args: TimerArgs) -> int:
        """Call fn(tick) every ticks ticks; returns an id for cancel."""
        return game._add_callback(mod(call), "every", None, args.ticks, _where(args.fn))

    def cancel(call: HostCall, args: CancelArgs) -> bool:
        """Stop a handler or timer by id; true if it was registered."""
        return game._cancel(mod(call), args.id)

    def ready(call: HostCall, args: ReadyArgs) -> None:
        """(engine library) Hand the dispatcher to the host."""
        game._ready(mod(call), args.fn)

    def emit(call: HostCall, args: EmitArgs) -> None:
        """Send an event (name, data) to the other mods and the game, from the next tick."""
        game._emit_from(mod(call), args.event, args.data)

    def now(call: HostCall, args: NoArgs) -> int:
        """The game's tick number (mods have no wall clock)."""
        return game.tick_count

    def state_get(call: HostCall, args: KeyArgs) -> Any:
        """A copy of the value stored under key, or nil."""
        return game._state_get(mod(call), args.key)

    def state_set(call: HostCall, args: StateSetArgs) -> None:
        """Store a copy of plain data under key (nil deletes); bounded per mod."""
        game._state_set(mod(call), args.key, args.value)

    def export(call: HostCall, args: ExportArgs) -> None:
        """Offer data (by copy) or a function to other mods under a name."""
        value = args.value
        if isinstance(value, FunctionHandle):
            game._export(mod(call), args.name, "function", _where(value))
        else:
            game._export(mod(call), args.name, "data", value)

    def import_(call: HostCall, args: ImportArgs) -> tuple[Any, ...]:
        """(engine library) Another mod's export: ("data", copy) or ("function", nil)."""
        return game._import(mod(call), args.mod, args.name)

    def engine_call(call: HostCall, args: CallArgs) -> Any:
        """(engine library) Call another mod's exported function with one argument."""
        return game._call_export(mod(call), args.mod, args.name, args.arg, call)

    def make(name: str, model: type[BaseModel], fn: Any, risk: str = "read",
             cost: int = 1) -> Binding:
        doc = (fn.__doc__ or "").strip().split("\n")[0]
        return Binding(name, model, fn, risk=risk, group="engine", cost=cost,  # type: ignore[arg-type]
                       description=doc)

    return (
        make("on", OnArgs, on, cost=2),
        make("after", TimerArgs, after, cost=2),
        make("every", TimerArgs, every, cost=2),
        make("cancel", CancelArgs, cancel),
        make("engine_ready", ReadyArgs, ready),
        make("emit", EmitArgs, emit, "write", 2),
        make("now", NoArgs, now),
        make("state_get", KeyArgs, state_get),
        make("state_set", StateSetArgs, state_set, "write", 2),
        make("export", ExportArgs, export, "write", 2),
        make("import", ImportArgs, import_),
        make("engine_call", CallArgs, engine_call, cost=5),
    )
