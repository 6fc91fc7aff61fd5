"""What the web side may ask for, and how the game thread does it between ticks.

The web side never changes the game: it queues an :class:`ActionRequest` and waits for its
future. :meth:`Actions.apply_pending` (called by ``Dashboard.after_tick``, on the game
thread, between two ticks) does each one and settles its future with a plain result or an
:class:`ActionError`.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import MoonboxError

if TYPE_CHECKING:
    from ..engine import Game
    from ..mods import ModHost
    from ..store import Revision, Store
    from ._recorder import Recorder

__all__ = ["ACTIONS", "ActionError", "ActionRequest", "Actions", "VersionHook"]

ACTIONS = ("lift", "quarantine", "reload", "rollback", "reset")
MAX_PENDING = 32  # requests waiting for the next tick, at most
MAX_PER_TICK = 8  # requests done between two ticks, at most

VersionHook = Callable[[str, str, "Revision"], None]
"""Called on the game thread after a rollback or reset from the dashboard, with the key's
kind, the key and its new current revision: how a host that loads scripts from the store
swaps the new one in. Raising refuses the change (the store is put back)."""


class ActionError(MoonboxError):
    """An action the dashboard was asked for that was not done.

    Attributes:
        code: ``unknown_mod``, ``unknown_key``, ``not_liftable``, ``refused``, ``no_store``,
            ``no_mods``, ``invalid``, ``busy``, ``timed_out``, ``closed`` (and the store's
            codes for versions).
        status: the HTTP status the API answers with.
    """

    def __init__(self, message: str, *, code: str, status: int = 409) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass
class ActionRequest:
    """One queued action: its name, arguments and the future the game thread settles."""

    action: str
    args: dict[str, Any]
    future: Future[dict[str, Any]] = field(default_factory=Future)


_STATUS = {"unknown_mod": 404, "unknown_key": 404, "unknown_revision": 404,
           "invalid_key": 400, "invalid": 400}


class Actions:
    """The queue of actions and the code that does them (on the game thread)."""

    def __init__(self, game: Game, recorder: Recorder, *, mods: ModHost | None,
                 store: Store | None, on_version: VersionHook | None) -> None:
        self.game = game
        self.recorder = recorder
        self.mods = mods
        self.store = store
        self.on_version = on_version
        self._queue: queue.Queue[ActionRequest] = queue.Queue(MAX_PENDING)

    def submit(self, action: str, **args: Any) -> Future[dict[str, Any]]:
        """Queue an action (any thread); its future.

        Raises:
            ActionError: ``invalid`` (no such action), ``busy`` (too many waiting).
        """
        if action not in ACTIONS:
            raise ActionError(f"no action {action!r}; the actions are {', '.join(ACTIONS)}",
                              code="invalid", status=400)
        request = ActionRequest(action, args)
        try:
            self._queue.put_nowait(request)
        except queue.Full:
            raise ActionError("too many actions are waiting for the next tick; try again",
                              code="busy", status=429) from None
        return request.future

    def apply_pending(self) -> list[Callable[[], None]]:
        """Do the queued actions (game thread, between ticks). Returns one callable per
        action done, which settles its future: call them once the game as the actions
        left it is published, so that an answer is never older than what it did."""
        settle: list[Callable[[], None]] = []
        while len(settle) < MAX_PER_TICK:
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                break
            if not request.future.set_running_or_notify_cancel():
                continue  # the web side gave up waiting
            future = request.future
            try:
                result = self._do(request.action, request.args)
            except Exception as exc:  # noqa: BLE001 - reported to the asker, the game goes on
                if isinstance(exc, ActionError):
                    error = exc
                elif isinstance(exc, MoonboxError):
                    error = _as_action_error(exc)
                else:
                    error = ActionError(f"{type(exc).__name__}: {exc}", code="failed",
                                        status=500)
                self._note(request, False, error.message)
                settle.append(lambda f=future, e=error: f.set_exception(e))
            else:
                self._note(request, True, result.get("message", "done"))
                settle.append(lambda f=future, r=result: f.set_result(r))
        return settle

    def cancel_all(self, why: str) -> None:
        """Fail every waiting request (the dashboard is closing)."""
        while True:
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                return
            if request.future.set_running_or_notify_cancel():
                request.future.set_exception(ActionError(why, code="closed", status=503))

    def _note(self, request: ActionRequest, ok: bool, message: str) -> None:
        args = request.args
        subject = args.get("mod") or args.get("key") or ""
        self.recorder.log("action", f"{request.action} {subject}: "
                                    f"{'done' if ok else 'refused'}: {message}",
                          mod=args.get("mod"), ok=ok, action=request.action)

    # -- the actions -----------------------------------------------------------------------

    def _do(self, action: str, args: dict[str, Any]) -> dict[str, Any]:
        if action in ("lift", "quarantine", "reload"):
            mod_id = args.get("mod")
            if not isinstance(mod_id, str):
                raise ActionError("name the mod", code="invalid", status=400)
            if action == "reload":
                return self._reload(mod_id)
            mod = self.game.mod(mod_id)
            if action == "lift":
                if mod.quarantine is None:
                    return {"mod": mod_id, "message": "it was not quarantined"}
                self.game.lift_quarantine(mod_id)
                message = "quarantine lifted; it runs from the next tick"
            else:
                reason = args.get("reason")
                self.game.quarantine(mod_id, reason if isinstance(reason, str) and reason
                                     else "quarantined from the dashboard")
                message = "quarantined"
            if self.mods is not None:
                self.mods.refresh()
            return {"mod": mod_id, "message": message}
        kind, key = args.get("kind"), args.get("key")
        if kind not in ("script", "data") or not isinstance(key, str):
            raise ActionError("give kind ('script' or 'data') and key", code="invalid",
                              status=400)
        if action == "rollback":
            rev = args.get("rev")
            if not (type(rev) is int or rev in ("original", "current")):
                raise ActionError("give rev: a revision number, 'original' or 'current'",
                                  code="invalid", status=400)
            return self._move(kind, key, rev)
        return self._move(kind, key, "original")

    def _reload(self, mod_id: str) -> dict[str, Any]:
        host = self.mods
        if host is None:
            raise ActionError("this game has no mods folder to reload from", code="no_mods")
        state = host.mods.get(mod_id)
        if state is None:
            raise ActionError(f"no mod {mod_id!r} is known to the mods folder",
                              code="unknown_mod", status=404)
        package = state.package or state.pending  # a mod that never loaded: its refused try
        folder = package.root.name if package is not None else mod_id
        result = host.reload_folder(folder)
        if not result.ok:
            raise ActionError(result.error or "refused", code="refused")
        what = "unchanged" if result.unchanged else f"live {result.version_hash[:12]}"
        return {"mod": mod_id, "message": what, "version_hash": result.version_hash}

    def _move(self, kind: str, key: str, rev: int | str) -> dict[str, Any]:
        """Roll ``key`` to ``rev`` in the store, then bring the game along (a mod file: the
        mod host swaps in the mod as the store has it now); if the game refuses the new
        version, the store is put back."""
        store = self.store
        if store is None:
            raise ActionError("this game has no versions store", code="no_store")
        versions = store.versions(kind)  # type: ignore[arg-type]
        before = versions.info(key).current
        revision = versions.rollback(key, rev)  # type: ignore[arg-type]
        message = f"{key} is at revision {revision.rev}"
        try:
            applied = self._bring_along(kind, key, revision)
        except BaseException:
            versions.rollback(key, before)
            raise
        return {"kind": kind, "key": key, "rev": revision.rev, "previous": before,
                "message": f"{message}; {applied}"}

    def _bring_along(self, kind: str, key: str, revision: Revision) -> str:
        host = self.mods
        if host is not None and kind == "script" and key.startswith("mods/"):
            mod_id = key.split("/")[1]
            if mod_id in host.mods:
                result = host.apply_recorded(mod_id)
                if not result.ok:
                    raise ActionError(f"the game refused that version, so the store was put "
                                      f"back: {result.error}", code="refused")
                return ("the running mod is unchanged" if result.unchanged else
                        f"mod {mod_id!r} runs it now (live {result.version_hash[:12]})")
        if self.on_version is not None:
            try:
                self.on_version(kind, key, revision)
            except ActionError:
                raise
            except Exception as exc:  # noqa: BLE001 - the host's refusal, put back
                raise ActionError(f"the host refused that version, so the store was put "
                                  f"back: {exc}", code="refused") from None
            return "the host was told"
        return "nothing running reads this key from the store"


def _as_action_error(exc: MoonboxError) -> ActionError:
    code = getattr(exc, "code", None)
    code = code if isinstance(code, str) else "refused"
    return ActionError(str(exc), code=code, status=_STATUS.get(code, 409))
