-- A mod loaded read-only: it may read (add, report) but not change the world.
report("add(1, 2) = " .. add(1, 2))
-- `spawn` is a write binding: the host installed a stub that says why it is refused.
local ok, err = pcall(spawn, "goblin", 10, 0)
report("spawn refused: " .. tostring(err))
-- `nuke` is a danger binding the host did not explain: for this mod it does not exist.
report("nuke is " .. type(nuke))
return ok
