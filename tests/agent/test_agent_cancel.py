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
from chat_server import ChatServer, completion, hang, reply_json

from moonbox.agent import Cancelled, CancelToken, ChatClient, Message

MESSAGES = [Message("system", "rules"), Message("user", "task")]
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
