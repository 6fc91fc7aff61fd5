"""Mods for the cluster tests: each moves its own entity by random steps and counts the
events it hears from the others, so a lost or doubled event changes the world."""

from __future__ import annotations

from moonbox.cluster import ModSpec


def chatty_mods(n: int = 4) -> list[ModSpec]:
    out = []
    for k in range(n):
        out.append(ModSpec(f"m{k}", f'''
local me = "ball{k}"
coreai_world_spawn{{prefab = "cube", name = me, x = {k}}}
on("tick", function(t)
  local p = coreai_world_pos(me)
  if p then
    coreai_world_change(me, {{x = p.x + math.random(1, 3), y = state_get("hits") or 0,
                             z = state_get("bumps") or 0}})
  end
  if t % 3 == {k % 3} then emit("ping", {{from = {k}, t = t}}) end
end)
on("ping", function(d) state_set("hits", (state_get("hits") or 0) + 1) end)
on("bump", function(d) state_set("bumps", (state_get("bumps") or 0) + d.n) end)
'''))
    return out


def inputs(t: int) -> list[tuple[str, dict]]:
    """The host's events before tick ``t``: the same for every run."""
    return [("bump", {"n": t})] if t % 4 == 1 else []
