-- pickups: keeps four coins in the arena. A picked coin disappears, and a new one
-- appears somewhere else three ticks later.

local made = 0

local function drop_coin()
  made = made + 1
  coreai_world_spawn{
    prefab = "pickup", name = "coin-" .. made,
    x = math.random(-15, 15), z = math.random(-15, 15),
    properties = {kind = "coin", value = 1},
  }
end

for _ = 1, 4 do drop_coin() end

-- Players announce what they pick up; coins are ours, so we remove them.
on("picked", function(pick)
  if coreai_world_exists(pick.coin) then
    coreai_world_destroy(pick.coin)
    after(3, drop_coin)
  end
end)

-- The world tells us when it refused one of our commands, and why.
on("world:refused", function(refusal)
  report("refused " .. refusal.command .. ": " .. refusal.reason)
end)
