"""Hooks (order, veto, amend, failures skipped) and scopes (release once, in reverse)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from moonbox import ConfigError
from moonbox.bindings import (
    Binding,
    CallInfo,
    Hook,
    LuaNumber,
    Permissions,
    QuerySource,
    Registry,
    ScopeClosed,
    Veto,
    default_bindings,
)


class Damage(BaseModel):
    target: str
    amount: LuaNumber


class Empty(BaseModel):
    pass


@pytest.fixture
def registry():
    reg = Registry(default_bindings())
    reg.register(Binding("damage", Damage, lambda c, a: a.amount, risk="write", group="combat"))
    yield reg
    reg.close()


def run(registry, source, mod="m", jit=True):
    with registry.mod(mod, Permissions(mode="full")).sandbox(jit=jit) as sb:
        return sb.run(source)


# -- hooks ---------------------------------------------------------------------------------


def test_hooks_run_in_declared_order_then_insertion_order(registry):
    seen = []
    for name, order in [("c", 5), ("a", 1), ("b", 5), ("z", -3)]:
        registry.add_hook(Hook(name, pre_call=lambda info, n=name: seen.append(n), order=order))
    assert run(registry, "return damage('orc', 3)").value == 3
    assert seen == ["z", "a", "c", "b"]


def test_pre_call_sees_validated_arguments_and_the_mod(registry):
    infos: list[CallInfo] = []
    registry.add_hook(Hook("spy", pre_call=infos.append))
    run(registry, "damage{target = 'orc', amount = 2}", mod="waves")
    (info,) = infos
    assert info.mod == "waves" and info.binding.name == "damage"
    assert info.args == Damage(target="orc", amount=2.0)


def test_a_veto_refuses_with_the_reason_and_kind_denied(registry, jit):
    ran = []
    registry.add_hook(Hook("cap", pre_call=lambda info: Veto("amount over 10")
                           if info.args.amount > 10 else None))
    registry.add_hook(Hook("later", pre_call=lambda info: ran.append(1), order=5))
    assert run(registry, "return damage('orc', 5)", jit=jit).value == 5
    out = run(registry, "return damage('orc', 50)", jit=jit)
    assert out.status == "error" and out.error.kind == "denied"
    assert out.error.message == "damage: amount over 10 [vetoed]"
    assert ran == [1, 1]  # a veto stops the binding, not the hooks after it


# What a pre_call hook does: let the call through, veto it, raise, or return something
# that is not a Veto (which lets it through too).
PRE_BEHAVIOURS = ("none", "veto", "raise", "other")


@pytest.fixture(scope="module")
def hooked():
    """One registry and sandbox for every example: hooks come and go, the sandbox stays."""
    reg = Registry()
    ran: list[float] = []
    reg.register(Binding("damage", Damage, lambda c, a: ran.append(a.amount) or a.amount,
                         risk="write", group="combat"))
    api = reg.mod("m", Permissions(mode="full"))
    sb = api.sandbox()
    yield reg, sb, ran
    sb.close()
    reg.close()


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(pre=st.lists(st.tuples(st.integers(-2, 2), st.sampled_from(PRE_BEHAVIOURS)),
                    max_size=7),
       post=st.lists(st.integers(-2, 2), max_size=3))
def test_every_pre_call_hook_runs_in_order_and_only_a_veto_refuses(hooked, pre, post):
    registry, sb, ran = hooked
    seen: list[tuple[str, int]] = []
    ids: set[int] = set()
    hooks = []

    def make_pre(i: int, behaviour: str):
        def pre_call(info: CallInfo):
            seen.append(("pre", i))
            ids.add(info.call_id)
            if behaviour == "veto":
                return Veto(f"no by {i}")
            if behaviour == "raise":
                raise RuntimeError(f"hook {i} is broken")
            if behaviour == "other":
                return "not a veto"
            return None
        return pre_call

    def make_post(i: int):
        def post_call(info: CallInfo, result):
            seen.append(("post", i))
            ids.add(info.call_id)
            return result
        return post_call

    for i, (order, behaviour) in enumerate(pre):
        hooks.append(registry.add_hook(Hook(f"pre{i}", pre_call=make_pre(i, behaviour),
                                            order=order)))
    for j, order in enumerate(post):
        hooks.append(registry.add_hook(Hook(f"post{j}", post_call=make_post(j), order=order)))
    ran.clear()
    try:
        out = sb.run("return damage('orc', 3)")
    finally:
        for hook in hooks:
            registry.remove_hook(hook)
    # Every pre_call hook ran, in ascending order, ties in the order they were added.
    expected_pre = [i for _, i in sorted((order, i) for i, (order, _) in enumerate(pre))]
    assert [i for kind, i in seen if kind == "pre"] == expected_pre
    vetoes = [i for i in expected_pre if pre[i][1] == "veto"]
    if vetoes:
        # The first veto in that order is the one the mod sees; nothing ran after.
        assert out.status == "error" and out.error.kind == "denied"
        assert out.error.message == f"damage: no by {vetoes[0]} [vetoed]"
        assert ran == [] and not [k for k, _ in seen if k == "post"]
    else:
        # Raising, or returning something that is not a Veto, never refuses.
        assert out.status == "done" and out.value == 3
        assert ran == [3.0]
        expected_post = [j for _, j in sorted((order, j) for j, order in enumerate(post))]
        assert [j for kind, j in seen if kind == "post"] == expected_post
    assert len(ids) <= 1  # every hook saw the same call id


def test_a_failing_hook_is_logged_and_skipped_never_a_veto(registry, caplog):
    def broken(info):
        raise RuntimeError("hook bug")

    registry.add_hook(Hook("broken", pre_call=broken, post_call=lambda i, r: 1 / 0))
    with caplog.at_level(logging.ERROR):
        out = run(registry, "return damage('orc', 4)")
    assert out.value == 4
    texts = [r.getMessage() for r in caplog.records]
    assert any("pre_call hook 'broken'" in t for t in texts)
    assert any("post_call hook 'broken'" in t for t in texts)


def test_a_returned_non_veto_value_does_not_refuse(registry):
    registry.add_hook(Hook("truthy", pre_call=lambda info: "no"))  # type: ignore[arg-type,return-value]
    assert run(registry, "return damage('orc', 1)").value == 1


def test_post_call_hooks_amend_in_order(registry):
    registry.add_hook(Hook("double", post_call=lambda info, r: r * 2, order=1))
    registry.add_hook(Hook("plus", post_call=lambda info, r: r + 1, order=2))
    assert run(registry, "return damage('orc', 5)").value == 11


def test_an_amended_result_must_still_cross_as_plain_data(registry):
    registry.add_hook(Hook("bad", post_call=lambda info, r: object()))
    out = run(registry, "return damage('orc', 5)")
    assert out.status == "error" and "damage" in out.error.message


def test_hooks_match_names_and_prefixes(registry):
    seen = []
    registry.add_hook(Hook("exact", pre_call=lambda i: seen.append("exact"), match="damage"))
    registry.add_hook(Hook("prefix", pre_call=lambda i: seen.append("prefix"), match="dam*"))
    registry.add_hook(Hook("other", pre_call=lambda i: seen.append("other"), match="add"))
    run(registry, "damage('orc', 1)")
    assert seen == ["exact", "prefix"]


def test_hooks_added_or_removed_later_apply_to_existing_mods(registry):
    api = registry.mod("m", Permissions(mode="full"))
    with api.sandbox() as sb:
        assert sb.run("return damage('a', 1)").value == 1
        hook = registry.add_hook(Hook("x10", post_call=lambda i, r: r * 10))
        assert sb.run("return damage('a', 1)").value == 10
        registry.remove_hook(hook)
        assert sb.run("return damage('a', 1)").value == 1


def test_a_hook_needs_a_function_and_a_valid_match():
    with pytest.raises(ValueError, match="neither"):
        Hook("empty")
    with pytest.raises(ValueError, match="match"):
        Hook("x", pre_call=lambda i: None, match="a*b")


# -- scopes --------------------------------------------------------------------------------


def _noop(call, args):
    return None


def test_a_scope_releases_everything_in_reverse_order_once(registry):
    order = []
    scope = registry.scope("plugin")
    scope.defer(lambda: order.append("first"))
    scope.register(Binding("heal", Empty, _noop))
    hook = Hook("h", pre_call=lambda i: None)
    scope.add_hook(hook)
    source = QuerySource("stats", Empty, Empty, read=lambda i, a: {})
    scope.add_source(source)
    scope.defer(lambda: order.append("last"))
    assert "heal" in registry and registry.hooks_for("heal")[0] == (hook,)
    scope.close()
    assert order == ["last", "first"]
    assert "heal" not in registry and registry.hooks_for("heal") == ((), ())
    assert registry.queries.sources == ()
    scope.close()
    assert order == ["last", "first"]


def test_adding_to_a_closed_scope_fails_and_installs_nothing(registry):
    scope = registry.scope("gone")
    scope.close()
    with pytest.raises(ScopeClosed, match="closed"):
        scope.register(Binding("heal", Empty, _noop))
    with pytest.raises(ScopeClosed):
        registry.register(Binding("heal", Empty, _noop), scope=scope)
    with pytest.raises(ScopeClosed):
        scope.add_hook(Hook("h", pre_call=lambda i: None))
    assert "heal" not in registry and registry.hooks_for("damage") == ((), ())
    assert isinstance(ScopeClosed("x"), ConfigError)


def test_a_failing_registration_installs_nothing_in_the_scope(registry):
    scope = registry.scope("dup")
    with pytest.raises(ConfigError):
        scope.register(Binding("damage", Empty, _noop))
    scope.close()
    assert registry.get("damage") is not None  # the existing one is untouched


def test_a_failing_cleanup_is_logged_and_the_rest_still_run(registry, caplog):
    order = []
    scope = registry.scope("p")
    scope.defer(lambda: order.append("a"))
    scope.defer(lambda: 1 / 0, name="broken")
    scope.defer(lambda: order.append("c"))
    with caplog.at_level(logging.ERROR):
        scope.close()
    assert order == ["c", "a"]
    assert any("broken" in r.getMessage() for r in caplog.records)


def test_a_scope_releases_on_the_error_path_as_a_context_manager(registry):
    with pytest.raises(RuntimeError), registry.scope("p") as scope:
        scope.register(Binding("heal", Empty, _noop))
        raise RuntimeError("host failed while loading")
    assert "heal" not in registry and scope.closed


def test_a_mods_scope_is_released_when_the_mod_closes(registry):
    released = []
    with registry.mod("waves") as api:
        api.scope.defer(lambda: released.append("waves"))
        registry.register(Binding("waves_ping", Empty, _noop), scope=api.scope)
        assert "waves_ping" in registry
    assert released == ["waves"] and "waves_ping" not in registry
    api.close()
    assert released == ["waves"]


def test_registry_register_with_a_scope_goes_through_it(registry):
    scope = registry.scope("s")
    binding = registry.register(Binding("heal", Empty, _noop), scope=scope)
    hook = registry.add_hook(Hook("h", pre_call=lambda i: None), scope=scope)
    assert registry.get("heal") is binding and registry.hooks_for("heal")[0] == (hook,)
    scope.close()
    assert registry.get("heal") is None
    assert "closed" in repr(scope)


def test_a_duplicate_scope_name_is_refused_until_the_first_closes(registry):
    first = registry.scope("plugin")
    with pytest.raises(ConfigError, match="open already"):
        registry.scope("plugin")
    with pytest.raises(ConfigError):
        registry.scope("")
    first.close()
    again = registry.scope("plugin")  # the name is free once its scope closed
    assert again is not first and not again.closed
    again.close()


def test_mods_of_one_id_each_have_their_own_scope(registry):
    # A dry run of a new version lives beside the live one: their scopes never clash.
    with registry.mod("waves") as live, registry.mod("waves") as dry:
        assert live.scope is not dry.scope
    registry.scope("mod waves").close()  # a host scope of that name is free too


def test_a_cleanup_handed_to_a_closed_scope_runs_at_once(registry, caplog):
    order = []
    scope = registry.scope("late")
    scope.close()
    scope.defer(lambda: order.append("late"))
    assert order == ["late"]
    with caplog.at_level(logging.ERROR):
        scope.defer(lambda: 1 / 0, name="broken")  # logged, as on close; never raised
    assert any("broken" in r.getMessage() for r in caplog.records)
    scope.close()
    assert order == ["late"]  # nothing held, nothing runs twice


def test_a_cleanup_deferred_while_the_scope_closes_runs_too(registry):
    order = []
    scope = registry.scope("p")
    scope.defer(lambda: scope.defer(lambda: order.append("inner")))
    scope.close()
    assert order == ["inner"]
