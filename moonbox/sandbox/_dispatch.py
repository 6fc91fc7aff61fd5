"""The binding dispatcher: the host's side of every call a mod makes to a host function.

The prelude gives each host function a Lua closure that calls :func:`dispatch` with the
function's index and the arguments exactly as lupa passes them; the dispatcher serves the
call and answers with plain Lua values, or with one line on a failure.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from .._errors import BindingError
from ._lua import lua
from ._marshal import to_python
from ._protocols import RunState, SandboxState
from ._runtime import MAX_MESSAGE_BYTES
from ._script_errors import short_chunk
from ._values import MAX_EXACT_INT, MIN_EXACT_INT, SCALARS, from_pairs, lua_results, lua_text

__all__ = ["FunctionHandle", "HostCall", "HostFunction"]

log = logging.getLogger("moonbox.sandbox")

_NO_VALUES = ()
_TRIP_MESSAGE = "moonbox: budget exceeded"  # what the prelude raises on a trip
_HOST_BUG = "{}: the host failed to handle this call (a host bug, logged)"


class HostCall:
    """What a host function learns about the call it serves.

    Attributes:
        sandbox: the sandbox the call comes from.
        run: the run making the call (``None`` outside a run).
        name: the host function's name.
        mod: the calling mod's context, set by the bindings layer (its ``ModApi``), or
            ``None``.
        call_id: the id of the call the bindings layer serves (unique among the calls of
            the process), set on each of its paths; a host function outside that layer
            reads the previous call's, or 0.
    """

    __slots__ = ("sandbox", "run", "name", "mod", "call_id")

    def __init__(self, sandbox: SandboxState, run: RunState | None, name: str, mod: Any = None) -> None:
        self.sandbox = sandbox
        self.run = run
        self.name = name
        self.mod = mod
        self.call_id = 0

    def report(self, text: str) -> None:
        """Add one line to the run's reports (capped in count and size)."""
        if self.run is not None:
            self.run._add_report(text)

    def time_left_s(self) -> float:
        """Seconds left of the running resume's wall budget (``inf`` outside a resume)."""
        sb = self.sandbox
        if sb is None or sb._running is None:
            return math.inf
        return max(0.0, sb._deadline - sb._clock())

    @property
    def aborted(self) -> str | None:
        """Why the call was aborted while it runs (its binding removed, its mod unloaded),
        as the bindings layer tells it, or ``None``."""
        mod = self.mod
        if mod is None:
            return None
        why = getattr(mod, "call_aborted", None)
        return None if why is None else why(self.name)  # type: ignore[no-any-return]

    @property
    def cancelled(self) -> bool:
        """Whether the host no longer waits for this call's result: the resume's wall budget
        is spent (the mod trips on time as soon as the call returns), its runtime was
        abandoned, or the call was aborted (:attr:`aborted`). A host function that works
        long checks it (or :meth:`time_left_s`) as it goes and returns early; what it
        returns then reaches no one."""
        sb = self.sandbox
        if self.mod is not None and self.aborted is not None:
            return True
        if sb is None or sb.abandoned:
            return True
        if sb._running is None:
            return False
        return sb._clock() > sb._deadline

    def wait_left_s(self, max_total_s: float) -> float:
        """How long host work may still wait in this resume: what is left of the
        ``max_total_s`` it may exclude (see :meth:`excluded_time`) plus the time left."""
        sb = self.sandbox
        if sb is None or sb._running is None:
            return max_total_s
        excluded = sb._excluded_in_resume()
        return max(0.0, max_total_s - excluded) + max(0.0, sb._deadline - sb._clock())

    @contextmanager
    def excluded_time(self, max_total_s: float) -> Iterator[None]:
        """Host work inside this block does not count against the resume's wall budget.

        For waits the mod does not control (a person answering an approval). At most
        ``max_total_s`` seconds per resume are excluded in total; beyond that the wait
        counts, so a mod cannot stall its host through repeated waits.
        """
        sb = self.sandbox
        if sb is None or sb._running is None:
            yield
            return
        sb._excluded_in_resume()
        t0 = sb._clock()
        try:
            yield
        finally:
            spent = min(sb._clock() - t0, max(0.0, max_total_s - sb._excluded_s))
            if spent > 0 and sb._h_extend is not None:
                sb._excluded_s += spent
                sb._deadline += spent
                sb._h_extend(spent)


class HostFunction(Protocol):
    """A Python function a mod may call. The bindings registry builds these.

    ``__call__`` gets the call context and the arguments as plain data, returns a tuple of
    plain values, and raises :class:`BindingError` to fail the call with one line.
    """

    name: str
    cost: int
    # Optional: ``accepts_functions = True`` lets a mod pass its own functions as
    # arguments; they arrive as :class:`FunctionHandle` objects.
    # Optional: ``lane(call, args)``, tried first with the arguments exactly as lupa gives
    # them (Lua strings as bytes, tables as Lua objects): it returns the results as a
    # tuple, or one result that is neither a tuple nor None as it is, or ``None`` to send
    # the call to ``__call__`` with the arguments as plain data.
    # Optional: ``make_direct(sandbox, pairs)``, a function the compiled crossing calls
    # itself, with no dispatcher between, with the arguments after the index (``pairs``:
    # of a call (a, t) whose flat table crossed as its pairs, ``a, n, k1, v1, ...``), or
    # ``None``. It answers one number or boolean, or a tuple of numbers, booleans and
    # nils, and never raises: ``None`` declines, before it changed anything, and the call
    # takes the dispatcher's way, which serves it and explains any failure.

    def __call__(self, call: HostCall, args: tuple[Any, ...]) -> tuple[Any, ...]: ...


class FunctionHandle:
    """An opaque handle to a function of a mod, for the host to run later as a budgeted run.

    A host function receives one when it declares it accepts functions (a binding whose
    argument model has a ``moonbox.bindings.LuaFunction`` field) and the mod passes one of
    its own functions. The host can only run it: ``sandbox.start(handle)`` or
    ``sandbox.run(handle, args=...)``, under the sandbox's budget like any run.

    Attributes:
        sandbox: the sandbox whose runtime holds the function.
        chunk: the chunk that defined it (``@mods/waves/main.lua``).
        line: the line where its definition starts.
    """

    __slots__ = ("sandbox", "chunk", "line", "_key", "_generation", "__weakref__")

    def __init__(self, sandbox: SandboxState, chunk: str, line: int, key: int, generation: int) -> None:
        self.sandbox = sandbox
        self.chunk = chunk
        self.line = line
        # The function stays in the runtime, under this key: a Lua object made inside a
        # run's coroutine must not outlive the call that received it (lupa would free it
        # through the coroutine's state, which may be gone by then).
        self._key: int | None = key
        self._generation = generation

    @property
    def where(self) -> str:
        """``chunk:line`` of the definition, for attribution (``mods/waves/main.lua:12``)."""
        return f"{short_chunk(self.chunk)}:{self.line}"

    @property
    def valid(self) -> bool:
        """False once released, or when its sandbox is closed or its runtime replaced."""
        sb = self.sandbox
        return self._key is not None and not sb._closed and sb._generation == self._generation

    def release(self) -> None:
        """Drop the reference to the function (the runtime may collect it). Idempotent."""
        if self.valid:
            self.sandbox._dropped.append(self._key)
        self._key = None

    def __del__(self) -> None:
        # Only a list append: dropping the key from the runtime waits for the sandbox's
        # next host entry (a collection can run anywhere, even inside a Lua call).
        try:
            self.release()
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"<FunctionHandle {self.where}{'' if self.valid else ' (invalid)'}>"


class _Refused:
    """The host function the dispatcher finds behind every index of an abandoned runtime."""

    name = "host"

    def __call__(self, call: HostCall, args: tuple[Any, ...]) -> tuple[Any, ...]:
        raise BindingError("the runtime was abandoned: no host function answers it [abandoned]",
                           reason="abandoned")


class AbandonedEntries:
    """What a sandbox's entries become when its runtime is abandoned (stuck in one VM
    operation past its deadline, see _watchdog.py): when that operation returns and the
    mod calls the host, nothing of the host runs."""

    _entry = (_Refused(), "host", _Refused(), None)

    def __getitem__(self, index: int) -> tuple[Any, str, Any]:
        return self._entry


def dispatch(sb: SandboxState, index: int, *args: Any) -> Any:
    """Serves the call of host function ``index`` from Lua (bound to its sandbox, the
    one Python object the runtime holds)."""
    # The answer: the results themselves (one value as it is, several or none as a
    # tuple lupa unpacks), or (the prelude's failure marker, message) on a failure.
    flat = index < 0  # a call (a, t) with t flat, as (a, n, k1, v1, ...): see flat_arguments
    if flat:
        index = ~index
    hf, name, lane, pairs_lane = sb._entries[index]
    call = sb._call
    call.run = sb._running
    call.name = name
    try:
        # The hot path of every binding call: kept flat on purpose.
        if flat:
            result = None if pairs_lane is None else pairs_lane(call, args)
        else:
            result = None if lane is None else lane(call, args)
        kind = type(result)
        if kind is float or kind is bool or (
            kind is int and MIN_EXACT_INT <= result <= MAX_EXACT_INT
        ):
            return result  # a lane's one number or boolean: the commonest answer
        if result is None:
            call.mod = None
            if flat:
                args = flat_arguments(sb, args, hf)
            else:
                for value in args:
                    if value is not None and type(value) not in SCALARS:
                        args = plain_arguments(sb, args, hf)
                        break
            result = hf(call, args)
        elif kind is not tuple:
            result = (result,)
        if type(result) is tuple:
            # Numbers exact in Lua, booleans and nils cross as they are: no copy.
            for value in result:
                kind = type(value)
                if kind is float or value is None or kind is bool or (
                        kind is int and MIN_EXACT_INT <= value <= MAX_EXACT_INT):
                    continue
                return lua_results(sb, result)
            return result
        if not result:
            return _NO_VALUES
        if len(result) == 1:  # the common case: one number, boolean or nil
            value = result[0]
            kind = type(value)
            if value is None or kind is float or kind is bool or (
                kind is int and MIN_EXACT_INT <= value <= MAX_EXACT_INT
            ):
                return value
        return lua_results(sb, result)
    except BindingError as exc:
        message = f"{hf.name}: {exc}"
        if exc.denied and call.run is not None and len(call.run._denials) < 64:
            call.run._denials.add(message)
        # Capped: the message is pushed as a Lua string after the call returns.
        return (sb._failed, message.encode("utf-8", "replace")[:MAX_MESSAGE_BYTES])
    except lua.LuaMemoryError:
        return sb._not_enough_memory  # the mod's side turns it into a memory trip
    except lua.LuaError as exc:
        if _TRIP_MESSAGE in str(exc):
            # The meter tripped in the host's own Lua helpers (the count hook of
            # jit=False can fire there): the mod's side re-raises the trip.
            return (sb._failed, _TRIP_MESSAGE.encode())
        log.exception("host function %r failed", hf.name)
        return (sb._failed, _HOST_BUG.format(hf.name).encode())
    except Exception:
        log.exception("host function %r failed", hf.name)
        return (sb._failed, _HOST_BUG.format(hf.name).encode())
    finally:
        if sb._clock() > sb._deadline:
            # One host call can take long for one step, and the meter polls the clock
            # only every K steps: tell it now that the time is up (unless the sandbox was
            # closed meanwhile: an abandoned runtime's call returns after its close).
            expire = sb._h_expire
            if expire is not None:
                expire()


def flat_arguments(sb: SandboxState, args: tuple[Any, ...], hf: HostFunction) -> tuple[Any, Any]:
    """The arguments of a call ``(a, t)`` whose table ``t`` is flat, which the prelude hands
    over as its pairs in the same crossing (``a, n, k1, v1, ...``, as ``host.flat_argument``
    answers): as plain data, exactly as :func:`plain_arguments` makes them."""
    first = args[0]
    kind = type(first)
    if kind is bytes:
        first = first.decode("utf-8", "replace")
    elif first is not None and kind not in SCALARS:
        first = argument(sb, first, 1, hf)
    return (first, from_pairs(args[1:]))


def plain_arguments(sb: SandboxState, args: tuple[Any, ...], hf: HostFunction) -> tuple[Any, ...]:
    """The arguments of a call to ``hf`` as plain data (see :func:`argument`)."""
    plain = []
    for index, value in enumerate(args, 1):
        kind = type(value)
        if kind is bytes:
            plain.append(value.decode("utf-8", "replace"))
        elif value is None or kind in SCALARS:
            plain.append(value)
        else:
            plain.append(argument(sb, value, index, hf))
    return tuple(plain)


def argument(sb: SandboxState, value: Any, index: int, hf: HostFunction) -> Any:
    """Argument ``index``, a Lua object, as plain data or a :class:`FunctionHandle`.

    Raises:
        BindingError: a value that cannot cross to the host.
    """
    # A Lua object (scalars never get here): a table of plain data, a function of the
    # mod for a host function that takes callbacks, or refused.
    kind = lua.lua_type(value)  # lupa's own check: no call into the runtime
    if kind == "function" and getattr(hf, "accepts_functions", False):
        kept = sb._h_keep_function(value)
        if type(kept) is not tuple:
            raise BindingError(
                f"argument {index}: only a function defined by the mod can be passed"
            )
        return FunctionHandle(sb, lua_text(kept[1]), int(kept[2]), int(kept[0]),
                              sb._generation)
    if kind != "table":
        raise BindingError(f"argument {index}: a {kind} cannot cross to the host")
    flat = sb._h_flat_argument(value)
    if flat is not None:  # a small table of scalars: its pairs, in one call
        return from_pairs(flat)
    problem = sb._h_check_argument(value)
    if problem is not None:
        raise BindingError(lua_text(problem).replace("value", f"argument {index}", 1))
    return to_python(value, sb._pairs)
