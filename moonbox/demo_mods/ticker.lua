-- A long-lived mod: yields after each tick's work; every resume gets a fresh budget.
local tick = 0
while true do
  tick = tick + 1
  report("tick " .. tick)
  if tick == 3 then return "done after 3 ticks" end
  coroutine.yield()
end
