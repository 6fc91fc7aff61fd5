"""Bindings a mod's permissions withhold, and the sentence each call of one says.

A denied binding is left out of the mod's environment (see :class:`~moonbox.bindings.ModApi`),
so calling it fails as a call of ``nil`` would. :func:`withheld` finds those names for a
package and says, for each, which permission it needs and what to add to ``mod.toml``;
``withheld.lua`` (run by :func:`~moonbox.mods.preparer`) puts a Lua function under each
that raises that sentence. Nothing of the host is called: a withheld binding never runs.
"""

from __future__ import annotations

from importlib import resources

from ..bindings import MODES, Binding, Permissions, Registry
from ..sandbox import LUA_KEYWORDS
from ._manifest import MANIFEST_NAME
from ._order import grant
from ._package import ModPackage

__all__ = ["WITHHELD_CHUNK", "withheld"]

WITHHELD_CHUNK = "@moonbox/mods/withheld.lua"
WITHHELD_LUA = resources.files("moonbox.mods").joinpath("withheld.lua").read_text("utf-8")

# The engine library's own raw bindings: a mod never calls them by name.
_INTERNAL = frozenset({"engine_ready", "engine_call"})
# Functions of the engine library that exist only when a binding is granted.
_LIBRARY = {"after": ("spawn",)}
# The least mode that allows each risk without asking.
_MODE_FOR = {risk: next(m for m, d in MODES.items() if d[risk] == "allow")
             for risk in ("read", "write", "danger")}


def _rule_for(permissions: Permissions, name: str) -> str | None:
    """The rule of ``permissions`` that decides ``name`` (exact, else longest prefix)."""
    if name in permissions.rules:
        return name
    best = None
    for pattern in permissions.rules:
        if pattern.endswith("*") and name.startswith(pattern[:-1]) and \
                (best is None or len(pattern) > len(best)):
            best = pattern
    return best


def _policy_part(policy: Permissions, name: str, risk: str) -> str:
    rule = _rule_for(policy, name)
    if rule is not None:
        return f"the host's policy denies it (rule \"{rule}\" = \"deny\")"
    return f"the host's policy grants at most mode \"{policy.mode}\""


def _sentence(binding: Binding, package: ModPackage, policy: Permissions,
              called: str) -> str:
    requested = package.manifest.permissions
    asked = Permissions(mode=requested.mode, rules=dict(requested.rules))
    name, risk = binding.name, binding.risk
    mode = _MODE_FOR[risk]
    manifest = f"{package.label or package.id}/{MANIFEST_NAME}"
    what = f"{called} needs the binding {name}, which is" if called != name else \
        f"{name} is"
    what += f" withheld from mod {package.id!r}"
    host_too = policy.decide(name, risk) == "deny"
    if asked.decide(name, risk) != "deny":
        return (f"{what} by the host, whatever mod.toml asks for: "
                f"{_policy_part(policy, name, risk)}, and a {risk!r} binding needs mode "
                f"\"{mode}\" (moonbox dev sets the policy with --grant)")
    rule = _rule_for(asked, name)
    if rule is not None:
        text = (f"{what}: {manifest} denies it (rule \"{rule}\" = \"deny\"); make that "
                f"rule \"allow\", or add {name} = \"allow\" under [permissions.rules]")
    else:
        default = " (the default without a [permissions] table)" \
            if "permissions" not in package.manifest.model_fields_set else ""
        text = (f"{what}: a {risk!r} binding needs mode \"{mode}\", and {manifest} asks "
                f"for \"{requested.mode}\"{default}; add to {manifest}: [permissions] "
                f"mode = \"{mode}\" (or, for this binding alone, {name} = \"allow\" under "
                "[permissions.rules])")
    if host_too:
        text += f"; {_policy_part(policy, name, risk)} as well (moonbox dev: --grant)"
    return text


def withheld(package: ModPackage, registry: Registry, policy: Permissions) -> dict[str, str]:
    """The names a mod of ``package`` would call in vain under ``policy``, each with the
    sentence a call of it raises: the bindings of ``registry`` its granted permissions
    (:func:`grant`) deny, which the host does not already explain itself
    (``explain_denial``), and the engine library functions that need them (``spawn``
    needs ``after``)."""
    granted = grant(package.manifest.permissions, policy, registry)
    out: dict[str, str] = {}
    for binding in registry:
        name = binding.name
        if binding.explain_denial or name in _INTERNAL or name in LUA_KEYWORDS or \
                granted.decide(name, binding.risk) != "deny":
            continue
        out[name] = _sentence(binding, package, policy, name)
        for alias in _LIBRARY.get(name, ()):
            out[alias] = _sentence(binding, package, policy, alias)
    return out
