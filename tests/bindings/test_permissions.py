"""Permission modes and rules: an exact name beats a prefix, the longest prefix wins."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from moonbox.bindings import MODES, Permissions

RISKS = ("read", "write", "danger")


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("readonly", {"read": "allow", "write": "deny", "danger": "deny"}),
        ("ask", {"read": "allow", "write": "ask", "danger": "ask"}),
        ("auto", {"read": "allow", "write": "allow", "danger": "ask"}),
        ("full", {"read": "allow", "write": "allow", "danger": "allow"}),
    ],
)
def test_modes_decide_by_risk(mode, expected):
    perms = Permissions(mode=mode)
    assert {risk: perms.decide("anything", risk) for risk in RISKS} == expected


def test_default_mode_is_auto():
    assert Permissions().mode == "auto"


def test_exact_rule_beats_every_prefix():
    perms = Permissions(mode="full", rules={
        "coreai_world_*": "deny", "coreai_world_pos": "allow", "coreai_*": "ask",
    })
    assert perms.decide("coreai_world_pos", "read") == "allow"
    assert perms.decide("coreai_world_spawn", "write") == "deny"
    assert perms.decide("coreai_lua_reset", "write") == "ask"
    assert perms.decide("add", "read") == "allow"


def test_longest_prefix_wins_whatever_the_order():
    a = Permissions(rules={"co*": "deny", "coreai_*": "allow"})
    b = Permissions(rules={"coreai_*": "allow", "co*": "deny"})
    for perms in (a, b):
        assert perms.decide("coreai_x", "danger") == "allow"
        assert perms.decide("count", "read") == "deny"


def test_star_alone_matches_everything_but_loses_to_longer_rules():
    perms = Permissions(mode="full", rules={"*": "deny", "report": "allow"})
    assert perms.decide("add", "read") == "deny"
    assert perms.decide("report", "read") == "allow"


def test_rules_can_allow_more_than_the_mode():
    perms = Permissions(mode="readonly", rules={"spawn": "allow"})
    assert perms.decide("spawn", "danger") == "allow"


@pytest.mark.parametrize("pattern", ["", "a*b", "*x", "two words", "a-b", "x" * 65, "1abc"])
def test_bad_rule_patterns_are_refused(pattern):
    with pytest.raises(ValidationError, match="rule"):
        Permissions(rules={pattern: "allow"})


def test_bad_modes_and_decisions_are_refused():
    with pytest.raises(ValidationError):
        Permissions(mode="root")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Permissions(rules={"add": "maybe"})  # type: ignore[dict-item]


def test_permissions_are_frozen_and_with_rules_copies():
    perms = Permissions(mode="readonly")
    more = perms.with_rules(spawn="allow")
    assert perms.rules == {} and more.rules == {"spawn": "allow"}
    with pytest.raises(ValidationError):
        perms.mode = "full"  # type: ignore[misc]


# -- property: decide() agrees with a plain reference of the rules -------------------------


def reference(mode: str, rules: dict[str, str], name: str, risk: str) -> str:
    """The rules as the issue states them, written as plainly as possible."""
    if name in rules:
        return rules[name]
    matching = [p for p in rules if p.endswith("*") and name.startswith(p[:-1])]
    if matching:
        return rules[max(matching, key=len)]  # prefixes of one name: lengths differ
    return MODES[mode][risk]


alphabet = st.sampled_from("abc_")
names = st.text(alphabet, min_size=1, max_size=6).filter(lambda s: not s[0].isdigit())
patterns = st.one_of(names, st.text(alphabet, max_size=5).map(lambda s: s + "*"))
decisions = st.sampled_from(["allow", "ask", "deny"])


@given(
    mode=st.sampled_from(list(MODES)),
    rules=st.dictionaries(patterns, decisions, max_size=8),
    name=names,
    risk=st.sampled_from(RISKS),
)
def test_decide_matches_the_reference(mode, rules, name, risk):
    perms = Permissions(mode=mode, rules=rules)
    assert perms.decide(name, risk) == reference(mode, rules, name, risk)
