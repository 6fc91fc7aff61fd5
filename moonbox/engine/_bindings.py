"""The engine's bindings: handlers, timers, events, state and exports, as a mod calls them.

Several are raw forms the mod never sees by name: ``mod_runtime.lua`` takes ``on``,
``after``, ``every``, ``cancel``, ``export``, ``import``, ``engine_ready`` and
``engine_call`` out of the mod's environment and offers wrappers that keep the functions
on the Lua side. The rest (``emit``, ``now``, ``state_get``, ``state_set``) are called as
they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from ..bindings import Binding, LuaFunction
from ..sandbox import FunctionHandle, HostCall
from ._mod import CallbackKind, Mod

__all__ = ["ENGINE_BINDINGS", "EngineServices", "engine_bindings"]

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
    point: Name | None = None  # the resume point fn was declared as (see resume_point)


class TimerArgs(_Args):
    ticks: Ticks
    fn: LuaFunction
    point: Name | None = None


class AfterArgs(TimerArgs):
    spawn: StrictBool = False  # the engine library's spawn(fn): failures name it so


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
    point: Name | None = None


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


@dataclass(frozen=True, slots=True)
class EngineServices:
    """What the engine bindings ask of a game, one callable each (a :class:`Game` makes
    its own). Each validates against the game's limits and raises :class:`BindingError`
    for the mod to see.

    Attributes:
        mod_for: the mod a call comes from (a mod of this game, or it raises).
        add_callback: register a handler (``on``, for an event) or a timer (``after``,
            ``every``, in ticks) defined at ``where``, declared as resume point ``point``
            (or ``None``); returns its id.
        cancel: drop a handler or timer by id; whether it was registered.
        ready: take the mod's dispatcher, once.
        emit: queue an event from the mod (a copy of its data) for the next tick.
        tick_count: the game's tick number.
        state_get, state_set: read (a copy) and write (plain data, bounded) the mod's state.
        export: offer ``("data", value)`` or ``("function", where)`` under a name (a
            function declared as a resume point, with its name, else ``None``).
        import_: another mod's export: ``("data", copy)`` or ``("function", None)``.
        call_export: call another mod's exported function with one argument, on the
            caller's time.
    """

    mod_for: Callable[[HostCall], Mod]
    add_callback: Callable[[Mod, CallbackKind, str | None, int, str, str | None], int]
    cancel: Callable[[Mod, int], bool]
    ready: Callable[[Mod, FunctionHandle], None]
    emit: Callable[[Mod, str, Any], None]
    tick_count: Callable[[], int]
    state_get: Callable[[Mod, str], Any]
    state_set: Callable[[Mod, str, Any], None]
    export: Callable[[Mod, str, str, Any, str | None], None]
    import_: Callable[[Mod, str, str], tuple[Any, ...]]
    call_export: Callable[[Mod, str, str, Any, HostCall], Any]


def engine_bindings(services: EngineServices) -> tuple[Binding, ...]:
    """The engine bindings over a game's services (group ``engine``).

    Risks: ``emit``, ``state_set`` and ``export`` are ``write`` (they reach other mods or
    keep data); the rest are ``read``.
    """

    def mod(call: HostCall) -> Any:
        return services.mod_for(call)

    def on(call: HostCall, args: OnArgs) -> int:
        """Call fn(data, event, from) for each event of that name (fn(tick) for "tick"); returns an id."""
        return services.add_callback(mod(call), "on", args.event, 0, _where(args.fn),
                                     args.point)

    def after(call: HostCall, args: AfterArgs) -> int:
        """Call fn(tick) once, ticks from now; returns an id for cancel."""
        return services.add_callback(mod(call), "spawn" if args.spawn else "after", None,
                                     args.ticks, _where(args.fn), args.point)

    def every(call: HostCall, args: TimerArgs) -> int:
        """Call fn(tick) every ticks ticks; returns an id for cancel."""
        return services.add_callback(mod(call), "every", None, args.ticks, _where(args.fn),
                                     args.point)

    def cancel(call: HostCall, args: CancelArgs) -> bool:
        """Stop a handler or timer by id; true if it was registered."""
        return services.cancel(mod(call), args.id)

    def ready(call: HostCall, args: ReadyArgs) -> None:
        """(engine library) Hand the dispatcher to the host."""
        services.ready(mod(call), args.fn)

    def emit(call: HostCall, args: EmitArgs) -> None:
        """Send an event (name, data) to the other mods and the game, from the next tick."""
        services.emit(mod(call), args.event, args.data)

    def now(call: HostCall, args: NoArgs) -> int:
        """The game's tick number (mods have no wall clock)."""
        return services.tick_count()

    def state_get(call: HostCall, args: KeyArgs) -> Any:
        """A copy of the value stored under key, or nil."""
        return services.state_get(mod(call), args.key)

    def state_set(call: HostCall, args: StateSetArgs) -> None:
        """Store a copy of plain data under key (nil deletes); bounded per mod."""
        services.state_set(mod(call), args.key, args.value)

    def export(call: HostCall, args: ExportArgs) -> None:
        """Offer data (by copy) or a function to other mods under a name."""
        value = args.value
        if isinstance(value, FunctionHandle):
            services.export(mod(call), args.name, "function", _where(value), args.point)
        else:
            services.export(mod(call), args.name, "data", value, None)

    def import_(call: HostCall, args: ImportArgs) -> tuple[Any, ...]:
        """(engine library) Another mod's export: ("data", copy) or ("function", nil)."""
        return services.import_(mod(call), args.mod, args.name)

    def engine_call(call: HostCall, args: CallArgs) -> Any:
        """(engine library) Call another mod's exported function with one argument."""
        return services.call_export(mod(call), args.mod, args.name, args.arg, call)

    def make(name: str, model: type[BaseModel], fn: Any, risk: str = "read",
             cost: int = 1) -> Binding:
        doc = (fn.__doc__ or "").strip().split("\n")[0]
        return Binding(name, model, fn, risk=risk, group="engine", cost=cost,  # type: ignore[arg-type]
                       description=doc)

    return (
        make("on", OnArgs, on, risk="read", cost=2),
        make("after", AfterArgs, after, risk="read", cost=2),
        make("every", TimerArgs, every, risk="read", cost=2),
        make("cancel", CancelArgs, cancel, risk="read"),
        make("engine_ready", ReadyArgs, ready, risk="read"),
        make("emit", EmitArgs, emit, "write", 2),
        make("now", NoArgs, now, risk="read"),
        make("state_get", KeyArgs, state_get, risk="read"),
        make("state_set", StateSetArgs, state_set, "write", 2),
        make("export", ExportArgs, export, "write", 2),
        make("import", ImportArgs, import_, risk="read"),
        make("engine_call", CallArgs, engine_call, risk="read", cost=5),
    )
