"""Finding the Lua in a reply, and keeping reasoning apart (examples and properties)."""

from __future__ import annotations

import json
import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from moonbox.agent import ThinkSplitter, extract_lua, split_reasoning

# -- examples -------------------------------------------------------------------------------


def test_a_lua_block():
    found = extract_lua("Here you go:\n\n```lua\nreturn 1\n```\n\nEnjoy.")
    assert found is not None and found.code == "return 1" and found.origin == "fence"


def test_the_last_lua_block_wins():
    reply = "```lua\nreturn 'broken'\n```\nFixed:\n```lua\nreturn 'fixed'\n```"
    found = extract_lua(reply)
    assert found.code == "return 'fixed'" and found.blocks == 2


def test_lua_beats_unlabelled_and_other_languages():
    reply = "```\nplain\n```\n```python\nprint(1)\n```\n```lua\nreturn 2\n```\n```\nlater\n```"
    assert extract_lua(reply).code == "return 2"


def test_labels_are_case_insensitive_and_may_carry_attributes():
    assert extract_lua("```Lua title=main\nreturn 3\n```").code == "return 3"
    assert extract_lua("~~~luajit\nreturn 4\n~~~").code == "return 4"


def test_unlabelled_fence_when_no_lua_block():
    found = extract_lua("```\nreturn true\n```")
    assert found.code == "return true" and found.origin == "unlabelled_fence"


def test_only_other_languages_is_no_code():
    assert extract_lua("```python\nprint('hi')\n```") is None
    assert extract_lua("I would write a loop that spawns goblins.") is None
    assert extract_lua("") is None


def test_json_envelope_whole_or_fenced():
    assert extract_lua('{"lua": "return 5"}').code == "return 5"
    assert extract_lua('  {"lua": "return 6", "notes": "x"}\n').origin == "json"
    assert extract_lua('```json\n{"lua": "return 7"}\n```').code == "return 7"
    assert extract_lua('{"code": "return 8"}') is None


def test_an_unclosed_fence_runs_to_the_end():
    assert extract_lua("```lua\nreturn 9\nlocal x = 1").code == "return 9\nlocal x = 1"


def test_a_longer_fence_holds_a_shorter_one():
    reply = "````lua\nlocal s = [[\n```\n]]\nreturn s\n````"
    assert extract_lua(reply).code == "local s = [[\n```\n]]\nreturn s"


def test_code_inside_think_blocks_is_never_taken():
    reply = "<think>```lua\nreturn 'thought'\n```</think>```lua\nreturn 'answer'\n```"
    assert extract_lua(reply).code == "return 'answer'"
    assert extract_lua("<think>```lua\nreturn 'thought'\n```</think>No code.") is None


def test_a_reasoning_tag_in_code_is_read_as_reasoning():
    # The documented limit (found by the property tests): the tag is reasoning wherever it
    # is, as the clients' streaming split reads it before any fence is seen. Code that
    # needs the text writes it in two parts.
    # Everything from the tag on is reasoning: the block is cut there (and runs to the end,
    # as a block left open does), so the model gets back the syntax error of what is left.
    assert extract_lua("```lua\nreturn '<think>'\n```").code == "return '"
    two_parts = "```lua\nreturn '<' .. 'think>'\n```"
    assert extract_lua(two_parts).code == "return '<' .. 'think>'"


def test_split_reasoning_examples():
    assert split_reasoning("a<think>b</think>c") == ("ac", "b")
    assert split_reasoning("before</think>after") == ("after", "before")
    assert split_reasoning("x<think>never closed") == ("x", "never closed")
    assert split_reasoning("no tags") == ("no tags", "")


# -- properties -----------------------------------------------------------------------------

# Lua-ish text: any lines, none of which is a fence line, and none holding a reasoning tag
# (the rule reads "<think>" and "</think>" as reasoning anywhere, code included: see
# test_a_reasoning_tag_in_code_is_read_as_reasoning).
_line = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
                max_size=40).filter(lambda s: not s.lstrip(" ").startswith(("```", "~~~"))
                                    and "think>" not in s)
_code = st.lists(_line, min_size=1, max_size=8).map("\n".join)
_prose = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="`~<>"),
                 max_size=80)


@settings(max_examples=100, deadline=None)
@given(code=_code, before=_prose, after=_prose)
def test_a_fenced_block_comes_back_exactly(code, before, after):
    reply = f"{before}\n```lua\n{code}\n```\n{after}"
    found = extract_lua(reply)
    assert found is not None and found.code == code


@settings(max_examples=100, deadline=None)
@given(codes=st.lists(_code, min_size=1, max_size=4), prose=_prose)
def test_the_last_of_several_lua_blocks(codes, prose):
    reply = f"\n{prose}\n".join(f"```lua\n{c}\n```" for c in codes)
    assert extract_lua(reply).code == codes[-1]


@settings(max_examples=100, deadline=None)
@given(code=st.text(max_size=200))
@example(code="<think>")  # found by this test: reasoning tags inside the code
@example(code="a</think>b")
def test_the_json_envelope_round_trips_any_text(code):
    found = extract_lua(json.dumps({"lua": code}))
    assert found is not None and found.code == code


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=300))
def test_extraction_never_raises_and_finds_only_what_is_there(text):
    found = extract_lua(text)
    if found is not None and found.origin != "json":
        assert found.code in text


_think_text = st.lists(st.sampled_from(["<think>", "</think>", "a", "b c", "<", ">", "th",
                                        "<thi", "nk>", "\n", "```lua\n", "x</"]),
                       max_size=20).map("".join)


@settings(max_examples=150, deadline=None)
@given(text=_think_text, cuts=st.lists(st.integers(0, 400), max_size=10))
@example(text="<thi<think></think>nk>", cuts=[])
def test_streamed_splitting_matches_whole_text_splitting(text, cuts):
    """Wherever a stream is cut, the splitter decides as it would on the whole text."""
    bounds = sorted({c for c in cuts if c <= len(text)} | {0, len(text)})
    splitter = ThinkSplitter()
    shown, hidden = [], []
    for start, end in zip(bounds, bounds[1:], strict=False):
        s, h = splitter.feed(text[start:end])
        shown.append(s)
        hidden.append(h)
    s, h = splitter.flush()
    shown.append(s)
    hidden.append(h)
    whole = ThinkSplitter()
    ws, wh = whole.feed(text)
    fs, fh = whole.flush()
    assert "".join(shown) == ws + fs
    assert "".join(hidden) == wh + fh
    # No reasoning tag leaks: what is shown holds no more "<think>" than the text with its
    # closed blocks cut out does (cutting a block out can join "<thi" and "nk>": found by
    # this test).
    closed_cut = re.sub(r"<think>.*?</think>", "", text, flags=re.S)
    assert "".join(shown).count("<think>") <= closed_cut.count("<think>")
