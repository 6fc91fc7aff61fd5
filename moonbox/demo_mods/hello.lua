-- A well-behaved mod: reports what it does and returns a value.
report("hello from a sandboxed mod")
local total = add(40, 2)              -- a host binding, validated on the Python side
report("add(40, 2) = " .. total)
return { answer = total, jit = "on" }
