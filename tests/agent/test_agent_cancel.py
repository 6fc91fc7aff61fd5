"""Cancelling a buffered generation closes its connection, against a real server on loopback.

The server holds each request without answering until the test's teardown, and says when
the client's end of the connection closed: a cancellation must close it long before the
client's own read timeout (600 s here), leave no thread behind, end the task ``cancelled``,
and leave the client ready for the next request.
"""

from __future__ import annotations

import logging
import threading

import pytest
from chat_server import ChatServer, chunk, completion, hang, reply_json, sse

from moonbox.agent import (
    Cancelled,
    CancelToken,
    ChatClient,
    Message,
    Programmer,
    RequestQueue,
    Router,
)
from moonbox.bindings import Registry, default_bindings

MESSAGES = [Message("system", "rules"), Message("user", "task")]
GOOD = "```lua\nreport('done')\nreturn 42\n```"
WAIT_S = 10.0  # generous: every wait here ends in milliseconds when it works
READ_TIMEOUT_S = 600.0  # far beyond WAIT_S: a connection that closes in time was cut


@pytest.fixture
def server():
    with ChatServer() as s:
        yield s


@pytest.fixture
def client(server):
    with ChatClient(server.url, "test-model", idle_timeout_s=READ_TIMEOUT_S,
                    trust_env=False, max_retries=3) as c:
        yield c


@pytest.fixture
def registry():
    r = Registry(default_bindings())
    yield r
    r.close()


def stalled(server):
    """Script a request that hangs; returns (started, closed) events."""
    started, closed = threading.Event(), threading.Event()
    server.push(hang(started, closed))
    return started, closed


def in_thread(fn):
    """Run ``fn`` in a thread; returns the thread and a list that gets its outcome."""
    outcome = []

    def work():
        try:
            outcome.append(fn())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, outcome


def assert_no_generation_thread_left():
    for thread in [t for t in threading.enumerate() if t.name == "moonbox-generation"]:
        thread.join(WAIT_S)
        assert not thread.is_alive(), "a generation thread is still blocked"


# -- the client -----------------------------------------------------------------------------

def test_a_cancel_closes_the_connection_of_a_stalled_request(server, client):
    started, closed = stalled(server)
    token = CancelToken()
    thread, outcome = in_thread(lambda: client.complete(MESSAGES, cancel=token))
    assert started.wait(WAIT_S)
    token.cancel("stopped")
    assert closed.wait(WAIT_S), "the server never saw the connection close"
    thread.join(WAIT_S)
    assert not thread.is_alive()
    (error,) = outcome
    assert isinstance(error, Cancelled) and error.reason == "stopped"
    assert len(server.requests) == 1  # not retried
    assert server.requests[0]["headers"]["Connection"] == "close"  # a connection of its own
    # The client stays usable: the next request opens a new connection.
    server.push(reply_json(completion("next")))
    assert client.complete(MESSAGES, cancel=CancelToken()).content == "next"
    server.push(reply_json(completion("and without a token")))
    assert client.complete(MESSAGES).content == "and without a token"


def test_a_cancel_cuts_short_the_wait_before_a_retry(server, client, caplog):
    server.push(reply_json({"error": {"message": "loading"}}, 503, {"Retry-After": "50"}))
    scheduled = threading.Event()

    class Watch(logging.Handler):
        def emit(self, record):
            if "retry 1 of" in record.getMessage():
                scheduled.set()

    watch = Watch()
    logging.getLogger("moonbox.agent").addHandler(watch)
    caplog.set_level(logging.INFO, "moonbox.agent")
    try:
        token = CancelToken()
        thread, outcome = in_thread(lambda: client.complete(MESSAGES, cancel=token))
        assert scheduled.wait(WAIT_S)
        token.cancel()
        thread.join(WAIT_S)  # not the 50 s the server asked for
        assert not thread.is_alive()
    finally:
        logging.getLogger("moonbox.agent").removeHandler(watch)
    (error,) = outcome
    assert isinstance(error, Cancelled)
    assert len(server.requests) == 1


def test_a_cancel_after_the_reply_arrived_changes_nothing(server, client):
    server.push(reply_json(completion("whole")), reply_json(completion("next")))
    token = CancelToken()
    assert client.complete(MESSAGES, cancel=token).content == "whole"
    token.cancel()  # nothing left to cut: its callback was withdrawn
    assert client.complete(MESSAGES, cancel=CancelToken()).content == "next"


def test_a_token_cancelled_beforehand_sends_nothing(server, client):
    token = CancelToken()
    token.cancel("superseded")
    with pytest.raises(Cancelled) as info:
        client.complete(MESSAGES, cancel=token)
    assert info.value.reason == "superseded" and server.requests == []


# -- the Programmer -------------------------------------------------------------------------

def test_stop_closes_the_connection_of_a_buffered_generation(server, client, registry,
                                                             caplog):
    caplog.set_level(logging.INFO, "moonbox.agent")
    started, closed = stalled(server)
    events = []
    programmer = Programmer(client, registry, on_event=events.append,
                            new_trace_id=lambda: "trace-1")
    thread, outcome = in_thread(lambda: programmer.run("t"))
    assert started.wait(WAIT_S)
    assert programmer.stop() == 1
    assert closed.wait(WAIT_S), "the server never saw the connection close"
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert_no_generation_thread_left()
    (result,) = outcome
    assert result.status == "cancelled" and result.attempts == ()
    assert result.to_dict()["error"] == {"code": "cancelled",
                                         "message": "the request was stopped"}
    (event,) = [e for e in events if e.name == "cancelled"]
    assert event.data == {"key": "agent:main", "reason": "stopped", "stage": "generation",
                          "request": "closed", "model": "test-model", "profile": None}
    (record,) = [r.moonbox for r in caplog.records if hasattr(r, "moonbox")]
    assert record == {"event": "cancelled", "trace_id": "trace-1", "attempt": 1,
                      **event.data}
    # The same client serves the next task.
    server.push(reply_json(completion(GOOD)))
    assert programmer.run("t").solved


def test_a_cancelled_ticket_closes_the_connection_too(server, client, registry):
    started, closed = stalled(server)
    programmer = Programmer(client, registry)
    with RequestQueue() as queue:
        ticket = queue.submit(lambda token: programmer.run("t", cancel=token), scope="npc")
        assert started.wait(WAIT_S)
        assert ticket.cancel("the player left")
        assert closed.wait(WAIT_S), "the server never saw the connection close"
        result = ticket.result(WAIT_S)
        assert result.status == "cancelled" and result.error.reason == "the player left"
        assert ticket.state == "cancelled"
        server.push(reply_json(completion(GOOD)))
        assert queue.submit(lambda token: programmer.run("t", cancel=token)
                            ).result(WAIT_S).solved
    assert_no_generation_thread_left()


def test_a_cancel_once_the_reply_arrived_ends_the_task_before_its_run(server, client,
                                                                      registry):
    server.push(reply_json(completion(GOOD)), reply_json(completion(GOOD)))
    token = CancelToken()
    events = []

    def on_event(event):
        events.append(event)
        if event.name == "generation_finished":
            token.cancel()

    programmer = Programmer(client, registry, on_event=on_event)
    result = programmer.run("t", cancel=token)
    assert result.status == "cancelled" and result.error.code == "cancelled"
    assert [e.data["stage"] for e in events if e.name == "cancelled"] == ["run"]
    assert programmer.run("t").solved  # nothing broke


def test_a_streamed_generation_keeps_its_own_cancellation(server, client, registry):
    # The loop checks the token between pieces, as it always has: the piece after the
    # cancellation stops it, and closing the stream closes its connection.
    server.push(sse([chunk("```lua\n"), chunk("return 1"), chunk("\n```")]))
    token = CancelToken()
    events = []

    def on_event(event):
        events.append(event)
        if event.name == "generation_delta":
            token.cancel()

    result = Programmer(client, registry, stream=True, on_event=on_event).run(
        "t", cancel=token)
    assert result.status == "cancelled"
    (event,) = [e for e in events if e.name == "cancelled"]
    assert (event.data["stage"], event.data["request"]) == ("generation", "closed")
    assert server.requests[0]["headers"]["Connection"] == "keep-alive"  # the stream as it was


def test_a_routed_role_hands_the_token_to_its_profiles_client(server, registry, tmp_path):
    path = tmp_path / "llm.toml"
    path.write_text(f"""
[endpoints.a]
base_url = "{server.url}"
idle_timeout_s = {READ_TIMEOUT_S}

[profiles.small]
endpoint = "a"
model = "small-model"

[roles]
programmer = "small"
""")
    started, closed = stalled(server)
    with Router.load(path) as router:
        programmer = Programmer(router.client("programmer"), registry)
        thread, outcome = in_thread(lambda: programmer.run("t"))
        assert started.wait(WAIT_S)
        assert programmer.stop() == 1
        assert closed.wait(WAIT_S), "the server never saw the connection close"
        thread.join(WAIT_S)
        (result,) = outcome
        assert result.status == "cancelled"
        server.push(reply_json(completion(GOOD)))
        assert programmer.run("t").solved
    assert_no_generation_thread_left()
