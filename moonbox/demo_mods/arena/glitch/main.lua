-- glitch: how NOT to write a mod, kept as a warning. It behaves for four ticks, so it
-- passes the dry run `moonbox dev` gives a new version (one tick: a dry run is no proof).
-- Then, on every tick, it tries to move a player that another mod owns (the world
-- refuses: not_owner) and "waits" for a coin by spinning in a loop that never ends. The
-- step budget stops every call; after three budget trips in a row the engine quarantines
-- the mod, and the game goes on without it.

local ticks = 0

on("tick", function()
  ticks = ticks + 1
  if ticks < 5 then return end
  coreai_world_change("ann", {x = 0, z = 0})
  local spins = 0
  while spins >= 0 do
    spins = spins + 1
  end
end)
