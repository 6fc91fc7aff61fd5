"""Plain data that crosses between mods and the host: copies within the value limits, and
each mod's key/value state."""

from __future__ import annotations

from typing import Any

import msgpack

from .._errors import BindingError
from ._errors import EngineError
from ._limits import ModLimits
from ._mod import Mod


def _depth(value: Any, limit: int, depth: int = 0) -> bool:
    """Whether ``value`` nests at most ``limit`` tables deep."""
    if isinstance(value, (list, dict)):
        if depth >= limit:
            return False
        items = value.values() if isinstance(value, dict) else value
        return all(_depth(v, limit, depth + 1) for v in items)
    return True


class State:
    """The part of :class:`~moonbox.engine.Game` that copies values and keeps each mod's state."""

    # Set by Game.__init__ (see _game.py); the other parts of the game are its mixins.
    limits: ModLimits

    def set_state(self, mod_id: str, state: dict[str, Any]) -> None:
        """Replace a mod's key/value state (hot reload carries it to a new version).

        Checked like the mod's own writes: plain data, at most ``max_state_keys`` keys and
        ``max_state_bytes`` bytes in all; on a refusal nothing changes.

        Raises:
            EngineError: ``unknown_mod``; ``bad_state`` (not plain data, or over a limit).
        """
        mod = self.mod(mod_id)
        old_state, old_bytes = dict(mod.state), dict(mod.state_bytes)
        mod.state.clear()
        mod.state_bytes.clear()
        try:
            for key, value in state.items():
                if not isinstance(key, str):
                    raise BindingError(f"state key {key!r} is not a string")
                self._state_set(mod, key, value)
        except BindingError as exc:
            mod.state.clear()
            mod.state.update(old_state)
            mod.state_bytes.clear()
            mod.state_bytes.update(old_bytes)
            raise EngineError(f"mod {mod_id!r}: state refused: {exc}", code="bad_state") from None

    def _state_get(self, mod: Mod, key: str) -> Any:
        value = mod.state.get(key)
        return self._copy(value, 1 << 62) if isinstance(value, (list, dict)) else value

    def _state_set(self, mod: Mod, key: str, value: Any) -> None:
        if value is None:
            mod.state.pop(key, None)
            mod.state_bytes.pop(key, None)
            return
        limits = self.limits
        value = self._checked_copy(value, "value")
        size = len(msgpack.packb(value, use_bin_type=True)) + len(key)
        if key not in mod.state and len(mod.state) >= limits.max_state_keys:
            raise BindingError(f"a mod's state holds at most {limits.max_state_keys} keys "
                               "[too_many]", reason="too_many")
        total = sum(mod.state_bytes.values()) - mod.state_bytes.get(key, 0) + size
        if total > limits.max_state_bytes:
            raise BindingError(f"a mod's state holds at most {limits.max_state_bytes} bytes "
                               "[too_large]", reason="too_large")
        mod.state[key] = value
        mod.state_bytes[key] = size

    def _copy(self, value: Any, max_bytes: int) -> Any:
        """A deep copy of plain data, within the value limits.

        Raises:
            ValueError: nested deeper than the export depth, or larger than ``max_bytes``.
        """
        if value is None or isinstance(value, (bool, int, float, str)):
            if isinstance(value, str) and len(value) > max_bytes:
                raise ValueError(f"the value is larger than {max_bytes} bytes")
            return value
        if not _depth(value, self.limits.max_export_depth):
            raise ValueError(f"the value nests deeper than {self.limits.max_export_depth} "
                             "levels")
        try:
            packed = msgpack.packb(value, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"the value is not plain data ({exc})") from None
        if len(packed) > max_bytes:
            raise ValueError(f"the value is larger than {max_bytes} bytes packed")
        return msgpack.unpackb(packed, raw=False, strict_map_key=False)

    def _checked_copy(self, value: Any, what: str, max_bytes: int | None = None) -> Any:
        try:
            return self._copy(value, max_bytes or self.limits.max_value_bytes)
        except ValueError as exc:
            raise BindingError(f"{what}: {exc} [too_large]", reason="too_large") from None
