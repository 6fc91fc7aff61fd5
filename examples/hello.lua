-- hello.lua: the smallest useful mod.
-- Run it:  moonbox run examples/hello.lua
report("hello from " .. _VERSION)
local sum = add(20, 22)      -- a host binding: numbers only, checked by the host
report("20 + 22 = " .. sum)
return sum
