"""Scopes: own registrations, hooks and cleanups, and release them all at once."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from .._errors import ConfigError

if TYPE_CHECKING:
    from ._binding import Binding
    from ._hooks import Hook
    from ._query import QuerySource

__all__ = ["Registrar", "Scope", "ScopeClosed"]

log = logging.getLogger("moonbox.bindings")


class ScopeClosed(ConfigError):
    """Something was added to a scope that was already released."""


class Registrar(Protocol):
    """What a scope adds to: a :class:`~moonbox.bindings.Registry`, seen from here.

    Given a scope, each method installs its item through :meth:`Scope.hold`, so that the
    scope releases it; the scope knows the registry by these three methods only.
    """

    def register(self, binding: Binding, *, scope: Scope | None = None) -> Binding: ...

    def add_hook(self, hook: Hook, *, scope: Scope | None = None) -> Hook: ...

    def add_source(self, source: QuerySource, *, scope: Scope | None = None) -> QuerySource: ...


class Scope:
    """Registrations, hooks, query sources and cleanups released together, once.

    Release runs in reverse order of addition; a cleanup that raises is logged and the
    rest still run. Registering into a closed scope raises :class:`ScopeClosed` and
    installs nothing; a cleanup handed to a closed scope runs at once, so that nothing
    handed to a scope is ever left unreleased. Create with :meth:`Registry.scope` (a name
    no open scope of the registry has); a mod's scope is released when the mod unloads
    (:meth:`ModApi.close`).
    """

    def __init__(self, registry: Registrar, name: str,
                 on_close: Callable[[Scope], object] | None = None) -> None:
        self.registry = registry
        self.name = name
        self._cleanups: list[tuple[str, Callable[[], object]]] = []
        self._closed = False
        self._on_close = on_close

    @property
    def closed(self) -> bool:
        return self._closed

    def _check(self, what: str) -> None:
        if self._closed:
            raise ScopeClosed(f"scope {self.name!r} is closed: cannot add {what}")

    def register(self, binding: Binding) -> Binding:
        """Register ``binding`` in the registry until this scope closes."""
        return self.registry.register(binding, scope=self)

    def add_hook(self, hook: Hook) -> Hook:
        """Add ``hook`` to the registry until this scope closes."""
        return self.registry.add_hook(hook, scope=self)

    def add_source(self, source: QuerySource) -> QuerySource:
        """Add a read-only query source until this scope closes."""
        return self.registry.add_source(source, scope=self)

    def hold(self, what: str, install: Callable[[], object], release: Callable[[], object],
             *, name: str | None = None) -> None:
        """Run ``install`` now, and ``release`` when the scope closes.

        ``what`` names the item in the refusal, ``name`` (``what`` if not given) in the
        log of a release that fails. If ``install`` raises, nothing is held.

        Raises:
            ScopeClosed: the scope is closed (``install`` does not run).
        """
        self._check(what)
        install()
        self._cleanups.append((what if name is None else name, release))

    def defer(self, cleanup: Callable[[], object], name: str = "cleanup") -> None:
        """Run ``cleanup`` when the scope closes (in reverse order of addition), or now if
        it is closed already (a failure is logged, as on close)."""
        if self._closed:
            self._release(name, cleanup)
            return
        self._cleanups.append((name, cleanup))

    def _release(self, name: str, cleanup: Callable[[], object]) -> None:
        try:
            cleanup()
        except Exception:
            log.exception("scope %r: releasing %s failed", self.name, name)

    def close(self) -> None:
        """Release everything, in reverse order, once. Idempotent."""
        if self._closed:
            return
        self._closed = True
        cleanups, self._cleanups = self._cleanups, []
        try:
            for name, cleanup in reversed(cleanups):
                self._release(name, cleanup)
        finally:
            if self._on_close is not None:
                self._on_close(self)  # the name is free again once all is released

    def __enter__(self) -> Scope:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._cleanups)} held"
        return f"<Scope {self.name!r} {state}>"
