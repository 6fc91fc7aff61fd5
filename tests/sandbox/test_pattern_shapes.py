"""The patterns guards.lua runs natively past the (n + 1)^(k + 1) bound: those whose repeats
cannot backtrack (docs/guards.md). Their bound must hold the matcher's real work, counted
here by the metered matcher of patterns.lua, which charges one unit per elementary step of
the same algorithm the native runs: on generated patterns and subjects, and on subjects made
to be the worst for each pattern, every find, gsub and gmatch iteration of a pattern the
guard calls *linear* or *safe* costs no more than the guard charges for it."""

from __future__ import annotations

import importlib.resources

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lupa import luajit21

from moonbox import Budget, Sandbox

PROPERTY = settings(max_examples=600, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _source(name: str) -> str:
    return importlib.resources.files("moonbox.sandbox").joinpath(name).read_text()


def _shape_code() -> str:
    # shape() and its helpers, as guards.lua defines them inside its patterns block.
    guards = _source("guards.lua")
    start = guards.index("  local shapes_seen, shapes_seen_count")
    end = guards.index("  -- The worst-case steps of the native matcher")
    return guards[start:end]


HARNESS = """
local patterns_source, shape_source = ...
local s_byte, s_find, s_sub = string.byte, string.find, string.sub
local shape = assert(loadstring("local s_byte, s_find, s_sub = ... " .. shape_source
                                .. " return shape", "=shape"))(s_byte, s_find, s_sub)
local used = 0
local ours = assert(loadstring(patterns_source, "=patterns.lua"))()(function(n) used = used + n end)

-- What the guard charges for one call (a gmatch: its whole iteration when linear, else per
-- iterator call), or nil where it does not use the shape.
local function bound(s, p)
  local known = shape(p)
  if not known then return nil end
  local n = #s + 1
  if known[1] then return n * known[1], true end
  if known[3] == nil then return n * (2 * #p + 1 + n * known[2]), false end
  -- A leading literal: only the starts at its occurrences scan.
  local starts, at = 0, s_find(s, known[3], 1, true)
  while at do
    starts = starts + 1
    at = s_find(s, known[3], at + 1, true)
  end
  return n * (2 * #p + 1) + starts * n * known[2], false
end

-- The metered matcher's work on each kind of call, against the bound.
return function(s, p)
  local b, whole = bound(s, p)
  if b == nil then return nil end
  used = 0
  ours.find(s, p)
  local find = used
  used = 0
  ours.gsub(s, p, "")
  local gsub = used
  used = 0
  local calls = 0
  for _ in ours.gmatch(s, p) do calls = calls + 1 end
  local gmatch = used
  local gmatch_bound = whole and b or b * (calls + 1)
  return b, find, gsub, gmatch, gmatch_bound
end
"""

_RT = luajit21.LuaRuntime()
_CHECK = _RT.execute(HARNESS, _source("patterns.lua"), _shape_code())

# Items over a small alphabet, so that repeats and literals collide often.
_ALPHABET = "ab=]x "
_CLASS = st.sampled_from(["a", "b", "=", "x", " ", "%]", ".", "%a", "%s", "%d", "[ab]", "[^=]",
                          "[%]a]", "[^ ]"])
_ITEM = st.tuples(_CLASS, st.sampled_from(["", "", "*", "+", "-", "?"]), st.booleans()).map(
    lambda t: f"({t[0]}{t[1]})" if t[2] else t[0] + t[1])
_PATTERN = st.tuples(st.booleans(), st.lists(_ITEM, min_size=1, max_size=5), st.booleans()).map(
    lambda t: ("^" if t[0] else "") + "".join(t[1]) + ("$" if t[2] else ""))
_SUBJECT = st.text(alphabet=_ALPHABET, max_size=80)


def _holds(subject: str, pattern: str) -> bool:
    got = _CHECK(subject.encode(), pattern.encode())
    if got is None:
        return False
    bound, find, gsub, gmatch, gmatch_bound = got
    # A call's own constant work (reading its arguments and the pattern once) apart: the
    # guard uses these bounds only where they run to at least NATIVE_PATTERN_OPS.
    fixed = 4 * len(pattern) + 16
    bound += fixed
    gmatch_bound += fixed
    assert find <= bound, (pattern, subject, find, bound)
    assert gsub <= bound, (pattern, subject, gsub, bound)
    assert gmatch <= gmatch_bound, (pattern, subject, gmatch, gmatch_bound)
    return True


@PROPERTY
@given(pattern=_PATTERN, subject=_SUBJECT)
def test_the_bound_of_a_pattern_that_cannot_backtrack_holds_its_work(pattern, subject):
    _holds(subject, pattern)


@settings(PROPERTY, max_examples=300)
@given(pattern=_PATTERN)
def test_the_bound_holds_on_each_patterns_worst_subjects(pattern):
    # Long runs of one character, and of a character with what would end a match missing:
    # where a repeat scans far and its match then fails.
    for c in _ALPHABET:
        for tail in ("", "a", "=", "]", " "):
            for n in (40, 160):
                _holds(c * n + tail, pattern)
                _holds((c + tail) * n, pattern)


def test_the_kinds_of_the_usual_patterns():
    shape = _RT.execute("local s_byte, s_find, s_sub = string.byte, string.find, string.sub "
                        + _shape_code() + " return shape")

    def kind(p: str) -> str:
        got = shape(p.encode())
        return "neither" if got is False else "linear" if got[1] else "safe"

    assert [kind(p) for p in ("[^\n]+", "user=(%a+)", "/v(%d)/", "^%s*", "(%w+)")] == ["linear"] * 5
    assert [kind(p) for p in ("%[(%u+)%] took=(%d+)ms", "(%a+)=", "%d+$", "[^,]*,")] == ["safe"] * 4
    assert [kind(p) for p in ("a*a", "(.-)x", "%a+%d", "%s*(%S+)", "%b()", "(a)%1", "^*",
                              "%f[%a]x", "[%]]+]", ".*x")] == ["neither"] * 10


def test_linear_patterns_on_a_long_subject_match_as_natively_and_are_charged_for_it():
    # A megabyte of lines: every pattern here cannot backtrack, so no call goes to the
    # metered matcher (which would take seconds), and each is charged for the subject.
    src = """
    local text = string.rep("12:00:00 [INFO] user=ada took=12ms\\n", 30000)
    local n = 0
    for line in text:gmatch("[^\\n]+") do n = n + 1 end
    local masked = text:gsub("user=(%a+)", {ada = "user=A"})
    local _, v = masked:gsub("took=(%d+)ms", "%1")
    return n, v, #masked
    """
    with Sandbox(Budget(steps=1 << 40, wall_s=20)) as sb:
        out = sb.run(src, "=lines")
        assert out.status == "done", out
        assert out.values == (30000, 30000, 30000 * 33)
        # The three calls over ~1 MB are charged at least a step per 256 bytes each.
        assert out.stats.steps > 3 * (30000 * 35) // 256


def test_a_pattern_that_begins_with_a_literal_is_bounded_by_the_starts_at_it():
    # Only a start at the leading literal scans: a log line with one "[" stays within the
    # native bound, and the bound grows with every "[" the subject holds.
    pattern = b"%[(%u+)%] user=(%a+) took=(%d+)ms"
    line = b"12:34:56 [ERROR] user=dee took=123ms path=/api/v1/items/1234"
    one, *_ = _CHECK(line, pattern)
    assert one < 100_000
    assert _holds(line.decode(), pattern.decode())
    many = b"[" * 40 + line
    assert _CHECK(many, pattern)[0] > 40 * len(many)
    assert _holds(many.decode(), pattern.decode())
    for subject in ("[A" * 60, "[" + "A" * 120, "[A] user=" * 12):
        assert _holds(subject, pattern.decode())


def test_a_pattern_with_many_leading_literals_in_its_subject_goes_to_the_metered_matcher():
    # Subjects full of the leading literal: the count stops once past the native bound, and
    # the call still returns what the native returns (from the metered matcher).
    src = """
    local p = "%[(%u+)%] user=(%a+) took=(%d+)ms"
    local line = "12:34:56 [ERROR] user=dee took=123ms"
    local crowded = string.rep("[", 200) .. line
    return string.match(line, p), string.match(crowded, p), #string.rep("[A", 300):gsub(p, "")
    """
    with Sandbox(Budget(steps=1 << 40, wall_s=20)) as sb:
        out = sb.run(src, "=lead")
        assert out.status == "done", out
        assert out.values == ("ERROR", "ERROR", 600)
