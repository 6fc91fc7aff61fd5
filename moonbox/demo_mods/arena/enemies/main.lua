-- enemies: a new enemy walks in from the edge every 8 ticks (at most 3). Each one chases
-- the nearest player and, once in reach, hits it, then rests for a few ticks.

local PLAYERS = {"ann", "bo", "cy"}
local MAX, SPEED, REACH, REST = 3, 1.0, 1.2, 4
local enemies, resting = {}, {}

every(8, function()
  if #enemies >= MAX then return end
  local name = "enemy-" .. (#enemies + 1)
  local angle = math.random() * 2 * math.pi
  coreai_world_spawn{prefab = "enemy", name = name,
                     x = math.cos(angle) * 20, z = math.sin(angle) * 20}
  enemies[#enemies + 1] = name
end)

-- The nearest player to (x, z): its name, position and distance.
local function nearest_player(x, z)
  local best, bx, bz, bd
  for _, p in ipairs(PLAYERS) do
    local px, _, pz = coreai_world_pos(p)
    local d = px and math.sqrt((px - x) ^ 2 + (pz - z) ^ 2)
    if d and (not bd or d < bd) then best, bx, bz, bd = p, px, pz, d end
  end
  return best, bx, bz, bd
end

on("tick", function(t)
  for _, enemy in ipairs(enemies) do
    local x, _, z = coreai_world_pos(enemy)  -- nil on the tick it was spawned
    local target, tx, tz, d = nil, nil, nil, nil
    if x and (resting[enemy] or 0) <= t then target, tx, tz, d = nearest_player(x, z) end
    if target and d <= REACH then
      emit("hit", {player = target, damage = 1, by = enemy})
      resting[enemy] = t + REST
    elseif target then
      coreai_world_change(enemy, {x = x + (tx - x) / d * SPEED, z = z + (tz - z) / d * SPEED})
    end
  end
end)
