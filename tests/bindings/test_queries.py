"""Read-only queries: each refusal code, the cache, time and concurrency limits."""

from __future__ import annotations

import threading
import time

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


# -- readings --------------------------------------------------------------------------------


def read_in(registry, source: str, mod="m", access="player", budget=None, **options):
    api = registry.mod(mod, Permissions(mode="readonly"), access=access, **options)
    with api.sandbox(budget) as sb:
        return sb.run(source)


def test_a_fresh_reading_has_a_value_and_a_read_id_a_cache_hit_repeats(registry, clock):
    registry.add_source(leaders(cache_s=10))
    code = "local r = query_reading('leaders', {top = 2}) return r"
    first = read_in(registry, code).value
    assert first["state"] == "fresh" and first["value"] == {"names": ["ada", "bo"]}
    assert first["read_id"] > 0 and not first["stale"] and "code" not in first
    again = read_in(registry, code).value
    assert again["read_id"] == first["read_id"]  # the same read, from the cache
    clock.now += 11
    assert read_in(registry, code).value["read_id"] > first["read_id"]  # a new read


def test_a_failed_read_keeps_the_last_good_value_marked_stale(registry):
    broken = {"now": False}

    def read(info, args):
        if broken["now"]:
            raise RuntimeError("the leaderboard is down")
        return {"names": NAMES[: args.top]}

    registry.add_source(QuerySource("leaders", TopArgs, Names, read=read, cache_s=0))
    good = read_in(registry, "return query_reading('leaders', {top = 1})").value
    broken["now"] = True
    bad = read_in(registry, "return query_reading('leaders', {top = 1})").value
    assert bad["state"] == "failed" and bad["code"] == "failed"
    assert bad["reason"] == "leaders: the host could not read it"
    assert bad["stale"] and bad["value"] == good["value"] and bad["read_id"] == good["read_id"]
    # Other arguments have no good value yet; query itself still fails with the code.
    other = read_in(registry, "return query_reading('leaders', {top = 2})").value
    assert other["state"] == "failed" and "value" not in other and not other["stale"]
    assert refusal(read_in(registry, "return query('leaders', {top = 1})")) == "failed"


def test_a_refused_reading_has_a_code_and_a_reason_and_no_value(registry):
    out = read_in(registry, "return query_reading('nope')").value
    # nil fields are absent from a Lua table
    assert out == {"state": "refused", "code": "unknown_source",
                   "reason": "no query source named 'nope'", "stale": False}


def test_the_reading_of_the_host_api_is_the_same(registry):
    registry.add_source(leaders())
    client = registry.queries.client("m", "player")
    reading = client.read("leaders", {"top": 1}, None)
    assert reading.fresh and reading.value == {"names": ["ada"]} and reading.read_id
    assert client.read("nope", None, None).state == "refused"


# -- host codes ------------------------------------------------------------------------------


def test_authorize_and_read_may_refuse_or_fail_with_the_hosts_own_codes(registry):
    from moonbox import BindingError
    from moonbox.bindings import Refusal

    def authorize(info, access, args):
        if args.top == 4:
            return Refusal("the season is closed", code="leaderboard:season_closed")
        if args.top == 5:
            raise BindingError("archived", reason="leaderboard:archived")
        return True

    def read(info, args):
        if args.top == 1:
            return Refusal("only ranked players", code="leaderboard:unranked")
        if args.top == 2:
            raise BindingError("the ranking is being rebuilt [leaderboard:rebuilding]",
                               reason="leaderboard:rebuilding")
        return {"names": []}

    registry.add_source(QuerySource("board", TopArgs, Names, read=read, authorize=authorize,
                                    cache_s=0))
    results = {}
    for top in (1, 2, 3, 4, 5):
        results[top] = read_in(registry, f"return query_reading('board', {{top = {top}}})").value
    assert (results[1]["state"], results[1]["code"]) == ("refused", "leaderboard:unranked")
    assert results[1]["reason"] == "board: only ranked players"
    assert (results[2]["state"], results[2]["code"]) == ("failed", "leaderboard:rebuilding")
    assert results[2]["reason"] == "board: the ranking is being rebuilt"
    assert results[3]["state"] == "fresh"
    assert (results[4]["state"], results[4]["code"]) == ("refused", "leaderboard:season_closed")
    assert (results[5]["state"], results[5]["code"]) == ("refused", "leaderboard:archived")
    out = read_in(registry, "return query('board', {top = 2})")
    assert out.error.message == "query: board: the ranking is being rebuilt " \
                                "[leaderboard:rebuilding]"


@pytest.mark.parametrize("code", ["timed_out", "refused", "busy", "Not:ok", "nocolon"])
def test_a_source_cannot_raise_a_built_in_or_malformed_code(registry, code, caplog):
    from moonbox import BindingError

    def read(info, args):
        raise BindingError(f"pretend [{code}]", reason=code)

    registry.add_source(QuerySource("liar", TopArgs, Names, read=read))
    out = read_in(registry, "return query_reading('liar')").value
    assert (out["state"], out["code"]) == ("failed", "failed")  # a host bug, logged
    assert any("not a host code" in r.getMessage() for r in caplog.records)


def test_no_built_in_code_looks_like_a_host_code():
    from moonbox.bindings import BINDING_CODES
    from moonbox.bindings._codes import is_host_code

    for code in (*REFUSAL_CODES, *BINDING_CODES):
        assert not is_host_code(code) and code.isidentifier()
    assert is_host_code("leaderboard:season_closed")


# -- abort -----------------------------------------------------------------------------------


def test_a_read_that_times_out_is_told_to_stop_and_keeps_its_slot_until_it_does(registry):
    started, stopped, finish = threading.Event(), threading.Event(), threading.Event()
    infos = []

    def read(info, args):
        infos.append(info)
        started.set()
        # A long read, done in steps: it checks the abort flag between them.
        while not info.abort.wait(0.01):
            pass
        stopped.set()
        finish.wait(10)
        return {"names": []}

    registry.add_source(QuerySource("slow", TopArgs, Names, read=read, timeout_s=0.05,
                                    max_concurrent=1, cache_s=0))
    out = read_in(registry, "return query_reading('slow')").value
    assert (out["state"], out["code"]) == ("failed", "timed_out")
    assert stopped.wait(10) and infos[0].aborted
    # Told to stop, it has not returned yet: its slot is still taken.
    assert registry.queries.reads_in_flight == 1
    busy = read_in(registry, "return query_reading('slow', {top = 1})").value
    assert (busy["state"], busy["code"]) == ("refused", "busy")
    finish.set()
    wait_for(lambda: registry.queries.reads_in_flight == 0)
    assert read_in(registry, "return query_reading('slow')", budget=None).value["code"] == \
        "timed_out"  # a slot again (and it times out again)
    finish.set()


def wait_for(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.001)


def test_removing_a_source_or_unloading_the_mod_tells_its_reads_to_stop(registry):
    infos, started = [], threading.Event()

    def read(info, args):
        infos.append(info)
        started.set()
        info.abort.wait(10)
        return {"names": []}

    source = registry.add_source(QuerySource("slow", TopArgs, Names, read=read, cache_s=0))
    client = registry.queries.client("m", "player")
    thread = threading.Thread(target=client.read, args=("slow", None, None))
    thread.start()
    assert started.wait(10)
    registry.queries.uninstall(source)
    thread.join(10)
    assert infos[0].aborted
    registry.add_source(QuerySource("slow", TopArgs, Names, read=read, cache_s=0))
    started.clear()
    api = registry.mod("n", access="player")
    thread = threading.Thread(target=api.queries.read, args=("slow", None, None))
    thread.start()
    assert started.wait(10)
    api.close()
    thread.join(10)
    assert infos[1].aborted


# -- limits ----------------------------------------------------------------------------------


def test_reads_at_once_are_limited_per_mod_and_in_all(clock):
    from moonbox.bindings import QueryLimits

    registry = Registry(clock=clock, query_limits=QueryLimits(max_reads_per_mod=1,
                                                             max_reads=2))
    finish = threading.Event()
    started = threading.Semaphore(0)

    def read(info, args):
        started.release()
        finish.wait(10)
        return {"names": []}

    registry.add_source(QuerySource("slow", TopArgs, Names, read=read, cache_s=0,
                                    max_concurrent=10))
    a = registry.queries.client("a", "x")
    b = registry.queries.client("b", "x")
    c = registry.queries.client("c", "x")
    threads = [threading.Thread(target=a.read, args=("slow", None, None)),
               threading.Thread(target=b.read, args=("slow", None, None))]
    for t in threads:
        t.start()
    assert started.acquire(timeout=10) and started.acquire(timeout=10)
    mine = a.read("slow", {"top": 1}, None)
    assert (mine.state, mine.code) == ("refused", "busy") and "this mod" in mine.reason
    theirs = c.read("slow", None, None)
    assert (theirs.state, theirs.code) == ("refused", "busy") and "the host" in theirs.reason
    finish.set()
    for t in threads:
        t.join(10)
    assert c.read("slow", None, None).fresh
    registry.close()


def test_a_mod_reads_at_most_its_declared_queries(registry):
    from moonbox.bindings import QueryLimits

    for name in ("a", "b", "c"):
        registry.add_source(QuerySource(name, TopArgs, Names, read=lambda i, a: {"names": []}))
    out = read_in(registry, "return query_reading('b').state, query_reading('c').code",
                  queries=["a", "b"])
    assert out.values == ("fresh", "not_declared")
    out = read_in(registry, "return query('c')", queries=["a", "b"])
    assert out.error.message == "query: c: not among the queries this mod declared (a, b) " \
                                "[not_declared]"
    limit = QueryLimits().max_queries_per_mod
    assert limit == 8
    with pytest.raises(ConfigError, match="at most 8"):
        registry.mod("m", queries=[f"q{i}" for i in range(9)])
    with pytest.raises(ConfigError, match="not one string"):
        registry.mod("m", queries="a")


def test_a_mod_that_declares_nothing_reads_at_most_eight_sources(clock):
    from moonbox.bindings import QueryLimits

    registry = Registry(clock=clock, query_limits=QueryLimits(max_queries_per_mod=2))
    for name in ("a", "b", "c"):
        registry.add_source(QuerySource(name, TopArgs, Names, read=lambda i, a: {"names": []}))
    out = read_in(registry, "query('a') query('b') query('a', {top = 1}) "
                            "return query_reading('c')")
    assert out.value["code"] == "too_many_queries"
    assert out.value["reason"] == "c: a mod may read at most 2 query sources, and this one " \
                                  "reads a, b"
    # Unknown sources never count.
    out = read_in(registry, "query_reading('x') query_reading('y') return query_reading('a')")
    assert out.value["state"] == "fresh"
    registry.close()


def test_the_captured_access_is_plain_data_bounded_in_size_and_a_copy(registry):
    seen = []
    registry.add_source(leaders(authorize=lambda info, access, args: seen.append(access)))
    access = {"player": "ada", "roles": ["admin"]}
    api = registry.mod("m", access=access)
    access["roles"].append("owner")  # the host changes its own object later
    with api.sandbox() as sb:
        sb.run("query('leaders')")
    assert seen == [{"player": "ada", "roles": ["admin"]}]  # what was captured at load
    with pytest.raises(ConfigError, match="plain data"):
        registry.mod("m", access=object())
    with pytest.raises(ConfigError, match="over the limit of 4096"):
        registry.mod("m", access="x" * 5000)


def test_query_limits_are_validated():
    from moonbox.bindings import QueryLimits

    for bad in [dict(max_queries_per_mod=0), dict(max_reads=-1), dict(max_reads_per_mod=1.5),
                dict(max_access_bytes=True)]:
        with pytest.raises(ConfigError):
            QueryLimits(**bad)
