-- Backtracking: every solution of the n-queens problem, with arrays of occupied
-- columns and diagonals, recursive placement row by row.
local function queens(n)
  local cols, diag1, diag2 = {}, {}, {}
  local solutions = 0
  local function place(row)
    if row > n then
      solutions = solutions + 1
      return
    end
    for c = 1, n do
      local d1, d2 = row + c, row - c + n
      if not cols[c] and not diag1[d1] and not diag2[d2] then
        cols[c], diag1[d1], diag2[d2] = true, true, true
        place(row + 1)
        cols[c], diag1[d1], diag2[d2] = false, false, false
      end
    end
  end
  place(1)
  return solutions
end

local total = 0
for n = 4, 11 do total = total + queens(n) end
total = total + queens(10) + queens(11)
assert(total == 7308, total)
return total
