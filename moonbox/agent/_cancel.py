"""A cancellation token: set once, read anywhere, never unset."""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["CancelToken"]


class CancelToken:
    """Tells a running or queued request to stop at its next safe point.

    The Programmer loop checks it before each generation, between stream pieces and
    before each run; a queue checks it before it starts a request; a client that takes it
    (``complete(..., cancel=token)``) closes the connection of its request under way.
    Cancelling is final.
    """

    __slots__ = ("_event", "reason", "_callbacks", "_lock")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = "cancelled"
        self._callbacks: list[Callable[[], object]] = []
        self._lock = threading.Lock()

    def cancel(self, reason: str = "cancelled") -> None:
        """Ask the request to stop; the first reason given is kept."""
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_cancel(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` when the token is cancelled (at once if it is); returns a
        function that withdraws it."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)

                def remove() -> None:
                    with self._lock:
                        if callback in self._callbacks:
                            self._callbacks.remove(callback)
                return remove
        callback()
        return lambda: None

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until the token is cancelled, at most ``timeout_s`` seconds; returns
        whether it is (a delay that a cancellation cuts short)."""
        return self._event.wait(timeout_s)

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def __repr__(self) -> str:
        return f"CancelToken({'cancelled: ' + self.reason if self.cancelled else 'live'})"
