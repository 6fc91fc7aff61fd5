"""A chat-completions server on 127.0.0.1 for the client tests, scripted per request.

Each request takes the next action pushed with :meth:`ChatServer.push`: a JSON reply with
any status, an SSE stream (events, delays, a stall, a missing ``[DONE]``), a hang that
watches for the client to close, or a dropped connection. Every request is recorded (path, headers, JSON body).
"""

from __future__ import annotations

import json
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Action = Callable[[BaseHTTPRequestHandler, "ChatServer"], None]


def reply_json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Action:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()

    def act(h: BaseHTTPRequestHandler, server: ChatServer) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        for name, value in (headers or {}).items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(raw)
    return act


def completion(content: Any, **message: Any) -> dict[str, Any]:
    """A buffered chat completion body."""
    return {"id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content,
                                                 **message}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


def chunk(content: str | None = None, finish: str | None = None, **delta: Any) -> dict[str, Any]:
    """One streamed chunk."""
    d: dict[str, Any] = dict(delta)
    if content is not None:
        d["content"] = content
    return {"id": "c1", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


def sse(events: list[Any], *, done: bool = True, delay_s: float = 0.0,
        stall_after: int | None = None, raw: bool = False) -> Action:
    """Stream ``events`` (dicts become ``data: {json}``; strings are sent as they are)."""

    def act(h: BaseHTTPRequestHandler, server: ChatServer) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.end_headers()
        for i, event in enumerate(events):
            if stall_after is not None and i == stall_after:
                server.release.wait(10)
                return
            if delay_s:
                time.sleep(delay_s)
            if isinstance(event, str):
                text = event if raw else event
            else:
                text = f"data: {json.dumps(event)}\n\n"
            h.wfile.write(text.encode())
            h.wfile.flush()
        if stall_after is not None and stall_after >= len(events):
            server.release.wait(10)
            return
        if done:
            h.wfile.write(b"data: [DONE]\n\n")
            h.wfile.flush()
    return act


def stall() -> Action:
    """Accept the request and never answer (until the server stops)."""

    def act(h: BaseHTTPRequestHandler, server: ChatServer) -> None:
        server.release.wait(10)
    return act


def hang(started: threading.Event, closed: threading.Event) -> Action:
    """Accept the request and never answer: ``started`` is set once the request is read,
    ``closed`` when the client's end of the connection closes. Only the server's teardown
    (``release``) ends the wait otherwise; the short select is how it notices that."""

    def act(h: BaseHTTPRequestHandler, server: ChatServer) -> None:
        started.set()
        while not server.release.is_set():
            readable, _, _ = select.select([h.connection], [], [], 0.05)
            if not readable:
                continue
            try:
                data = h.connection.recv(1)
            except OSError:
                data = b""
            if not data:  # end of file: the client closed (or shut down) its end
                closed.set()
                h.close_connection = True
                return
    return act


def drop() -> Action:
    """Close the connection without a response."""

    def act(h: BaseHTTPRequestHandler, server: ChatServer) -> None:
        h.close_connection = True
        h.connection.close()
    return act


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up on a stalled stream is expected here


class ChatServer:
    """The server: ``url`` ends in ``/v1``; use as a context manager."""

    def __init__(self) -> None:
        self.actions: deque[Action] = deque()
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                try:
                    parsed = json.loads(body)
                except ValueError:
                    parsed = None
                server.requests.append({"path": self.path, "headers": dict(self.headers),
                                        "body": parsed})
                action = server.actions.popleft() if server.actions else reply_json(
                    {"error": {"message": "no scripted response"}}, 500)
                action(self, server)

            def do_GET(self) -> None:  # the readiness probe's GET /models
                server.requests.append({"path": self.path, "headers": dict(self.headers),
                                        "body": None})
                action = server.actions.popleft() if server.actions else reply_json(
                    {"error": {"message": "no scripted response"}}, 404)
                action(self, server)

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,),
                                        daemon=True)

    def push(self, *actions: Action) -> None:
        self.actions.extend(actions)

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)
