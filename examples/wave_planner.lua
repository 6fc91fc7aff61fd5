-- wave_planner.lua: plan a wave of enemies in a ring around a point.
-- Pure computation, the kind of work an AI-written mod does every few ticks.
-- Run it:  moonbox run examples/wave_planner.lua --json

local function ring(cx, cz, radius, count)
  local spots = {}
  for i = 1, count do
    local angle = (i - 1) / count * 2 * math.pi
    spots[i] = {
      x = math.floor((cx + radius * math.cos(angle)) * 100 + 0.5) / 100,
      z = math.floor((cz + radius * math.sin(angle)) * 100 + 0.5) / 100,
    }
  end
  return spots
end

local wave = ring(10, -4, 6, 5)
report(("planned %d goblins around (10, -4)"):format(#wave))
return wave
