"""Embedding moonbox in a game loop: one sandbox per mod, one resume per tick.

Run it:  python examples/embed.py
"""

from moonbox import Budget, Sandbox, default_bindings

MOD = """
-- A mod that works a little every tick and yields until the next one.
local tick = 0
while true do
  tick = tick + 1
  if tick % 2 == 0 then report("even tick " .. tick) end
  coroutine.yield(tick)
end
"""

# Each resume may spend 100k steps, 5 ms and 1 MB of new heap; the mod's heap is capped at 8 MB.
budget = Budget(steps=100_000, wall_s=0.005, alloc_bytes="1MB", max_memory="8MB")

with Sandbox(budget, host_functions=default_bindings()) as sandbox:
    run = sandbox.start(MOD, "@mods/ticker/main.lua")
    for game_tick in range(1, 6):
        outcome = run.resume()  # a fresh budget for every resume
        print(f"tick {game_tick}: {outcome.status} {outcome.values} {list(outcome.reports)}")
        if run.finished:
            print("mod stopped:", outcome.error)
            break
