"""A cancellation token: set once, read anywhere, never unset."""

from __future__ import annotations

import threading

__all__ = ["CancelToken"]


class CancelToken:
    """Tells a running or queued request to stop at its next safe point.

    The Programmer loop checks it before each generation, between stream pieces and
    before each run; a queue checks it before it starts a request. Cancelling is final.
    """

    __slots__ = ("_event", "reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = "cancelled"

    def cancel(self, reason: str = "cancelled") -> None:
        """Ask the request to stop; the first reason given is kept."""
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def __repr__(self) -> str:
        return f"CancelToken({'cancelled: ' + self.reason if self.cancelled else 'live'})"
