"""The chat-completions HTTP client: ``POST {base_url}/chat/completions``, buffered or SSE.

One request, then the same checks whichever server answers. What this client absorbs, so
that the loop sees one behaviour (each is a test in tests/agent/test_agent_http.py):

- reasoning in a ``reasoning_content`` field, in a ``reasoning`` field, or inline in
  ``<think>`` blocks, including tags cut between stream chunks and a reply that shows only
  the closing ``</think>`` (the chat template opened the block in the prompt);
- a usage chunk whose ``choices`` list is empty, and chunks whose ``content`` is ``null``;
- stream chunks that carry ``message`` instead of ``delta``;
- ``content`` given as a list of text parts instead of a string;
- a stream that ends without ``data: [DONE]`` (the connection just closes);
- SSE events not separated by blank lines, ``data:`` without the space, comment lines;
- a streaming request answered with one JSON body (the server ignored ``stream``);
- status 200 with an error body (``{"error": ...}``), buffered or as a stream event;
- errors whose body is JSON with ``error.message``, ``error`` as a string, ``detail``,
  ``message``, or not JSON at all;
- ``Retry-After`` in seconds or as an HTTP date, on 429 and on 503 (a server still
  loading its model).

Retries: on 429, 5xx and connection failures, at most ``max_retries`` times, with
exponential backoff (and at least what ``Retry-After`` asks, up to ``max_retry_after_s``),
and never once any output has reached the caller. Timeouts: ``connect_timeout_s`` to
connect; ``idle_timeout_s`` between any two reads (a stalled stream fails after that long,
however long the reply); ``total_timeout_s`` for a whole streamed reply.

Cancellation: ``complete(..., cancel=token)`` cuts the connection of the request under way
when the token is cancelled (from any thread), and cuts short a wait before a retry; it
then raises :class:`Cancelled`. Such a request asks for ``Connection: close``, so it always
runs on a connection of its own, opened for it, which httpcore reports to the request's
``trace`` extension: that is the socket a cancellation shuts down. The server sees the
connection end at once; the client's pool just drops it, and the next request opens
another.

The API key is read from an environment variable when the client is made, sent only in the
``Authorization`` header, and kept out of reprs, errors and logs.
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import httpx

from .._errors import ConfigError
from ._cancel import CancelToken
from ._client import Delta, Message, Reply
from ._errors import Cancelled, ClientError, ClientErrorCode
from ._reasoning import ThinkSplitter, split_reasoning

__all__ = ["ChatClient"]

log = logging.getLogger("moonbox.agent")

_BODY_EXCERPT_CHARS = 300


class _Secret:
    """A string that never shows itself."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<secret>"

    __str__ = __repr__


class ChatClient:
    """A chat-completions client for chat-completions servers.

    Args:
        base_url: up to and including the API prefix, e.g. ``http://127.0.0.1:8080/v1``;
            requests go to ``{base_url}/chat/completions``.
        model: the model name sent with each request.
        api_key_env: the environment variable holding the API key, read now; ``None``
            sends no key (local servers usually need none).
        connect_timeout_s: to open the connection.
        idle_timeout_s: the longest wait for the next byte, before the first one and
            between stream chunks.
        total_timeout_s: the longest a streamed reply may take from start to end.
        max_retries: retries after the first request (429, 5xx, connection failures).
        backoff_s: the first retry's delay; it doubles each retry, up to ``max_backoff_s``,
            with up to 25% jitter taken off.
        max_retry_after_s: a ``Retry-After`` longer than this is not waited for: the error
            is raised at once (its ``retry_after_s`` says how long the backend asked for).
        extra_body: more JSON fields for every request (e.g. ``{"top_p": 0.9}``).
        sleep, clock, rng: injectable for tests (the wait before a retry, ``time.monotonic``,
            a ``random.Random``); by default the wait is one a cancellation cuts short.
        transport: an ``httpx`` transport (tests may pass a mock transport).
        trust_env: let httpx read proxy settings from the environment.

    Raises:
        ConfigError: ``api_key_env`` names a variable that is not set, or a limit is not
            positive.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = None,
        connect_timeout_s: float = 10.0,
        idle_timeout_s: float = 60.0,
        total_timeout_s: float = 600.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        max_retry_after_s: float = 60.0,
        extra_body: dict[str, Any] | None = None,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        transport: httpx.BaseTransport | None = None,
        trust_env: bool = True,
    ) -> None:
        for name, value in (("connect_timeout_s", connect_timeout_s),
                            ("idle_timeout_s", idle_timeout_s),
                            ("total_timeout_s", total_timeout_s)):
            if not value > 0:
                raise ConfigError(f"{name} must be a positive number of seconds")
        if max_retries < 0:
            raise ConfigError("max_retries must be zero or more")
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must start with http:// or https://, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self._key: _Secret | None = None
        if api_key_env is not None:
            value = os.environ.get(api_key_env)
            if not value:
                raise ConfigError(
                    f"the environment variable {api_key_env} holds no API key; set it, or "
                    "leave the key out for a server that needs none"
                )
            self._key = _Secret(value)
        self.total_timeout_s = total_timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_retry_after_s = max_retry_after_s
        self.extra_body = dict(extra_body or {})
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self._url = f"{self.base_url}/chat/completions"
        self._request = f"POST {self._url}"
        self._http = httpx.Client(
            timeout=httpx.Timeout(connect=connect_timeout_s, read=idle_timeout_s,
                                  write=idle_timeout_s, pool=connect_timeout_s),
            transport=transport,
            trust_env=trust_env,
        )

    def __repr__(self) -> str:
        return (f"ChatClient(base_url={self.base_url!r}, model={self.model!r}, "
                f"api_key_env={self.api_key_env!r})")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the protocol -------------------------------------------------------------------

    def complete(
        self, messages: Sequence[Message], *, max_tokens: int | None = None,
        temperature: float | None = None, cancel: CancelToken | None = None,
    ) -> Reply:
        """One buffered reply.

        Args:
            cancel: cancelled while the request is under way (from any thread), it closes
                the request's connection at once and cuts short a wait before a retry.
                Each request then runs on a connection of its own (``Connection: close``).

        Raises:
            ClientError: with one of the codes of :class:`ClientError`.
            Cancelled: ``cancel`` was cancelled before the reply had arrived whole; a
                reply that had is returned.
        """
        body = self._body(messages, False, max_tokens, temperature)
        attempt = 0
        while True:
            attempt += 1
            if cancel is not None and cancel.cancelled:
                raise Cancelled(cancel.reason)
            try:
                reply = self._complete_once(body, cancel)
                return replace(reply, retries=attempt - 1) if attempt > 1 else reply
            except ClientError as exc:
                exc.attempts = attempt
                self._wait_or_raise(exc, attempt, cancel)

    def stream(
        self, messages: Sequence[Message], *, max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Iterator[Delta]:
        """The reply in pieces, as the server sends them.

        A failure before the first piece is retried like :meth:`complete`; after it, the
        error is raised as it is (the caller has already shown part of the reply).

        Raises:
            ClientError: with one of the codes of :class:`ClientError`; ``empty_response``
                at the end of a stream that held no visible text.
        """
        body = self._body(messages, True, max_tokens, temperature)
        attempt = 0
        while True:
            attempt += 1
            started = False
            try:
                for delta in self._stream_once(body):
                    if not started and attempt > 1:
                        delta = replace(delta, retries=attempt - 1)
                    started = True
                    yield delta
                return
            except ClientError as exc:
                exc.attempts = attempt
                if started:
                    raise
                self._wait_or_raise(exc, attempt, None)

    def probe(self) -> tuple[bool, str, str]:
        """Is the backend ready to answer for ``model``? One request, no retries.

        Asks ``GET {base_url}/models`` (with the key): ready when it answers 200 and lists
        the model (or lists none). A server without that route (404, 405) is asked for a
        one-token completion instead. Returns ``(ready, code, detail)``: code ``ok``,
        ``model_not_listed``, or a :class:`ClientError` code (``backend_unavailable``,
        ``auth_failed``, ``timeout``...).
        """
        try:
            response = self._http.get(f"{self.base_url}/models", headers=self._headers())
        except httpx.HTTPError as exc:
            error = self._transport_error(exc)
            return False, error.code, str(error)
        if response.status_code in (404, 405):
            try:
                reply = self._complete_once(self._body([Message("user", "ping")], False, 1,
                                                       None))
            except ClientError as exc:
                if exc.code == "empty_response":  # it answered: one token may be nothing
                    return True, "ok", f"{self.model} answered a one-token request"
                return False, exc.code, str(exc)
            return True, "ok", f"{reply.model or self.model} answered a one-token request"
        if response.status_code != 200:
            error = self._status_error(response.status_code, response.headers,
                                       response.content)
            return False, error.code, str(error)
        try:
            listed = [m.get("id") for m in json.loads(response.content).get("data", [])
                      if isinstance(m, dict)]
        except (ValueError, AttributeError):
            listed = []
        if listed and self.model not in listed:
            shown = ", ".join(str(m) for m in listed[:10])
            return False, "model_not_listed", f"the server lists {shown}, not {self.model}"
        return True, "ok", (f"{self.model} is listed" if listed else
                            "the server answers (it lists no models)")

    # -- one request --------------------------------------------------------------------

    def _body(self, messages: Sequence[Message], stream: bool, max_tokens: int | None,
              temperature: float | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_dict() for m in messages],
            "stream": stream,
        }
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        body.update(self.extra_body)
        return body

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream"}
        if self._key is not None:
            headers["Authorization"] = f"Bearer {self._key.reveal()}"
        return headers

    def _complete_once(self, body: dict[str, Any], cancel: CancelToken | None = None
                       ) -> Reply:
        if cancel is None:
            try:
                response = self._http.post(self._url, json=body, headers=self._headers())
            except httpx.HTTPError as exc:
                raise self._transport_error(exc) from None
        else:
            connection = _Severable()
            withdraw = cancel.on_cancel(connection.sever)
            try:
                response = self._http.post(
                    self._url, json=body, headers={**self._headers(), "Connection": "close"},
                    extensions={"trace": connection.trace})
            except httpx.HTTPError as exc:
                if cancel.cancelled:  # the failure is the cut connection, or moot now
                    log.info("%s: its connection was closed on a cancellation (%s)",
                             self._request, cancel.reason)
                    raise Cancelled(cancel.reason) from None
                raise self._transport_error(exc) from None
            finally:
                withdraw()
        if response.status_code != 200:
            raise self._status_error(response.status_code, response.headers, response.content)
        return self._parse_whole(response.content)

    def _parse_whole(self, raw: bytes) -> Reply:
        try:
            payload = json.loads(raw)
        except ValueError:
            raise self._error("the server's reply is not JSON", "bad_response",
                              excerpt=raw) from None
        if not isinstance(payload, dict):
            raise self._error("the server's reply is not a JSON object", "bad_response",
                              excerpt=raw)
        if payload.get("error") and not payload.get("choices"):
            raise self._body_error(payload["error"], 200)
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._error("the server's reply has no choices", "bad_response",
                              excerpt=raw)
        choice = choices[0]
        message = choice.get("message") or choice.get("delta") or {}
        if not isinstance(message, dict):
            raise self._error("the reply's message is not an object", "bad_response",
                              excerpt=raw)
        visible, inline = split_reasoning(_text(message.get("content")))
        reasoning = _text(message.get("reasoning_content") or message.get("reasoning"))
        if inline:
            reasoning = f"{reasoning}\n{inline}" if reasoning else inline
        finish = choice.get("finish_reason")
        if not visible:
            raise self._empty(finish if isinstance(finish, str) else None)
        usage = payload.get("usage")
        return Reply(visible, reasoning, finish if isinstance(finish, str) else None,
                     payload.get("model") if isinstance(payload.get("model"), str) else None,
                     usage if isinstance(usage, dict) else {})

    def _stream_once(self, body: dict[str, Any]) -> Iterator[Delta]:
        deadline = self._clock() + self.total_timeout_s
        visible = False
        try:
            with self._http.stream("POST", self._url, json=body,
                                   headers=self._headers()) as response:
                if response.status_code != 200:
                    raw = response.read()
                    raise self._status_error(response.status_code, response.headers, raw)
                kind = response.headers.get("content-type", "")
                if "text/event-stream" not in kind and "json" in kind:
                    # A server that ignored ``stream`` and answered with one body.
                    reply = self._parse_whole(response.read())
                    yield Delta(reply.content, reply.reasoning, reply.finish_reason)
                    return
                splitter = ThinkSplitter()
                for data in _sse_data(response.iter_lines()):
                    if self._clock() > deadline:
                        raise self._error(
                            f"the reply took longer than {self.total_timeout_s:g} s",
                            "timeout")
                    if data.strip() == "[DONE]":
                        break
                    for payload in self._payloads(data):
                        for delta in self._deltas(payload, splitter):
                            visible = visible or bool(delta.content.strip())
                            yield delta
                shown, hidden = splitter.flush()
                if shown or hidden:
                    visible = visible or bool(shown.strip())
                    yield Delta(shown, hidden)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        if not visible:
            raise self._empty(None)

    def _payloads(self, data: str) -> list[dict[str, Any]]:
        try:
            payloads = [json.loads(data)]
        except ValueError:
            # Events not separated by blank lines arrive as one event of several lines.
            try:
                payloads = [json.loads(line) for line in data.splitlines() if line.strip()]
            except ValueError:
                raise self._error("a stream event is not JSON", "bad_response",
                                  excerpt=data.encode()) from None
        for payload in payloads:
            if not isinstance(payload, dict):
                raise self._error("a stream event is not a JSON object", "bad_response",
                                  excerpt=data.encode())
        return payloads

    def _deltas(self, payload: dict[str, Any], splitter: ThinkSplitter) -> Iterator[Delta]:
        if payload.get("error") and not payload.get("choices"):
            raise self._body_error(payload["error"], 200)
        choices = payload.get("choices") or []  # a usage chunk has an empty list
        if not isinstance(choices, list):
            raise self._error("a stream event's choices is not a list", "bad_response")
        usage = payload.get("usage")
        if isinstance(usage, dict) and usage:
            yield Delta(usage=usage)
        for choice in choices[:1]:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            if not isinstance(delta, dict):
                continue
            shown, hidden = splitter.feed(_text(delta.get("content")))
            reasoning = _text(delta.get("reasoning_content") or delta.get("reasoning"))
            finish = choice.get("finish_reason")
            finish = finish if isinstance(finish, str) else None
            if shown or hidden or reasoning or finish:
                yield Delta(shown, reasoning + hidden, finish)

    # -- errors and retries -------------------------------------------------------------

    def _wait_or_raise(self, exc: ClientError, attempt: int,
                       cancel: CancelToken | None) -> None:
        if cancel is not None and cancel.cancelled:
            raise Cancelled(cancel.reason) from exc
        if not exc.retryable or attempt > self.max_retries:
            raise exc
        if exc.retry_after_s is not None and exc.retry_after_s > self.max_retry_after_s:
            raise exc
        delay = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
        delay *= 1.0 - 0.25 * self._rng.random()
        if exc.retry_after_s is not None:
            delay = max(delay, exc.retry_after_s)
        log.info("%s failed (%s); retry %d of %d in %.2f s", self._request, exc.code,
                 attempt, self.max_retries, delay)
        if self._sleep is not None:
            self._sleep(delay)
        elif cancel is not None:
            cancel.wait(delay)
        else:
            time.sleep(delay)
        if cancel is not None and cancel.cancelled:
            raise Cancelled(cancel.reason) from exc

    def _error(self, message: str, code: ClientErrorCode, *, status: int | None = None,
               excerpt: bytes | None = None, retry_after_s: float | None = None,
               finish_reason: str | None = None) -> ClientError:
        if excerpt:
            message = f"{message}: {_excerpt(excerpt)}"
        return ClientError(message, code=code, request=self._request, status=status,
                           retry_after_s=retry_after_s, finish_reason=finish_reason)

    def _empty(self, finish: str | None) -> ClientError:
        why = ("; it ran out of tokens (finish_reason length), perhaps all spent reasoning"
               if finish == "length" else "")
        return self._error(f"the reply held no visible text{why}", "empty_response",
                           finish_reason=finish)

    def _transport_error(self, exc: httpx.HTTPError) -> ClientError:
        if isinstance(exc, httpx.ConnectTimeout | httpx.ConnectError):
            return self._error(f"cannot connect: {type(exc).__name__}", "backend_unavailable")
        if isinstance(exc, httpx.TimeoutException):
            return self._error(f"no data from the server within the idle timeout "
                               f"({type(exc).__name__})", "timeout")
        if isinstance(exc, httpx.TransportError):
            return self._error(f"the connection failed: {type(exc).__name__}",
                               "backend_unavailable")
        return self._error(f"the request failed: {type(exc).__name__}", "bad_response")

    def _status_error(self, status: int, headers: httpx.Headers, raw: bytes) -> ClientError:
        retry_after = _retry_after_s(headers.get("retry-after"))
        detail = _error_message(raw)
        if status == 429:
            code: ClientErrorCode = "rate_limited"
        elif status in (401, 403):
            code = "auth_failed"
        elif status == 408:
            code = "timeout"
        elif status >= 500:
            code = "backend_unavailable"
        else:
            code = "bad_request"
        what = {"rate_limited": "rate limited", "auth_failed": "authentication refused",
                "timeout": "the server timed out", "backend_unavailable": "server error",
                "bad_request": "the request was refused"}[code]
        message = f"{what} (HTTP {status})" + (f": {detail}" if detail else "")
        return ClientError(message, code=code, request=self._request, status=status,
                           retry_after_s=retry_after)

    def _body_error(self, error: Any, status: int) -> ClientError:
        """An error object in a 200 body or in a stream event."""
        detail = _describe_error(error)
        marker = ""
        numeric: int | None = None
        if isinstance(error, dict):
            marker = " ".join(str(error.get(k, "")) for k in ("type", "code", "status"))
            for k in ("code", "status"):
                if isinstance(error.get(k), int):
                    numeric = error[k]
        text = f"{marker} {detail}".lower()
        code: ClientErrorCode
        if numeric == 429 or "rate" in text or "too many" in text:
            code = "rate_limited"
        elif numeric in (401, 403) or "auth" in text or "api key" in text:
            code = "auth_failed"
        elif (numeric is not None and numeric >= 500) or any(
                w in text for w in ("overload", "unavailable", "loading", "server_error")):
            code = "backend_unavailable"
        else:
            code = "bad_response"
        return ClientError(f"the server answered with an error: {detail}", code=code,
                           request=self._request, status=status)


class _Severable:
    """The connection of one request, which a cancellation closes from another thread.

    httpcore reports each connection it opens for the request to the request's ``trace``
    extension (``connection.connect_tcp.complete``, then ``connection.start_tls.complete``
    for TLS), with the network stream whose ``socket`` it reads from; ``sever`` shuts that
    socket down, which wakes the read under way in the request's thread with an
    end-of-file and tells the server the connection is over. From
    ``*.response_closed.started`` on, httpcore is done with the connection (and may close
    the socket): the socket is let go then, under the same lock as ``sever``, so a late
    cancellation never touches a socket that is being closed.
    """

    __slots__ = ("_lock", "_socket", "_severed")

    _OPENED = (".connect_tcp.complete", ".connect_unix_socket.complete",
               ".start_tls.complete")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._severed = False

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event.endswith(self._OPENED):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            with self._lock:
                self._socket = sock if isinstance(sock, socket.socket) else None
                if self._severed:  # cancelled while it was connecting
                    _shut(self._socket)
        elif event.endswith(".response_closed.started"):
            with self._lock:
                self._socket = None

    def sever(self) -> None:
        with self._lock:
            self._severed = True
            _shut(self._socket)


def _shut(sock: socket.socket | None) -> None:
    """Shut a socket down both ways, leaving its closing to its owner. A TLS socket is shut
    down as a plain one: ``SSLSocket.shutdown`` would also drop the TLS state that the
    reading thread is still using; the descriptor's shutdown ends that read all the same."""
    if sock is None:
        return
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed, or never connected


def _sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The data of each server-sent event (comments, ``event:``, ``id:`` ignored)."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def _text(value: Any) -> str:
    """Message content as text: a string, ``None``, or a list of text parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in value
                       if not isinstance(p, dict) or isinstance(p.get("text", ""), str))
    return str(value)


def _excerpt(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip().replace("\n", " ")
    return text if len(text) <= _BODY_EXCERPT_CHARS else text[:_BODY_EXCERPT_CHARS] + "..."


def _describe_error(error: Any) -> str:
    if isinstance(error, dict):
        message = error.get("message") or error.get("detail") or error.get("type")
        if message:
            return _excerpt(str(message).encode())
    return _excerpt(str(error).encode())


def _error_message(raw: bytes) -> str:
    """The server's own explanation in an error body, if it gave one."""
    if not raw:
        return ""
    try:
        payload = json.loads(raw)
    except ValueError:
        return _excerpt(raw)
    if isinstance(payload, dict):
        for field in ("error", "detail", "message"):
            if payload.get(field):
                return _describe_error(payload[field])
    return _excerpt(raw)


def _retry_after_s(value: str | None) -> float | None:
    """``Retry-After`` in seconds (a number of seconds, or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
