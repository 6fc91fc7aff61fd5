"""Read-only queries: each refusal code, the cache, time and concurrency limits."""

from __future__ import annotations

import threading

import pytest
from pydantic import BaseModel

from moonbox import Budget, ConfigError
from moonbox.bindings import REFUSAL_CODES, Permissions, QueryInfo, QuerySource, Registry


class TopArgs(BaseModel):
    top: int = 3


class Names(BaseModel):
    names: list[str]


class Clock:
    """An injectable clock: time moves only when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


NAMES = ["ada", "bo", "cy", "di", "ed"]


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def registry(clock):
    reg = Registry(clock=clock)
    yield reg
    reg.close()


def leaders(reads=None, **kwargs) -> QuerySource:
    def read(info: QueryInfo, args: TopArgs):
        if reads is not None:
            reads.append((info.mod, args.top))
        return {"names": NAMES[: args.top]}

    return QuerySource("leaders", TopArgs, Names, read=read, **kwargs)


def query(registry, source, mod="m", access="player", budget=None, jit=True):
    api = registry.mod(mod, Permissions(mode="readonly"), access=access)
    with api.sandbox(budget, jit=jit) as sb:
        return sb.run(source)


def refusal(out):
    assert out.status == "error", out
    message = out.error.message
    assert message.startswith("query: ") and "\n" not in message
    code = message.rsplit("[", 1)[1].rstrip("]")
    assert code in REFUSAL_CODES
    return code


def test_a_mod_reads_a_source(registry, jit):
    registry.add_source(leaders())
    out = query(registry, "local r = query('leaders', {top = 2}) return r.names[1], #r.names",
                jit=jit)
    assert out.values == ("ada", 2)
    assert query(registry, "return #query('leaders').names").value == 3


def test_unknown_source(registry):
    out = query(registry, "return query('nope')")
    assert refusal(out) == "unknown_source"
    assert out.error.message == "query: no query source named 'nope' [unknown_source]"


def test_invalid_arguments(registry):
    registry.add_source(leaders())
    out = query(registry, "return query('leaders', {top = 'many'})")
    assert refusal(out) == "invalid_arguments"
    assert "argument top" in out.error.message


def test_refused_by_authorize_with_and_without_a_sentence(registry):
    seen = []

    def authorize(info, access, args):
        seen.append((info.mod, access, args.top))
        if access == "guest":
            return False
        if args.top > 3:
            return "only the top three are public"
        return True

    registry.add_source(leaders(authorize=authorize))
    assert query(registry, "return #query('leaders').names", access="player").value == 3
    out = query(registry, "return query('leaders')", access="guest")
    assert refusal(out) == "refused" and "may not read" in out.error.message
    out = query(registry, "return query('leaders', {top = 5})", access="player")
    assert out.error.message == "query: leaders: only the top three are public [refused]"
    assert seen[0] == ("m", "player", 3)


def test_access_unavailable_when_the_mod_was_loaded_without_access(registry):
    registry.add_source(leaders(authorize=lambda info, access, args: True))
    assert refusal(query(registry, "return query('leaders')", access=None)) == \
        "access_unavailable"
    # A source without authorize is open to every mod.
    registry.add_source(QuerySource("open", TopArgs, Names, read=lambda i, a: {"names": []}))
    assert query(registry, "return #query('open').names", access=None).value == 0


@pytest.mark.parametrize("read", [
    lambda info, args: 1 / 0,                      # the read raises
    lambda info, args: {"names": "not a list"},    # the result does not fit its model
])
def test_failed(registry, read, caplog):
    registry.add_source(QuerySource("broken", TopArgs, Names, read=read))
    out = query(registry, "return query('broken')")
    assert refusal(out) == "failed"
    assert out.error.message == "query: broken: the host could not read it [failed]"
    assert caplog.records  # the host log has the traceback


def test_failed_when_authorize_raises(registry):
    registry.add_source(leaders(authorize=lambda info, access, args: 1 / 0))
    assert refusal(query(registry, "return query('leaders')")) == "failed"


def test_timed_out(registry):
    release = threading.Event()
    registry.add_source(QuerySource(
        "slow", TopArgs, Names, read=lambda i, a: release.wait(10) and {"names": []},
        timeout_s=0.1))
    out = query(registry, "return query('slow')", budget=Budget(wall_s=30))
    release.set()
    assert refusal(out) == "timed_out"
    assert "0.1 s" in out.error.message


def test_a_read_never_outlasts_the_resumes_wall_budget(registry):
    release = threading.Event()
    registry.add_source(QuerySource(
        "slow", TopArgs, Names, read=lambda i, a: release.wait(10) and {"names": []}))
    out = query(registry, "local ok = pcall(query, 'slow') for i = 1, 10 do end return ok",
                budget=Budget(wall_s=0.2))
    release.set()
    # The read is abandoned when the resume's time is up, and the mod trips on time.
    assert out.status == "budget" and out.error.budget == "time"
    assert out.stats.wall_s < 5


def test_result_too_large(registry):
    registry.add_source(QuerySource(
        "big", TopArgs, Names, read=lambda i, a: {"names": ["x" * 1000] * 100},
        max_result_bytes=64 * 1024))
    out = query(registry, "return query('big')")
    assert refusal(out) == "result_too_large"
    assert "over the limit of 65536" in out.error.message


def test_busy_when_the_concurrency_cap_is_reached(registry):
    release = threading.Event()
    started = threading.Event()

    def read(info, args):
        started.set()
        release.wait(10)
        return {"names": []}

    registry.add_source(QuerySource("one", TopArgs, Names, read=read, max_concurrent=1,
                                    timeout_s=0.05, cache_s=0))
    # The first read times out but stays in flight (it cannot be killed): it still counts.
    assert refusal(query(registry, "return query('one')")) == "timed_out"
    assert started.wait(5)
    assert refusal(query(registry, "return query('one', {top = 1})")) == "busy"
    release.set()


def test_identical_arguments_are_cached_per_mod_until_they_expire(registry, clock):
    reads = []
    registry.add_source(leaders(reads, cache_s=10))
    code = "return query('leaders', {top = 2}).names[2]"
    assert query(registry, code).value == "bo"
    assert query(registry, code).value == "bo"
    assert reads == [("m", 2)]
    query(registry, "return query('leaders', {top = 1})")
    query(registry, code, mod="other")
    assert reads == [("m", 2), ("m", 1), ("other", 2)]
    clock.now += 10.5
    query(registry, code)
    assert reads[-1] == ("m", 2) and len(reads) == 4


def test_authorize_runs_even_on_a_cache_hit(registry):
    allowed = {"player"}
    registry.add_source(leaders(authorize=lambda info, access, args: access in allowed))
    assert query(registry, "return #query('leaders').names").value == 3
    allowed.clear()
    assert refusal(query(registry, "return query('leaders')")) == "refused"


def test_no_cache_when_cache_s_is_zero(registry):
    reads = []
    registry.add_source(leaders(reads, cache_s=0))
    query(registry, "query('leaders') query('leaders')")
    assert len(reads) == 2


def test_removing_a_source_drops_its_cache(registry):
    reads = []
    source = registry.add_source(leaders(reads))
    query(registry, "query('leaders')")
    registry.queries.uninstall(source)
    assert refusal(query(registry, "return query('leaders')")) == "unknown_source"
    registry.add_source(leaders(reads))
    query(registry, "query('leaders')")
    assert len(reads) == 2


def test_query_is_a_read_binding_a_mod_can_be_denied(registry):
    registry.add_source(leaders())
    api = registry.mod("m", Permissions(mode="full", rules={"query": "deny"}))
    assert "query" not in api.names


def test_source_configuration_is_validated(registry):
    registry.add_source(leaders())
    with pytest.raises(ConfigError, match="already registered"):
        registry.add_source(leaders())
    for bad in [dict(timeout_s=0), dict(max_concurrent=0), dict(max_result_bytes=0),
                dict(cache_s=-1)]:
        with pytest.raises(ConfigError):
            QuerySource("x", TopArgs, Names, read=lambda i, a: None, **bad)
    with pytest.raises(ConfigError):
        QuerySource("", TopArgs, Names, read=lambda i, a: None)
    with pytest.raises(ConfigError):
        QuerySource("x", dict, Names, read=lambda i, a: None)  # type: ignore[arg-type]
