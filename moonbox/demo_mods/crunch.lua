-- A computation too big for one tick. With preemption it is paused at the end of each
-- slice and continued on the next tick, instead of failing.
local sum = 0
for i = 1, 3000000 do
  sum = sum + i % 7
end
return sum
