"""The mod API: coreai_lua_* and coreai_data_* bindings, end to end through a sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

import moonbox
from moonbox import Sandbox
from moonbox.store import Store, store_bindings


class Balance(BaseModel):
    hp: int
    waves: int


@pytest.fixture
def store(tmp_path: Path):
    with Store(tmp_path / "game.db") as s:
        s.scripts.record_success("waves:main", "return 1", author="human")
        s.scripts.record_failure("waves:main", "return (", error="syntax error",
                                 role="programmer", trace_id="t-1")
        s.scripts.record_success("waves:main", "return 3", role="programmer", trace_id="t-2")
        s.scripts.record_success("loot:main", "return 'a'")
        s.scripts.record_success("loot:main", "return 'b'")
        s.data.register("balance", Balance, {"hp": 10, "waves": 3})
        s.data.record_success("balance", {"hp": 20})
        yield s


@pytest.fixture
def sandbox(store, jit):
    bindings = (*moonbox.default_bindings(), *store_bindings(store))
    with Sandbox(jit=jit, host_functions=bindings) as sb:
        yield sb


def test_names_and_risks(store):
    got = {b.name: b.risk for b in store_bindings(store)}
    assert got == {
        "coreai_lua_get_current": "read", "coreai_lua_history": "read",
        "coreai_lua_reset": "write", "coreai_lua_reset_revision": "write",
        "coreai_lua_reset_all": "write",
        "coreai_data_get_current": "read", "coreai_data_history": "read",
        "coreai_data_reset": "write", "coreai_data_reset_revision": "write",
        "coreai_data_reset_all": "write",
    }
    assert all(b.description for b in store_bindings(store))
    assert [b.name for b in store_bindings(store, data=False)][0] == "coreai_lua_get_current"
    assert store_bindings(store, scripts=False, data=False) == ()


def test_get_current_and_history(sandbox):
    out = sandbox.run("""
        local cur = coreai_lua_get_current("waves:main")
        local h = coreai_lua_history("waves:main", 2)
        local all = coreai_lua_history{key = "waves:main"}
        return cur.rev, cur.source, cur.role, cur.trace_id, cur.outcome, #cur.hash,
               #h, h[1].rev, h[1].current, h[2].outcome, h[2].error, #all, all[3].original
    """, "@mods/inspect.lua")
    assert out.ok, out.error
    assert out.values == (3, "return 3", "programmer", "t-2", "ok", 64,
                          2, 3, True, "failed", "syntax error", 3, True)


def test_resets_move_current(sandbox, store):
    out = sandbox.run("""
        local a = coreai_lua_reset_revision("waves:main", 1).rev
        local b = coreai_lua_reset("loot:main").source
        return a, b
    """)
    assert out.values == (1, "return 'a'")
    assert store.scripts.current("waves:main").rev == 1
    store.scripts.rollback("waves:main", 3)
    store.scripts.rollback("loot:main", 2)
    assert sandbox.run("return coreai_lua_reset_all()").values == (2,)
    assert {i.key: i.current for i in store.scripts.keys()} == {"loot:main": 1, "waves:main": 1}
    assert store.data.current("balance").rev == 2  # the data twin was not asked


def test_data_twins(sandbox, store):
    out = sandbox.run("""
        local cur = coreai_data_get_current("balance")
        local h = coreai_data_history("balance")
        local reset = coreai_data_reset("balance")
        return cur.rev, cur.payload.hp, cur.effective.hp, cur.effective.waves, #h,
               reset.rev, reset.payload, reset.effective.hp
    """)
    assert out.ok, out.error
    assert out.values == (2, 20, 20, 3, 2, 1, None, 10)
    store.data.rollback("balance", 2)
    assert sandbox.run("return coreai_data_reset_all()").values == (1,)
    assert sandbox.run("return coreai_data_reset_revision('balance', 2).effective.hp").values == (20,)


@pytest.mark.parametrize("call, message", [
    ('coreai_lua_get_current("nope")', "coreai_lua_get_current: no script key 'nope' in the store"),
    ('coreai_lua_reset_revision("waves:main", 2)',
     "coreai_lua_reset_revision: script 'waves:main' revision 2 is a failed attempt"),
    ('coreai_lua_reset_revision("waves:main", 99)',
     "coreai_lua_reset_revision: script 'waves:main' has no revision 99"),
    ('coreai_lua_reset_revision("waves:main", 1.5)',
     "coreai_lua_reset_revision: argument rev: expected an integer, got number"),
    ('coreai_lua_reset_revision("waves:main", 0)',
     "coreai_lua_reset_revision: argument rev: Input should be greater than or equal to 1"),
    ("coreai_lua_history('waves:main', 1000)", "coreai_lua_history: argument limit:"),
    ("coreai_lua_get_current(42)", "coreai_lua_get_current: argument key: expected a string"),
    ("coreai_data_reset('waves:main')", "coreai_data_reset: no data key 'waves:main'"),
])
def test_errors_reach_lua_as_one_line(sandbox, call, message):
    out = sandbox.run(f"local r = {call}", "@mods/m.lua")
    assert out.status == "error" and out.error.kind == "runtime"
    assert out.error.message.startswith(message), out.error.message
    assert "\n" not in out.error.message and "Traceback" not in out.error.message


def test_errors_are_catchable_and_state_is_unchanged(sandbox, store):
    out = sandbox.run("""
        local ok, e = pcall(coreai_lua_reset_revision, "waves:main", 2)
        return ok, coreai_lua_get_current("waves:main").rev
    """)
    assert out.values == (False, 3)


def test_prefix_scopes_what_a_mod_sees(store, jit):
    scoped = store_bindings(store, prefix="loot:")
    with Sandbox(jit=jit, host_functions=scoped) as sb:
        assert sb.run("return coreai_lua_get_current('loot:main').rev").values == (2,)
        hidden = sb.run("return coreai_lua_get_current('waves:main')").error.message
        absent = sb.run("return coreai_lua_get_current('loot:nope')").error.message
        # Outside the scope reads exactly like absent: nothing to probe.
        assert hidden == absent.replace("loot:nope", "waves:main")
        assert hidden.startswith("coreai_lua_get_current: no script key 'waves:main'")
        store.scripts.rollback("waves:main", 1)
        assert sb.run("return coreai_lua_reset_all()").values == (1,)
    assert store.scripts.current("waves:main").rev == 1  # outside the scope: untouched
    assert store.scripts.current("loot:main").rev == 1


def test_binding_failure_carries_the_store_code(store):
    from moonbox import BindingError
    from moonbox.sandbox import HostCall

    get = next(b for b in store_bindings(store) if b.name == "coreai_lua_get_current")
    with pytest.raises(BindingError) as exc:
        get(HostCall(None, None, get.name), ("nope",))  # type: ignore[arg-type]
    assert exc.value.reason == "unknown_key"


def test_a_damaged_store_reaches_lua_without_host_detail(tmp_path, jit):
    """A mod learns that the store is damaged, never the file's path or SQLite's words."""
    from store_damage import PAGE, fill, middle_page, overwrite

    path = tmp_path / "damaged.db"
    fill(path)
    overwrite(path, middle_page(path), PAGE)
    with Store(path) as store:
        lost = next(e["key"] for e in store.export()["lost"] if e["what"] == "key")
        with Sandbox(jit=jit, host_functions=store_bindings(store)) as sb:
            for call in (f"coreai_lua_get_current({lost!r})", "coreai_lua_reset_all()",
                         "coreai_lua_reset('mod0001:main')"):
                out = sb.run(f"local r = {call}", "@mods/m.lua")
                assert out.status == "error", call
                message = out.error.message
                assert "the versions store is damaged and read-only" in message, message
                assert str(tmp_path) not in message and "malformed" not in message
            out = sb.run("return coreai_lua_get_current('mod0001:main').rev")
            assert out.values == (3,)  # what can be read still can
