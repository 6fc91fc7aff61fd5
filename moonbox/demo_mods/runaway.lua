-- An infinite loop. With the JIT on, LuaJIT compiles it into a trace where no debug hook
-- ever runs; moonbox's checks are compiled into the trace, so the step budget still holds.
local n = 0
while true do
  n = n + 1
end
