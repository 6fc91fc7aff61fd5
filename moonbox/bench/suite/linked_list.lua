-- Allocation: linked lists and a double-ended queue of small node tables: pushes and pops
-- at both ends, reversal, and a list of lists, many nodes made and dropped.
local function push_front(list, v) list.head = { value = v, next = list.head } end

local function reverse(node)
  local prev = nil
  while node do
    local nxt = node.next
    node.next = prev
    prev, node = node, nxt
  end
  return prev
end

local function sum_list(node)
  local s = 0
  while node do s = s + node.value node = node.next end
  return s
end

local Deque = {}
Deque.__index = Deque
local function deque() return setmetatable({ first = 0, last = -1, items = {} }, Deque) end
function Deque:push_back(v) self.last = self.last + 1 self.items[self.last] = v end
function Deque:push_front(v) self.first = self.first - 1 self.items[self.first] = v end
function Deque:pop_front()
  local v = self.items[self.first]
  self.items[self.first] = nil
  self.first = self.first + 1
  return v
end
function Deque:pop_back()
  local v = self.items[self.last]
  self.items[self.last] = nil
  self.last = self.last - 1
  return v
end
function Deque:size() return self.last - self.first + 1 end

local total = 0
for round = 1, 12 do
  local list = { head = nil }
  for i = 1, 20000 do push_front(list, i % 100) end
  list.head = reverse(list.head)
  total = total + sum_list(list.head)
  local d = deque()
  for i = 1, 20000 do
    if i % 3 == 0 then d:push_front({ i }) else d:push_back({ i }) end
    if i % 5 == 0 then total = total + d:pop_front()[1] % 7 end
    if i % 7 == 0 then total = total + d:pop_back()[1] % 11 end
  end
  total = total + d:size() + round
end
assert(total == 12353214, total)
return total
