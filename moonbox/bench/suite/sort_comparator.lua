-- Sorting: table.sort with Lua comparators on records (by one key, by two keys, by a
-- computed key, descending), each result checked.
local seed = 77
local function rand(n)
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local function by_age(a, b) return a.age < b.age end
local function by_age_name(a, b)
  if a.age ~= b.age then return a.age < b.age end
  return a.name < b.name
end
local function by_score_desc(a, b) return a.score * 3 - a.age > b.score * 3 - b.age end

local function check(t, lt)
  for i = 2, #t do assert(not lt(t[i], t[i - 1]), "not sorted") end
end

local N = 3000
local total = 0
for round = 1, 12 do
  local people = {}
  for i = 1, N do
    people[i] = { name = "p" .. rand(5000), age = rand(90), score = rand(1000) }
  end
  table.sort(people, by_age)
  check(people, by_age)
  table.sort(people, by_age_name)
  check(people, by_age_name)
  table.sort(people, by_score_desc)
  check(people, by_score_desc)
  total = total + people[1].score + people[N].age + round
end
assert(total == 13037, total)
return total
