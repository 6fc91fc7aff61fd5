"""The chat-completions client against a real chat-completions server on loopback."""

from __future__ import annotations

import logging
import socket
import time

import pytest
from chat_server import ChatServer, chunk, completion, drop, reply_json, sse, stall

from moonbox import ConfigError
from moonbox.agent import ChatClient, ClientError, Message, collect

MESSAGES = [Message("system", "rules"), Message("user", "task")]
KEY = "sk-test-0123456789abcdef"


@pytest.fixture
def server():
    with ChatServer() as s:
        yield s


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def make_client(server, sleeps, monkeypatch):
    monkeypatch.setenv("MOONBOX_TEST_KEY", KEY)
    made = []

    def make(**options):
        options.setdefault("api_key_env", "MOONBOX_TEST_KEY")
        options.setdefault("sleep", sleeps.append)
        options.setdefault("idle_timeout_s", 2.0)
        options.setdefault("trust_env", False)
        client = ChatClient(options.pop("base_url", server.url), "test-model", **options)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


# -- buffered -------------------------------------------------------------------------------

def test_buffered_reply_and_request_shape(server, make_client):
    server.push(reply_json(completion("```lua\nreturn 1\n```")))
    reply = make_client().complete(MESSAGES, max_tokens=50, temperature=0.2)
    assert reply.content == "```lua\nreturn 1\n```"
    assert reply.reasoning == "" and reply.finish_reason == "stop" and reply.model == "m"
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    assert request["body"] == {
        "model": "test-model", "stream": False, "max_tokens": 50, "temperature": 0.2,
        "messages": [{"role": "system", "content": "rules"}, {"role": "user", "content": "task"}],
    }


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_buffered_reasoning_fields_are_kept_apart(server, make_client, field):
    server.push(reply_json(completion("answer", **{field: "thinking hard"})))
    reply = make_client().complete(MESSAGES)
    assert (reply.content, reply.reasoning) == ("answer", "thinking hard")


def test_buffered_inline_think_blocks_and_orphan_close(server, make_client):
    server.push(reply_json(completion("<think>plan ```lua\nreturn 0\n```</think>\nanswer")),
                reply_json(completion("opened in the prompt</think>answer")),
                reply_json(completion([{"type": "text", "text": "parts "},
                                       {"type": "text", "text": "joined"}])))
    client = make_client()
    first = client.complete(MESSAGES)
    assert first.content == "answer" and "return 0" in first.reasoning
    second = client.complete(MESSAGES)
    assert (second.content, second.reasoning) == ("answer", "opened in the prompt")
    assert client.complete(MESSAGES).content == "parts joined"


def test_no_key_sends_no_authorization(server, make_client):
    server.push(reply_json(completion("hi")))
    make_client(api_key_env=None).complete(MESSAGES)
    assert "Authorization" not in server.requests[0]["headers"]


def test_a_missing_key_variable_is_a_config_error(monkeypatch):
    monkeypatch.delenv("MOONBOX_NO_SUCH_KEY", raising=False)
    with pytest.raises(ConfigError, match="MOONBOX_NO_SUCH_KEY"):
        ChatClient("http://127.0.0.1:1/v1", "m", api_key_env="MOONBOX_NO_SUCH_KEY")


# -- streaming ------------------------------------------------------------------------------

def test_stream_pieces_and_reasoning_fields(server, make_client):
    server.push(sse([
        chunk(role="assistant"),
        chunk(reasoning_content="step one. "),
        chunk(reasoning="step two."),
        chunk("```lua\n"), chunk(None), chunk("return 2\n```"), chunk(finish="stop"),
        {"id": "c1", "choices": [], "usage": {"completion_tokens": 9}},  # a usage chunk
    ]))
    deltas = list(make_client().stream(MESSAGES))
    reply = collect(deltas)
    assert reply.content == "```lua\nreturn 2\n```"
    assert reply.reasoning == "step one. step two."
    assert reply.finish_reason == "stop"
    assert server.requests[0]["body"]["stream"] is True


def test_stream_think_tags_cut_between_chunks(server, make_client):
    pieces = ["<th", "ink>sec", "ret</thi", "nk>```lua\nreturn ", "3\n```<", "think>more</think>"]
    server.push(sse([chunk(p) for p in pieces]))
    deltas = list(make_client().stream(MESSAGES))
    assert "".join(d.content for d in deltas) == "```lua\nreturn 3\n```"
    assert "".join(d.reasoning for d in deltas) == "secretmore"


def test_stream_quirks_without_done_blank_lines_or_space(server, make_client):
    import json
    raw = [": keep-alive comment\n",
           "event: message\n",
           f"data:{json.dumps(chunk('one '))}\n",        # no space after "data:"
           f"data: {json.dumps(chunk('two '))}\n",       # no blank line between events
           "\n",
           "data: " + json.dumps({"choices": [{"message": {"content": "three"}}]}) + "\n\n"]
    server.push(sse(raw, done=False, raw=True))
    reply = collect(make_client().stream(MESSAGES))
    assert reply.content == "one two three"


def test_stream_answered_with_one_json_body(server, make_client):
    server.push(reply_json(completion("whole", reasoning_content="r")))
    reply = collect(make_client().stream(MESSAGES))
    assert (reply.content, reply.reasoning) == ("whole", "r")


def test_slow_stream_within_idle_timeout_succeeds(server, make_client):
    server.push(sse([chunk(c) for c in "slowly"], delay_s=0.03))
    started = time.monotonic()
    reply = collect(make_client(idle_timeout_s=1.0).stream(MESSAGES))
    assert reply.content == "slowly"
    assert time.monotonic() - started < 5


def test_stalled_stream_before_output_times_out_without_retry(server, make_client, sleeps):
    server.push(stall())
    with pytest.raises(ClientError) as info:
        list(make_client(idle_timeout_s=0.2).stream(MESSAGES))
    assert info.value.code == "timeout"
    assert len(server.requests) == 1 and sleeps == []


def test_stalled_stream_after_output_times_out(server, make_client):
    server.push(sse([chunk("partial "), chunk("reply")], stall_after=2))
    seen = []
    with pytest.raises(ClientError) as info:
        for delta in make_client(idle_timeout_s=0.2).stream(MESSAGES):
            seen.append(delta.content)
    assert info.value.code == "timeout"
    assert "".join(seen) == "partial reply"
    assert len(server.requests) == 1


def test_total_timeout_on_an_endless_trickle(server, make_client):
    now = [0.0]

    def clock():
        now[0] += 1.0
        return now[0]

    server.push(sse([chunk("x")] * 20))
    with pytest.raises(ClientError) as info:
        list(make_client(total_timeout_s=5.0, clock=clock).stream(MESSAGES))
    assert info.value.code == "timeout"


def test_error_event_after_output_is_not_retried(server, make_client, sleeps):
    server.push(sse([chunk("half"), {"error": {"message": "server overloaded"}}]))
    with pytest.raises(ClientError) as info:
        list(make_client().stream(MESSAGES))
    assert info.value.code == "backend_unavailable"
    assert len(server.requests) == 1 and sleeps == []


def test_error_event_before_output_is_retried(server, make_client, sleeps):
    server.push(sse([{"error": {"message": "model is loading"}}]),
                sse([chunk("ok")]))
    reply = collect(make_client().stream(MESSAGES))
    assert reply.content == "ok" and len(server.requests) == 2 and len(sleeps) == 1


def test_stream_with_only_reasoning_is_empty(server, make_client):
    server.push(sse([chunk(reasoning_content="all thought"), chunk(finish="length")]))
    with pytest.raises(ClientError) as info:
        list(make_client().stream(MESSAGES))
    assert info.value.code == "empty_response"


def test_malformed_stream_event(server, make_client):
    server.push(sse(["data: {not json\n\n"], raw=True))
    with pytest.raises(ClientError) as info:
        list(make_client().stream(MESSAGES))
    assert info.value.code == "bad_response"


# -- errors and retries ---------------------------------------------------------------------

@pytest.mark.parametrize(("status", "code"), [
    (401, "auth_failed"), (403, "auth_failed"), (400, "bad_request"), (404, "bad_request"),
    (408, "timeout"),
])
def test_status_codes_that_are_not_retried(server, make_client, sleeps, status, code):
    server.push(reply_json({"error": {"message": "nope"}}, status))
    with pytest.raises(ClientError) as info:
        make_client().complete(MESSAGES)
    assert info.value.code == code and info.value.status == status
    assert "nope" in str(info.value)
    assert len(server.requests) == 1 and sleeps == []


def test_429_honours_retry_after_then_succeeds(server, make_client, sleeps):
    server.push(reply_json({"error": "slow down"}, 429, {"Retry-After": "2"}),
                reply_json(completion("done")))
    assert make_client().complete(MESSAGES).content == "done"
    assert sleeps == [2.0]


def test_retry_after_as_an_http_date(server, make_client, sleeps):
    import email.utils
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    server.push(reply_json({}, 503, {"Retry-After": when}), reply_json(completion("up")))
    assert make_client().complete(MESSAGES).content == "up"
    assert 25 <= sleeps[0] <= 31


def test_5xx_retries_are_bounded_with_growing_backoff(server, make_client, sleeps):
    server.push(*[reply_json({"detail": "down"}, 503)] * 5)
    with pytest.raises(ClientError) as info:
        make_client(max_retries=3, backoff_s=1.0, max_backoff_s=100).complete(MESSAGES)
    assert info.value.code == "backend_unavailable" and info.value.attempts == 4
    assert len(server.requests) == 4
    assert len(sleeps) == 3
    for n, delay in enumerate(sleeps):
        assert 0.75 * 2**n <= delay <= 2**n


def test_a_retry_after_beyond_the_cap_is_not_waited_for(server, make_client, sleeps):
    server.push(reply_json({}, 429, {"Retry-After": "3600"}))
    with pytest.raises(ClientError) as info:
        make_client(max_retry_after_s=60).complete(MESSAGES)
    assert info.value.code == "rate_limited" and info.value.retry_after_s == 3600
    assert sleeps == []


def test_429_exhausts_to_rate_limited(server, make_client, sleeps):
    server.push(*[reply_json({}, 429)] * 3)
    with pytest.raises(ClientError) as info:
        make_client(max_retries=2).complete(MESSAGES)
    assert info.value.code == "rate_limited" and len(sleeps) == 2


@pytest.mark.parametrize(("error", "code"), [
    ({"message": "Rate limit reached", "type": "rate_limit_error"}, "rate_limited"),
    ({"message": "Invalid API key", "code": 401}, "auth_failed"),
    ({"message": "weird", "code": "x"}, "bad_response"),
    ("plain string error", "bad_response"),
])
def test_200_with_an_error_body(server, make_client, error, code):
    server.push(*[reply_json({"error": error})] * 4)
    with pytest.raises(ClientError) as info:
        make_client(max_retries=0).complete(MESSAGES)
    assert info.value.code == code


@pytest.mark.parametrize("body", [b"<html>proxy error</html>", b"[1, 2]",
                                  b'{"choices": []}', b'{"choices": [{"message": 3}]}'])
def test_malformed_bodies_are_bad_responses(server, make_client, body):
    server.push(reply_json(body))
    with pytest.raises(ClientError) as info:
        make_client().complete(MESSAGES)
    assert info.value.code == "bad_response"


def test_empty_content_says_it_ran_out_of_tokens(server, make_client):
    body = completion(None, reasoning_content="long thoughts")
    body["choices"][0]["finish_reason"] = "length"
    server.push(reply_json(body))
    with pytest.raises(ClientError) as info:
        make_client().complete(MESSAGES)
    assert info.value.code == "empty_response" and info.value.finish_reason == "length"
    assert "ran out of tokens" in str(info.value)


def test_dropped_connection_is_retried(server, make_client, sleeps):
    server.push(drop(), reply_json(completion("second time")))
    assert make_client().complete(MESSAGES).content == "second time"
    assert len(sleeps) == 1


def test_connection_refused_is_backend_unavailable(make_client, sleeps):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = make_client(base_url=f"http://127.0.0.1:{port}/v1", max_retries=2)
    with pytest.raises(ClientError) as info:
        client.complete(MESSAGES)
    assert info.value.code == "backend_unavailable" and info.value.attempts == 3
    assert len(sleeps) == 2


def test_the_key_never_shows(server, make_client, caplog):
    caplog.set_level(logging.DEBUG)
    server.push(reply_json({}, 503), reply_json({"error": "bad"}, 401))
    client = make_client()
    with pytest.raises(ClientError) as info:
        client.complete(MESSAGES)
    shown = " ".join([repr(client), str(info.value), repr(info.value), caplog.text,
                      repr(vars(client))])
    assert KEY not in shown
    assert "MOONBOX_TEST_KEY" in repr(client)
