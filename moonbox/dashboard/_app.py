"""The web side: a Starlette app over what the game thread published.

It reads :class:`~moonbox.dashboard._recorder.Published` summaries and the log, reads the
versions store (which is safe from any thread), and queues actions for the game thread.
It never holds the game, a mod or a runtime.
"""

from __future__ import annotations

import asyncio
import json
import math
from concurrent.futures import Future
from importlib import resources
from typing import Any, Protocol
from urllib.parse import parse_qs

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .._errors import MoonboxError
from ._access import Access
from ._actions import ActionError, Actions
from ._recorder import Published, Recorder


class Dashboard(Protocol):
    """What the web side uses of a :class:`~moonbox.dashboard.Dashboard` (which builds this
    app, so the app names it through this protocol rather than importing it)."""

    access: Access
    actions: Actions
    recorder: Recorder
    store: Any
    closing: bool

    def published(self) -> Published: ...

__all__ = ["ACTION_TIMEOUT_S", "STREAM_INTERVAL_S", "build_app"]

ACTION_TIMEOUT_S = 10.0  # how long an action waits for the game thread's next tick
STREAM_INTERVAL_S = 0.25  # how often the event stream looks for news
STREAM_BACKLOG = 300  # log entries a new stream starts with
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/static/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
}
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def _plain(value: Any) -> Any:
    """``value`` with non-finite numbers as strings (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":"))


class _Json(JSONResponse):
    def render(self, content: Any) -> bytes:
        return _dumps(content).encode("utf-8")


def _error(status: int, code: str, message: str) -> _Json:
    return _Json({"error": {"code": code, "message": message}}, status_code=status)


class _Guard:
    """The access rule in front of every route (see :class:`~moonbox.dashboard._access.Access`),
    and for actions: JSON bodies only, and an ``Origin`` (if sent) of this dashboard, so a
    page elsewhere cannot post to it from a browser."""

    def __init__(self, app: ASGIApp, dashboard: Dashboard) -> None:
        self.app = app
        self.dashboard = dashboard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", ())}
        path: str = scope.get("path", "")
        access = self.dashboard.access
        problem: tuple[int, str, str] | None = None
        if access.token is None or path.startswith("/api/"):
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            token = query.get("token", [None])[0]
            if not access.allows(headers.get("host"), headers.get("authorization"), token):
                problem = (401, "unauthorized",
                           "this dashboard needs its token (Authorization: Bearer TOKEN, or "
                           "?token=TOKEN)" if access.token else
                           "this dashboard answers requests to a loopback address only")
        if problem is None and scope.get("method") == "POST":
            origin = headers.get("origin")
            if not headers.get("content-type", "").startswith("application/json"):
                problem = (415, "invalid", "actions take a JSON body (application/json)")
            elif origin is not None and origin not in (f"http://{headers.get('host', '')}",
                                                       f"https://{headers.get('host', '')}"):
                problem = (403, "forbidden", "actions are taken from this dashboard's own page")
        if problem is not None:
            await _error(*problem)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _static(name: str, media_type: str) -> Any:
    body = resources.files("moonbox.dashboard").joinpath("static", name).read_bytes()

    async def serve(request: Request) -> Response:
        headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
        if media_type.startswith("text/html"):
            headers["Content-Security-Policy"] = _CSP
            headers["Referrer-Policy"] = "no-referrer"
        return Response(body, media_type=media_type, headers=headers)

    return serve


def build_app(dashboard: Dashboard) -> ASGIApp:
    """The dashboard's ASGI app (routes in docs/dashboard.md)."""

    def published() -> Any:
        return dashboard.published()

    def summary(request: Request) -> Response:
        return _Json(published().summary)

    def part(name: str) -> Any:
        def endpoint(request: Request) -> Response:
            s = published().summary
            if name == "stats":
                return _Json({"tick": s["tick"], "cost": s["cost"], "health": s["health"]})
            return _Json({"tick": s["tick"], name: s[name]})
        return endpoint

    def log(request: Request) -> Response:
        q = request.query_params
        try:
            since = int(q.get("since", "0"))
            limit = min(int(q.get("limit", "500")), 2000)
        except ValueError:
            return _error(400, "invalid", "since and limit are whole numbers")
        entries = dashboard.recorder.log_since(since, mod=q.get("mod") or None,
                                               kind=q.get("kind") or None, limit=limit)
        return _Json({"last_seq": dashboard.recorder.last_seq, "entries": entries})

    def errors(request: Request) -> Response:
        return _Json({"errors": published().errors})

    def error(request: Request) -> Response:
        wanted = request.path_params["id"]
        for group in published().errors:
            if group["id"] == wanted:
                return _Json(group)
        return _error(404, "unknown_error", f"no error group {wanted} (groups are kept "
                                            "for the latest errors only)")

    def world(request: Request) -> Response:
        return _Json(published().world)

    def entity(request: Request) -> Response:
        name = request.path_params["name"]
        for e in published().world.get("entities", ()):
            if e["name"] == name:
                return _Json(e)
        return _error(404, "not_found", f"no entity {name!r} in the latest world view")

    # -- versions: read straight from the store (thread-safe); changes are actions --------

    def store_or_error() -> Any:
        store = dashboard.store
        if store is None:
            raise ActionError("this game has no versions store", code="no_store", status=404)
        return store

    def versions_call(fn: Any) -> Any:
        def endpoint(request: Request) -> Response:
            try:
                return _Json(fn(store_or_error(), request.query_params))
            except ActionError as exc:
                return _error(exc.status, exc.code, exc.message)
            except MoonboxError as exc:
                code = getattr(exc, "code", "invalid")
                status = 404 if code in ("unknown_key", "unknown_revision") else 400
                return _error(status, code, str(exc))
            except ValueError as exc:
                return _error(400, "invalid", str(exc))
        return endpoint

    def _kind(q: Any) -> str:
        kind = q.get("kind", "script")
        if kind not in ("script", "data"):
            raise ValueError("kind is 'script' or 'data'")
        return kind

    def _rev(text: str | None, default: str) -> int | str:
        text = text or default
        if text in ("original", "current"):
            return text
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a revision: a number, original or current") \
                from None

    def keys(store: Any, q: Any) -> Any:
        kind = q.get("kind") or None
        if kind not in (None, "script", "data"):
            raise ValueError("kind is 'script' or 'data'")
        return {"keys": [k.to_dict() for k in store.keys(kind, prefix=q.get("prefix", ""))]}

    def history(store: Any, q: Any) -> Any:
        versions = store.versions(_kind(q))
        key = q.get("key", "")
        limit = int(q.get("limit", "100"))
        return {"info": versions.info(key).to_dict(),
                "revisions": [r.to_dict(content=False)
                              for r in versions.history(key, limit=limit)]}

    def revision(store: Any, q: Any) -> Any:
        return store.versions(_kind(q)).revision(q.get("key", ""),
                                                 _rev(q.get("rev"), "current")).to_dict()

    def diff(store: Any, q: Any) -> Any:
        versions = store.versions(_kind(q))
        a, b = _rev(q.get("a"), "original"), _rev(q.get("b"), "current")
        return {"key": q.get("key", ""), "a": a, "b": b,
                "diff": versions.diff(q.get("key", ""), a, b)}

    # -- actions ---------------------------------------------------------------------------

    async def act(action: str, args: dict[str, Any]) -> Response:
        try:
            future: Future[dict[str, Any]] = dashboard.actions.submit(action, **args)
        except ActionError as exc:
            return _error(exc.status, exc.code, exc.message)
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), ACTION_TIMEOUT_S)
        except TimeoutError:
            future.cancel()
            return _error(503, "timed_out", f"the game did not tick for {ACTION_TIMEOUT_S:g} s; "
                          "actions are done between ticks")
        except ActionError as exc:
            return _error(exc.status, exc.code, exc.message)
        return _Json({"ok": True, **result})

    async def body(request: Request) -> dict[str, Any]:
        try:
            data = await request.json()
        except ValueError:
            data = None
        return data if isinstance(data, dict) else {}

    async def mod_action(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in ("lift", "quarantine", "reload"):
            return _error(404, "invalid", f"no mod action {action!r}: lift, quarantine, reload")
        data = await body(request)
        return await act(action,
                         {"mod": request.path_params["mod"],
                          **({"reason": data["reason"]} if "reason" in data else {})})

    async def version_action(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in ("rollback", "reset"):
            return _error(404, "invalid", f"no versions action {action!r}: rollback, reset")
        data = await body(request)
        args = {"kind": data.get("kind", "script"), "key": data.get("key")}
        if action == "rollback":
            args["rev"] = data.get("rev")
        return await act(action, args)

    # -- the live stream -------------------------------------------------------------------

    async def stream(request: Request) -> Response:
        async def events() -> Any:
            seen = world_seen = errors_seen = -1
            entries = dashboard.recorder.log_since(0, limit=STREAM_BACKLOG)
            seq = 0
            while not dashboard.closing:
                pub = dashboard.published()
                if pub.version != seen:
                    seen = pub.version
                    yield {"event": "summary", "data": _dumps(pub.summary)}
                if entries:
                    seq = entries[-1]["seq"]
                    yield {"event": "log", "data": _dumps(entries)}
                if pub.world_version != world_seen:
                    world_seen = pub.world_version
                    yield {"event": "world", "data": _dumps(pub.world)}
                if pub.errors_version != errors_seen:
                    errors_seen = pub.errors_version
                    yield {"event": "errors", "data": _dumps(pub.errors)}
                await asyncio.sleep(STREAM_INTERVAL_S)
                entries = dashboard.recorder.log_since(seq, limit=STREAM_BACKLOG)

        return EventSourceResponse(events(), ping=10, send_timeout=10,
                                   headers={"Cache-Control": "no-store"})

    routes = [Route(path, _static(name, media)) for path, (name, media) in _STATIC.items()]
    routes += [
        Route("/api/summary", summary),
        Route("/api/mods", part("mods")),
        Route("/api/stats", part("stats")),
        Route("/api/events", part("queues")),
        Route("/api/workers", part("workers")),
        Route("/api/shards", part("shards")),
        Route("/api/log", log),
        Route("/api/errors", errors),
        Route("/api/errors/{id:int}", error),
        Route("/api/world", world),
        Route("/api/world/entities/{name:path}", entity),
        Route("/api/versions", versions_call(keys)),
        Route("/api/versions/history", versions_call(history)),
        Route("/api/versions/revision", versions_call(revision)),
        Route("/api/versions/diff", versions_call(diff)),
        Route("/api/versions/{action:str}", version_action, methods=["POST"]),
        Route("/api/mods/{mod:str}/{action:str}", mod_action, methods=["POST"]),
        Route("/api/stream", stream),
    ]
    app = Starlette(routes=routes)
    return _Guard(app, dashboard)
