"""A request queue for agent work: priority, a concurrency cap, latest-wins scopes.

``submit(fn, priority=, scope=, owner=, cancel=)`` queues ``fn(token)``; higher priority
starts first, equal priorities in submission order; at most ``max_concurrent`` run at once,
each in a worker thread. A new request with the same non-empty ``scope`` *and the same
owner* (a session or a user) cancels the older ones of that scope (queued ones never start;
running ones see their token cancelled, which the Programmer loop checks at every step):
two users asking the same role never cancel each other. :meth:`Ticket.cancel` cancels one
request, and a caller's own token cancelled before the request starts means it never
starts. A request that was running when cancelled ends ``cancelled``, not ``done``.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

from .._errors import ConfigError
from ._cancel import CancelToken
from ._errors import AgentError, Cancelled

__all__ = ["RequestQueue", "Ticket", "TicketState"]

T = TypeVar("T")
TicketState = Literal["queued", "running", "done", "failed", "cancelled"]


class Ticket(Generic[T]):
    """One queued request: its state, its token, and later its result."""

    def __init__(self, fn: Callable[[CancelToken], T], priority: int, scope: str, seq: int,
                 token: CancelToken, owner: str = "") -> None:
        self.fn = fn
        self.priority = priority
        self.scope = scope
        self.owner = owner
        self.seq = seq
        self.token = token
        self.state: TicketState = "queued"
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        scope = f", scope={self.scope!r}" if self.scope else ""
        owner = f", owner={self.owner!r}" if self.owner else ""
        return f"Ticket(#{self.seq}, priority={self.priority}{scope}{owner}, {self.state})"

    def cancel(self, reason: str = "cancelled") -> bool:
        """Cancel: a queued request never starts; a running one sees its token cancelled.

        Returns ``False`` when the request had already finished.
        """
        with self._lock:
            if self.state in ("done", "failed", "cancelled"):
                return False
            self.token.cancel(reason)
            if self.state == "queued":
                self._finish("cancelled", error=Cancelled(self.token.reason))
            return True

    def _start(self) -> bool:
        with self._lock:
            if self.state != "queued":
                return False
            if self.token.cancelled:  # the caller's token, cancelled before the start
                self._finish("cancelled", error=Cancelled(self.token.reason))
                return False
            self.state = "running"
            return True

    def _finish(self, state: TicketState, result: Any = None,
                error: BaseException | None = None) -> None:
        self.state = state
        self._result = result
        self._error = error
        self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    @property
    def cancelled(self) -> bool:
        return self.state == "cancelled"

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until finished; ``False`` if ``timeout`` seconds passed first."""
        return self._done.wait(timeout)

    def result(self, timeout: float | None = None) -> T:
        """The request's return value.

        A request cancelled while it ran returns what it returned (a
        ``ProgrammerResult`` with status ``cancelled``) or raises what it raised.

        Raises:
            Cancelled: the request was cancelled before it started.
            TimeoutError: not finished within ``timeout`` seconds.
            Exception: whatever the request raised.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self!r} did not finish within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[no-any-return]


class RequestQueue:
    """Runs submitted requests by priority, at most ``max_concurrent`` at once.

    Args:
        max_concurrent: worker threads, started on first use.
        name: prefix of the worker threads' names.
    """

    def __init__(self, *, max_concurrent: int = 1, name: str = "moonbox-agent") -> None:
        if max_concurrent < 1:
            raise ConfigError("max_concurrent must be at least 1")
        self.max_concurrent = max_concurrent
        self.name = name
        self._heap: list[tuple[int, int, Ticket[Any]]] = []
        self._live: list[Ticket[Any]] = []  # queued or running, for scope cancellation
        self._seq = itertools.count(1)
        self._cond = threading.Condition()
        self._workers: list[threading.Thread] = []
        self._closed = False

    def submit(self, fn: Callable[[CancelToken], T], *, priority: int = 0, scope: str = "",
               owner: str = "", cancel: CancelToken | None = None) -> Ticket[T]:
        """Queue ``fn(token)``; returns its :class:`Ticket`.

        Args:
            fn: the request; it gets the ticket's token and should stop when it is cancelled.
            priority: higher starts first.
            scope: a non-empty scope cancels the live requests of the same scope and owner
                (latest wins).
            owner: whose request it is (a session, a user): scopes are partitioned by it.
            cancel: the caller's token; cancelled before the start, the request never runs.

        Raises:
            AgentError: the queue is closed (code ``closed``).
        """
        with self._cond:
            if self._closed:
                raise AgentError("the request queue is closed", code="closed")
            ticket: Ticket[T] = Ticket(fn, priority, scope, next(self._seq),
                                       cancel or CancelToken(), owner)
            if scope:
                for older in [t for t in self._live
                              if t.scope == scope and t.owner == owner]:
                    older.cancel("superseded")
            self._live.append(ticket)
            heapq.heappush(self._heap, (-priority, ticket.seq, ticket))
            if len(self._workers) < self.max_concurrent:
                worker = threading.Thread(target=self._work, daemon=True,
                                          name=f"{self.name}-{len(self._workers) + 1}")
                self._workers.append(worker)
                worker.start()
            self._cond.notify()
        return ticket

    def cancel_scope(self, scope: str, owner: str | None = "") -> int:
        """Cancel every live request of ``scope`` of ``owner`` (``None``: of every owner);
        returns how many."""
        with self._cond:
            tickets = [t for t in self._live if t.scope == scope
                       and (owner is None or t.owner == owner)]
        return sum(t.cancel() for t in tickets)

    def cancel_owner(self, owner: str, reason: str = "cancelled") -> int:
        """Cancel every live request of ``owner`` (a session that ended); returns how
        many."""
        with self._cond:
            tickets = [t for t in self._live if t.owner == owner]
        return sum(t.cancel(reason) for t in tickets)

    def tickets(self, *, owner: str | None = None) -> tuple[Ticket[Any], ...]:
        """The live requests (queued or running), of ``owner`` if given, in submission
        order."""
        with self._cond:
            return tuple(sorted((t for t in self._live if not t.done()
                                 and (owner is None or t.owner == owner)),
                                key=lambda t: t.seq))

    @property
    def pending(self) -> int:
        """Requests queued and not yet started."""
        with self._cond:
            return sum(1 for t in self._live if t.state == "queued")

    def close(self, *, cancel_pending: bool = True, timeout_s: float | None = None) -> None:
        """Stop taking requests; cancel the queued ones (unless told not to); wait for
        the workers, at most ``timeout_s`` each."""
        with self._cond:
            self._closed = True
            live = list(self._live)
            self._cond.notify_all()
        if cancel_pending:
            for ticket in live:
                if ticket.state == "queued":
                    ticket.cancel()
        for worker in self._workers:
            worker.join(timeout_s)

    def __enter__(self) -> RequestQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._heap and not self._closed:
                    self._cond.wait()
                if not self._heap:
                    return
                _, _, ticket = heapq.heappop(self._heap)
                started = ticket._start()
                if not started:
                    self._forget(ticket)
                    continue
            try:
                result = ticket.fn(ticket.token)
            except Cancelled as exc:
                with ticket._lock:
                    ticket._finish("cancelled", error=exc)
            except BaseException as exc:
                with ticket._lock:
                    ticket._finish("failed", error=exc)
            else:
                with ticket._lock:
                    ticket._finish(_ended(result, ticket.token), result=result)
            with self._cond:
                self._forget(ticket)

    def _forget(self, ticket: Ticket[Any]) -> None:
        if ticket in self._live:
            self._live.remove(ticket)


def _ended(result: Any, token: CancelToken) -> TicketState:
    """How a request that returned ended: as its result says when it says (a
    ``ProgrammerResult`` whose status is ``cancelled``, or one that was solved despite a
    late cancellation), else ``cancelled`` when its token was cancelled, else ``done``."""
    status = getattr(result, "status", None)
    if isinstance(status, str):
        return "cancelled" if status == "cancelled" else "done"
    return "cancelled" if token.cancelled else "done"
