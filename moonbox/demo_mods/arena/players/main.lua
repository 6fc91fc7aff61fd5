-- players: three runners chase the nearest coin, bank it with the scoreboard, and go
-- down after three hits from enemies.

local PLAYERS = {"ann", "bo", "cy"}
local SPEED = 1.5
local hp, taken = {}, {}

for i, name in ipairs(PLAYERS) do
  coreai_world_spawn{prefab = "player", name = name, x = i * 4 - 8}
  hp[name] = 3
end

local add_points = import("scoreboard", "add")  -- scoreboard is a dependency: it loads first

-- The nearest coin nobody took yet: its name, position and squared distance.
local function nearest_coin(x, z)
  local best, bx, bz, bd
  for _, coin in ipairs(coreai_world_find("coin-")) do
    local cx, _, cz = coreai_world_pos(coin)
    local d = cx and (cx - x) ^ 2 + (cz - z) ^ 2
    if d and not taken[coin] and (not bd or d < bd) then
      best, bx, bz, bd = coin, cx, cz, d
    end
  end
  return best, bx, bz, bd
end

on("tick", function()
  for _, name in ipairs(PLAYERS) do
    local x, _, z = coreai_world_pos(name)
    local coin, cx, cz, d = nil, nil, nil, nil
    if x and hp[name] > 0 then coin, cx, cz, d = nearest_coin(x, z) end
    if coin and d < 1 then
      taken[coin] = true
      emit("picked", {coin = coin, by = name})
      add_points({player = name, points = 1})
    elseif coin then
      local len = math.sqrt(d)
      local step = math.min(SPEED, len)
      coreai_world_change(name, {x = x + (cx - x) / len * step, z = z + (cz - z) / len * step})
    end
  end
end)

-- Enemies report their hits; a player at 0 hp lies down and stops running.
on("hit", function(hit)
  local name = hit.player
  if hp[name] and hp[name] > 0 then
    hp[name] = hp[name] - hit.damage
    if hp[name] <= 0 then
      coreai_world_change(name, {scale = 0.5})
      report(name .. " is down (hit by " .. hit.by .. ")")
    end
  end
end)
