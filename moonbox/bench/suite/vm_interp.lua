-- Dispatch: a small stack-machine interpreter running bytecode it assembled itself (a
-- loop computing sums and a Collatz walk), with opcode dispatch through an if-chain and
-- through a table of handler functions.
local PUSH, LOAD, STORE, ADD, SUB, MUL, MOD, JMP, JZ, LT, HALT, DIV2 =
  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12

-- Assembles instructions and labels ("name:") into code, jump operands resolved to
-- indexes into the code.
local function assemble(listing)
  local code, labels, fixups = {}, {}, {}
  for _, item in ipairs(listing) do
    if type(item) == "string" then
      if item:sub(-1) == ":" then labels[item:sub(1, -2)] = #code + 1
      else fixups[#code + 1] = item; code[#code + 1] = 0 end
    else
      code[#code + 1] = item
    end
  end
  for at, name in pairs(fixups) do code[at] = assert(labels[name], name) end
  return code
end

-- The sum over x in 1..limit-1 of the number of Collatz steps from x down to 1.
local function program(limit)
  return assemble({
    PUSH, 1, STORE, 1,                                  -- x = 1
    PUSH, 0, STORE, 3,                                  -- acc = 0
    "outer:", LOAD, 1, PUSH, limit, LT, JZ, "done",     -- while x < limit
    LOAD, 1, STORE, 2,                                  -- n = x
    "inner:", LOAD, 2, PUSH, 1, SUB, JZ, "next",        -- while n ~= 1
    LOAD, 2, PUSH, 2, MOD, JZ, "even",
    LOAD, 2, PUSH, 3, MUL, PUSH, 1, ADD, STORE, 2, JMP, "count",  -- n = 3n + 1
    "even:", LOAD, 2, DIV2, STORE, 2,                   -- n = n / 2
    "count:", LOAD, 3, PUSH, 1, ADD, STORE, 3, JMP, "inner",      -- acc = acc + 1
    "next:", LOAD, 1, PUSH, 1, ADD, STORE, 1, JMP, "outer",       -- x = x + 1
    "done:", LOAD, 3, HALT,
  })
end

local function run_chain(code)
  local stack, sp, vars, pc = {}, 0, {}, 1
  while true do
    local op = code[pc]
    if op == PUSH then sp = sp + 1 stack[sp] = code[pc + 1] pc = pc + 2
    elseif op == LOAD then sp = sp + 1 stack[sp] = vars[code[pc + 1]] pc = pc + 2
    elseif op == STORE then vars[code[pc + 1]] = stack[sp] sp = sp - 1 pc = pc + 2
    elseif op == ADD then stack[sp - 1] = stack[sp - 1] + stack[sp] sp = sp - 1 pc = pc + 1
    elseif op == SUB then stack[sp - 1] = stack[sp - 1] - stack[sp] sp = sp - 1 pc = pc + 1
    elseif op == MUL then stack[sp - 1] = stack[sp - 1] * stack[sp] sp = sp - 1 pc = pc + 1
    elseif op == MOD then stack[sp - 1] = stack[sp - 1] % stack[sp] sp = sp - 1 pc = pc + 1
    elseif op == DIV2 then stack[sp] = stack[sp] / 2 pc = pc + 1
    elseif op == LT then
      stack[sp - 1] = stack[sp - 1] < stack[sp] and 1 or 0 sp = sp - 1 pc = pc + 1
    elseif op == JMP then pc = code[pc + 1]
    elseif op == JZ then
      local v = stack[sp]
      sp = sp - 1
      if v == 0 then pc = code[pc + 1] else pc = pc + 2 end
    elseif op == HALT then return stack[sp]
    else error("bad opcode " .. tostring(op)) end
  end
end

local function run_table(code)
  local stack, sp, vars, pc = {}, 0, {}, 1
  local result
  local ops = {
    [PUSH] = function() sp = sp + 1 stack[sp] = code[pc + 1] pc = pc + 2 end,
    [LOAD] = function() sp = sp + 1 stack[sp] = vars[code[pc + 1]] pc = pc + 2 end,
    [STORE] = function() vars[code[pc + 1]] = stack[sp] sp = sp - 1 pc = pc + 2 end,
    [ADD] = function() stack[sp - 1] = stack[sp - 1] + stack[sp] sp = sp - 1 pc = pc + 1 end,
    [SUB] = function() stack[sp - 1] = stack[sp - 1] - stack[sp] sp = sp - 1 pc = pc + 1 end,
    [MUL] = function() stack[sp - 1] = stack[sp - 1] * stack[sp] sp = sp - 1 pc = pc + 1 end,
    [MOD] = function() stack[sp - 1] = stack[sp - 1] % stack[sp] sp = sp - 1 pc = pc + 1 end,
    [DIV2] = function() stack[sp] = stack[sp] / 2 pc = pc + 1 end,
    [LT] = function()
      stack[sp - 1] = stack[sp - 1] < stack[sp] and 1 or 0 sp = sp - 1 pc = pc + 1
    end,
    [JMP] = function() pc = code[pc + 1] end,
    [JZ] = function()
      local v = stack[sp]
      sp = sp - 1
      if v == 0 then pc = code[pc + 1] else pc = pc + 2 end
    end,
    [HALT] = function() result = stack[sp] pc = 0 end,
  }
  while pc > 0 do ops[code[pc]]() end
  return result
end

local code = program(2200)
local a = run_chain(code)
local b = run_table(code)
assert(a == b, "interpreters disagree")
local result = a + b
assert(result == 300366, result)
return result
