"""Mods for the cluster tests: each moves its own entity by random steps and counts the
events it hears from the others, so a lost or doubled event changes the world. Also what
the tests of a game on Ray share: playing the host's inputs, and the loopback check."""

from __future__ import annotations

import ipaddress
from typing import Any

import psutil

from moonbox import Budget
from moonbox.cluster import ModSpec

LOOSE = Budget(steps=200_000, wall_s=10.0, alloc_bytes="4MB", max_memory="32MB")
"""The budget of the cluster tests' games: steps bound each call; the wall budget is loose
because the machine may be loaded (shards, Ray's processes), and a call that a pause lands
in must not trip and change the world one run and not the next."""


def chatty_mods(n: int = 4) -> list[ModSpec]:
    out = []
    for k in range(n):
        out.append(ModSpec(f"m{k}", f'''
local me = "ball{k}"
coreai_world_spawn{{prefab = "cube", name = me, x = {k}}}
on("tick", function(t)
  local x = coreai_world_pos(me)
  if x then
    coreai_world_change(me, {{x = x + math.random(1, 3), y = state_get("hits") or 0,
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


def play(game: Any, first: int, last: int) -> None:
    """Ticks ``first`` to ``last`` of a sharded game, with the host's inputs, asserting
    that no mod failed (mods that run)."""
    for t in range(first, last + 1):
        for name, data in inputs(t):
            game.emit(name, data)
        answers = game.tick()
        assert not any(a["failures"] for a in answers.values()), answers


def is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def assert_sockets_on_loopback(procs: list[psutil.Process]) -> None:
    """Every inet socket of ``procs``, both ends, is on loopback, and there is one."""
    checked = 0
    for p in procs:
        try:
            conns = p.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        for c in conns:
            ips = [c.laddr.ip] + ([c.raddr.ip] if c.raddr else [])
            assert all(is_loopback(ip) for ip in ips), (p.name(), c)
            checked += 1
    assert checked > 0
