-- moonbox metered patterns: string.find, match, gmatch and gsub written in Lua.
--
-- The native functions are single C calls: a backtracking pattern such as
-- ("a.-b"):rep(5) on a long subject runs for minutes where no budget check can stop it.
-- These versions do the same matching in Lua and pay for it as they go, by calling the
-- `charge(n)` function they are built with; when the budget runs out, `charge` raises
-- and the error passes through here untouched (nothing below catches errors).
--
-- Usage: local patterns = chunk()(charge)  -->  { find =, match =, gmatch =, gsub = }
--
-- Semantics are those of the runtime's native functions (Lua 5.1 patterns), checked
-- against them by tests/sandbox/test_patterns_lua.py: init positions, anchors, the
-- classes %a %c %d %g %l %p %s %u %w %x %z (ASCII, C locale) and their complements,
-- sets, quantifiers, captures, back-references, %b, %f, the empty-match rules of gmatch
-- and gsub, replacement strings/tables/functions, and the error messages, which name the
-- line of the mod code that made the call, as native ones do. As natively, a NUL byte
-- ends the pattern (except in a plain find). Known differences:
--   * "bad argument" messages always name the function 'find', 'match', 'gmatch' or
--     'gsub' and count arguments from the first; native names the function after the
--     call site ('f' for `local f = string.find`) and counts from the pattern for
--     method calls (`s:find({})` says "#1").
--   * One gmatch iterator keeps one search state: resuming it from inside itself (only
--     possible if `charge` yields and another coroutine calls the same iterator) gives
--     wrong results or errors from that iterator only.
--
-- Charge model: one unit is one elementary step of the matcher: entering the matcher
-- (every match attempt at a start position and every recursion), processing one
-- pattern item, testing one subject character against a single character, class or
-- '.' (a set costs its length in the pattern), comparing one character of a
-- back-reference, %b or plain find, scanning one character of the pattern or of a
-- replacement string. Linear scans are charged once they end (their length is bounded
-- by the subject); anything that can repeat is charged as it happens.
--
-- Recursion is bounded like native: more than 200 nested matcher calls raise
-- "pattern too complex", so the Lua stack never grows past that.
--
-- Cost with the JIT on, against native (test_report_slowdown_against_native; the range is
-- between a cold runtime and one where the matcher's traces are already warm):
--   gsub("%s+", " ") over 10 KB of text ......... 7x   (~0.9 ms vs 0.13 ms)
--   gmatch("(%w+)=(%w+)") over 10 KB ............ 7-18x (~5-13 ms vs 0.75 ms)
--   match("^%s*(.-)%s*$") on a 200-byte line .... 11-20x (~90-150 us vs 8 us)
--   find(s, literal, 1, true) over 10 KB ........ ~3 ns per byte scanned; native uses
--     memchr and is 100x+ faster here, but its worst case is quadratic and unmetered.
-- Most of the gap is the recursive matcher running in the interpreter (its loops compile;
-- the recursion mostly does not).

local type, error, tostring, tonumber, select = type, error, tostring, tonumber, select
local s_byte, s_sub, s_char = string.byte, string.sub, string.char
local concat = table.concat
local floor = math.floor

-- Byte codes of the characters the matcher looks at.
local B_LPAREN, B_RPAREN, B_PERCENT, B_DOT = 40, 41, 37, 46
local B_LBRACKET, B_RBRACKET, B_CARET, B_DOLLAR = 91, 93, 94, 36
local B_STAR, B_PLUS, B_DASH, B_QUESTION = 42, 43, 45, 63
local B_0, B_9, B_b, B_f = 48, 57, 98, 102

local MAX_DEPTH = 200         -- nested matcher calls; native raises past the same count
local MAX_CAPTURES = 32
local CAP_UNFINISHED, CAP_POSITION = -1, -2  -- capture lengths with a special meaning
local INT32_MIN = -2147483648

-------------------------------------------------------------------------------------------
-- Character classes, by class letter: a table from byte (0-255) to boolean.
-- ASCII with C-locale rules; the upper-case letter is the complement.
-------------------------------------------------------------------------------------------
local CLASSES = {}
do
  local function is_upper(c) return c >= 65 and c <= 90 end
  local function is_lower(c) return c >= 97 and c <= 122 end
  local function is_digit(c) return c >= 48 and c <= 57 end
  local function is_alpha(c) return is_upper(c) or is_lower(c) end
  local function is_alnum(c) return is_alpha(c) or is_digit(c) end
  local function is_graph(c) return c >= 33 and c <= 126 end
  local definitions = {
    "a", is_alpha,
    "c", function(c) return c < 32 or c == 127 end,
    "d", is_digit,
    "g", is_graph,
    "l", is_lower,
    "p", function(c) return is_graph(c) and not is_alnum(c) end,
    "s", function(c) return c == 32 or (c >= 9 and c <= 13) end,
    "u", is_upper,
    "w", is_alnum,
    "x", function(c) return is_digit(c) or (c >= 97 and c <= 102) or (c >= 65 and c <= 70) end,
    "z", function(c) return c == 0 end,
  }
  for i = 1, #definitions, 2 do
    local letter, test = s_byte(definitions[i]), definitions[i + 1]
    local yes, no = {}, {}
    for c = 0, 255 do
      yes[c] = test(c)
      no[c] = not yes[c]
    end
    CLASSES[letter] = yes
    CLASSES[letter - 32] = no  -- the upper-case letter
  end
end

-- Does byte c match `%<cl>`? Letters that are not classes, and all other characters,
-- stand for themselves (`%.` is a dot).
local function class_has(cl, c)
  local t = CLASSES[cl]
  if t then return t[c] end
  return cl == c
end

-- Does byte c belong to the set pat[i..j], where pat[i] is '[' and pat[j] its ']'?
local function in_set(pat, i, j, c)
  local found = true
  i = i + 1
  if s_byte(pat, i) == B_CARET then
    found = false
    i = i + 1
  end
  while i < j do
    local pc = s_byte(pat, i)
    if pc == B_PERCENT then
      if class_has(s_byte(pat, i + 1), c) then return found end
      i = i + 2
    elseif s_byte(pat, i + 1) == B_DASH and i + 2 < j then
      if pc <= c and c <= s_byte(pat, i + 2) then return found end
      i = i + 3
    else
      if pc == c then return found end
      i = i + 1
    end
  end
  return not found
end

-- Does byte c match the single-character item pat[i..ep-1] (a char, '.', %x or a set)?
local function single_match(pat, i, ep, c)
  local pc = s_byte(pat, i)
  if pc == B_DOT then return true end
  if pc == B_PERCENT then return class_has(s_byte(pat, i + 1), c) end
  if pc == B_LBRACKET then return in_set(pat, i, ep - 1, c) end
  return pc == c
end

-- Index just past the single-character item that starts at pat[i].
--
-- Error levels: a function that takes `level` raises its errors with error(msg, level),
-- which names the line of the mod code that called the public function; it passes
-- level + 1 to the helpers it calls.
local function item_end(pat, plen, i, level)
  local c = s_byte(pat, i)
  i = i + 1
  if c == B_PERCENT then
    if i > plen then error("malformed pattern (ends with '%')", level) end
    return i + 1
  elseif c == B_LBRACKET then
    if s_byte(pat, i) == B_CARET then i = i + 1 end
    repeat  -- the first character is never the closing ']'
      if i > plen then error("malformed pattern (missing ']')", level) end
      c = s_byte(pat, i)
      i = i + 1
      if c == B_PERCENT then i = i + 1 end  -- skip the escaped character
    until s_byte(pat, i) == B_RBRACKET
    return i + 1
  end
  return i
end

-------------------------------------------------------------------------------------------
-- The matcher. `ms` holds one search: src/slen (subject), pat/plen (pattern), ncap (the
-- number of captures) and the captures themselves: capture k starts at ms[2k-1] and has
-- length ms[2k] (or CAP_UNFINISHED / CAP_POSITION).
-------------------------------------------------------------------------------------------
return function(charge)
  local match

  -- Matches pat[pi..] against src[si..] and returns the index just past the match, or
  -- nil. `depth` counts nested calls; every recursive call below is a plain (non-tail)
  -- call, so the caller of the public function is always at stack level depth + 2.
  match = function(ms, si, pi, depth)
    if depth > MAX_DEPTH then error("pattern too complex", depth + 2) end
    local src, slen, pat, plen = ms.src, ms.slen, ms.pat, ms.plen
    while true do
      charge(1)
      if pi > plen then return si end
      local pc, nc = s_byte(pat, pi, pi + 1)

      if pc == B_LPAREN then  -- open a capture: '()' captures the position
        local n = ms.ncap
        if n >= MAX_CAPTURES then error("too many captures", depth + 2) end
        local kind, next_pi = CAP_UNFINISHED, pi + 1
        if nc == B_RPAREN then kind, next_pi = CAP_POSITION, pi + 2 end
        ms[2 * n + 1], ms[2 * n + 2] = si, kind
        ms.ncap = n + 1
        local e = match(ms, si, next_pi, depth + 1)
        if not e then ms.ncap = n end
        return e

      elseif pc == B_RPAREN then  -- close the innermost open capture
        local k = ms.ncap
        while k > 0 and ms[2 * k] ~= CAP_UNFINISHED do k = k - 1 end
        if k == 0 then error("invalid pattern capture", depth + 2) end
        ms[2 * k] = si - ms[2 * k - 1]
        local e = match(ms, si, pi + 1, depth + 1)
        if not e then ms[2 * k] = CAP_UNFINISHED end
        return e

      elseif pc == B_DOLLAR and pi == plen then  -- '$' anchors only at the very end
        if si > slen then return si end
        return nil

      elseif pc == B_PERCENT and nc == B_b then  -- %bxy: a balanced run from x to y
        if pi + 3 > plen then error("unbalanced pattern", depth + 2) end
        local open, close = s_byte(pat, pi + 2, pi + 3)
        if s_byte(src, si) ~= open then return nil end
        local nesting, j = 1, si + 1
        while j <= slen do
          local c = s_byte(src, j)
          if c == close then
            nesting = nesting - 1
            if nesting == 0 then break end
          elseif c == open then
            nesting = nesting + 1
          end
          j = j + 1
        end
        charge(j - si)
        if j > slen then return nil end
        si, pi = j + 1, pi + 4

      elseif pc == B_PERCENT and nc == B_f then  -- %f[set]: frontier, never consumes
        pi = pi + 2
        if s_byte(pat, pi) ~= B_LBRACKET then
          error("missing '[' after '%f' in pattern", depth + 2)
        end
        local ep = item_end(pat, plen, pi, depth + 3)
        charge(ep - pi)
        local prev = si > 1 and s_byte(src, si - 1) or 0   -- the ends count as '\0'
        local cur = si <= slen and s_byte(src, si) or 0
        if in_set(pat, pi, ep - 1, prev) or not in_set(pat, pi, ep - 1, cur) then
          return nil
        end
        pi = ep

      elseif pc == B_PERCENT and nc and nc >= B_0 and nc <= B_9 then  -- back-reference
        local k = nc - B_0
        local len = ms[2 * k]
        if k == 0 or k > ms.ncap or len == CAP_UNFINISHED then
          error("invalid capture index", depth + 2)
        end
        -- A position capture never matches as a back-reference.
        if len == CAP_POSITION or slen - si + 1 < len then return nil end
        local start = ms[2 * k - 1]
        charge(len)
        for j = 0, len - 1 do
          if s_byte(src, start + j) ~= s_byte(src, si + j) then return nil end
        end
        si, pi = si + len, pi + 2

      else  -- a single-character item, maybe followed by a quantifier
        local ep = item_end(pat, plen, pi, depth + 3)
        local cost = 1  -- units per character test (a set costs its length)
        if pc == B_LBRACKET then
          cost = ep - pi
          charge(cost)
        end
        local m = si <= slen and single_match(pat, pi, ep, s_byte(src, si))
        local q = s_byte(pat, ep)

        if q == B_QUESTION then  -- optional: try with the character, then without
          if m then
            local e = match(ms, si + 1, ep + 1, depth + 1)
            if e then return e end
          end
          pi = ep + 1

        elseif q == B_STAR or q == B_PLUS then  -- greedy: longest run first, then back off
          if q == B_PLUS then
            if not m then return nil end
            si = si + 1
          end
          local n = 0
          while si + n <= slen and single_match(pat, pi, ep, s_byte(src, si + n)) do
            n = n + 1
          end
          charge((n + 1) * cost)
          while n >= 0 do
            local e = match(ms, si + n, ep + 1, depth + 1)
            if e then return e end
            n = n - 1
          end
          return nil

        elseif q == B_DASH then  -- lazy: shortest run first, then grow
          while true do
            local e = match(ms, si, ep + 1, depth + 1)
            if e then return e end
            charge(cost)
            if si <= slen and single_match(pat, pi, ep, s_byte(src, si)) then
              si = si + 1
            else
              return nil
            end
          end

        else  -- exactly one
          if not m then return nil end
          si, pi = si + 1, ep
        end
      end
    end
  end

  -------------------------------------------------------------------------------------------
  -- Captures and arguments.
  -------------------------------------------------------------------------------------------

  -- The value of capture k (1-based) of a successful match src[s..e-1]. With no captures,
  -- capture 1 is the whole match.
  local function capture(ms, k, s, e, level)
    if k > ms.ncap then
      if k == 1 then return s_sub(ms.src, s, e - 1) end
      error("invalid capture index", level)
    end
    local len = ms[2 * k]
    if len == CAP_UNFINISHED then error("unfinished capture", level) end
    local start = ms[2 * k - 1]
    if len == CAP_POSITION then return start end
    return s_sub(ms.src, start, start + len - 1)
  end

  local function captures_from(ms, k, n)
    if k == n then return capture(ms, k) end
    return capture(ms, k), captures_from(ms, k + 1, n)
  end

  -- All captures of a successful match src[s..e-1]; the whole match when there are none
  -- and `s` is given (find passes nil: it returns no captures then).
  local function captures(ms, s, e, level)
    local n = ms.ncap
    if n == 0 then
      if s then return s_sub(ms.src, s, e - 1) end
      return
    end
    for k = 1, n do
      if ms[2 * k] == CAP_UNFINISHED then error("unfinished capture", level) end
    end
    return captures_from(ms, 1, n)
  end

  local function bad_argument(n, fname, message, level)
    error("bad argument #" .. n .. " to '" .. fname .. "' (" .. message .. ")", level)
  end

  -- Argument n as a string (numbers are converted); `count` is the number of arguments.
  local function string_arg(v, n, fname, count, level)
    local t = type(v)
    if t == "string" then return v end
    if t == "number" then return tostring(v) end
    if n > count then t = "no value" end
    bad_argument(n, fname, "string expected, got " .. t, level + 1)
  end

  local function number_arg(v, n, fname, level)
    local x = v
    if type(v) == "string" then x = tonumber(v) end
    if type(x) ~= "number" then
      bad_argument(n, fname, "number expected, got " .. type(v), level + 1)
    end
    return x
  end

  -- A position argument: truncated toward zero, INT32_MIN when out of the int32 range.
  local function int32_arg(v, n, fname, level)
    local x = number_arg(v, n, fname, level + 1)
    if x ~= x or x >= 2147483648 or x <= -2147483649 then return INT32_MIN end
    if x >= 0 then return floor(x) end
    return -floor(-x)
  end

  -- gsub's limit: truncated to 64 bits, of which the low 32 count (signed).
  local function limit_arg(v, level)
    local x = number_arg(v, 4, "gsub", level + 1)
    if x ~= x or x >= 2 ^ 63 or x < -2 ^ 63 then return 0 end
    if x >= 0 then x = floor(x) else x = -floor(-x) end
    x = x % 4294967296
    if x >= 2147483648 then x = x - 4294967296 end
    return x
  end

  -- The pattern as the matcher sees it: it ends at the first NUL byte.
  local function effective_pattern(p)
    local plen = #p
    charge(plen)
    for i = 1, plen do
      if s_byte(p, i) == 0 then return s_sub(p, 1, i - 1) end
    end
    return p
  end

  -- Does p use any magic character? (If not, find does a plain search.)
  local function has_magic(p)
    local plen = #p
    charge(plen)
    for i = 1, plen do
      local c = s_byte(p, i)
      if c == B_CARET or c == B_DOLLAR or c == B_STAR or c == B_PLUS or c == B_QUESTION
        or c == B_DOT or c == B_LPAREN or c == B_LBRACKET or c == B_PERCENT or c == B_DASH then
        return true
      end
    end
    return false
  end

  local function plain_find(s, slen, p, plen, si)
    if plen == 0 then return si, si - 1 end
    local first = s_byte(p, 1)
    local i = si
    local last = slen - plen + 1
    while i <= last do
      if s_byte(s, i) == first then
        local j = 1
        while j < plen and s_byte(s, i + j) == s_byte(p, j + 1) do j = j + 1 end
        charge(j)
        if j == plen then
          charge(i - si)
          return i, i + plen - 1
        end
      end
      i = i + 1
    end
    charge(i - si)
    return nil
  end

  local function new_state(s, p)
    return { src = s, slen = #s, pat = p, plen = #p, ncap = 0 }
  end

  -------------------------------------------------------------------------------------------
  -- The public functions. find and match share `search`, which they tail-call, so its
  -- caller is the mod's code (stack level 2).
  -------------------------------------------------------------------------------------------
  local function search(is_find, fname, ...)
    local s, p, init, plain = ...
    if type(s) ~= "string" then s = string_arg(s, 1, fname, select("#", ...), 3) end
    if type(p) ~= "string" then p = string_arg(p, 2, fname, select("#", ...), 3) end
    local slen = #s
    local start = 0  -- 0-based
    if init ~= nil then
      start = int32_arg(init, 3, fname, 3)
      if start < 0 then start = start + slen else start = start - 1 end
      if start < 0 then start = 0 end
      if start > slen then start = slen end
    end
    local si = start + 1

    if is_find and (plain or not has_magic(p)) then
      return plain_find(s, slen, p, #p, si)
    end

    p = effective_pattern(p)
    local pi, anchored = 1, s_byte(p, 1) == B_CARET
    if anchored then pi = 2 end
    local ms = new_state(s, p)
    repeat
      ms.ncap = 0
      local e = match(ms, si, pi, 1)
      if e then
        if is_find then return si, e - 1, captures(ms, nil, nil, 3) end
        return captures(ms, si, e, 2)
      end
      si = si + 1
    until anchored or si > slen + 1
    return nil
  end

  local function find(...) return search(true, "find", ...) end
  local function match_(...) return search(false, "match", ...) end

  -- '^' is not an anchor for gmatch: it matches a literal '^'.
  local function gmatch(...)
    local s, p = ...
    if type(s) ~= "string" then s = string_arg(s, 1, "gmatch", select("#", ...), 3) end
    if type(p) ~= "string" then p = string_arg(p, 2, "gmatch", select("#", ...), 3) end
    local ms = new_state(s, effective_pattern(p))
    local pos = 1
    return function()
      local si, slen = pos, ms.slen
      while si <= slen + 1 do
        ms.ncap = 0
        local e = match(ms, si, 1, 1)
        if e then
          pos = e
          if e == si then pos = e + 1 end  -- an empty match moves on by one
          return captures(ms, si, e, 2)
        end
        si = si + 1
      end
    end
  end

  -- Appends the replacement string for the match src[s..e-1] to parts; returns the new
  -- count of parts. '%0'-'%9' insert captures, '%' before anything else inserts that
  -- character (a '%' at the very end inserts a NUL byte, as native does).
  local function add_string(ms, parts, np, s, e, repl, level)
    local rlen = #repl
    charge(rlen)
    local i, lit = 1, 1
    while i <= rlen do
      if s_byte(repl, i) == B_PERCENT then
        if i > lit then np = np + 1; parts[np] = s_sub(repl, lit, i - 1) end
        local d = s_byte(repl, i + 1)
        local piece
        if d == nil then
          piece = "\0"
        elseif d == B_0 then
          piece = s_sub(ms.src, s, e - 1)
        elseif d > B_0 and d <= B_9 then
          piece = capture(ms, d - B_0, s, e, level + 1)
          if type(piece) == "number" then piece = tostring(piece) end
        else
          piece = s_char(d)
        end
        np = np + 1
        parts[np] = piece
        i = i + 2
        lit = i
      else
        i = i + 1
      end
    end
    if rlen >= lit then np = np + 1; parts[np] = s_sub(repl, lit, rlen) end
    return np
  end

  local function add_value(ms, parts, np, s, e, repl, kind, level)
    if kind == "string" then return add_string(ms, parts, np, s, e, repl, level) end  -- tail call
    local v
    if kind == "table" then
      v = repl[capture(ms, 1, s, e, level + 1)]
    else
      v = repl(captures(ms, s, e, level + 1))
    end
    local t = type(v)
    if not v then
      v = s_sub(ms.src, s, e - 1)  -- false or nil: keep the match
    elseif t == "number" then
      v = tostring(v)
    elseif t ~= "string" then
      error("invalid replacement value (a " .. t .. ")", level)
    end
    np = np + 1
    parts[np] = v
    return np
  end

  local function gsub(...)
    local s, p, repl, max_n = ...
    if type(s) ~= "string" then s = string_arg(s, 1, "gsub", select("#", ...), 3) end
    if type(p) ~= "string" then p = string_arg(p, 2, "gsub", select("#", ...), 3) end
    local slen = #s
    local limit = slen + 1
    if max_n ~= nil then limit = limit_arg(max_n, 3) end
    local kind = type(repl)
    if kind == "number" then
      repl, kind = tostring(repl), "string"
    elseif kind ~= "string" and kind ~= "table" and kind ~= "function" then
      bad_argument(3, "gsub", "string/function/table expected", 3)
    end

    p = effective_pattern(p)
    local pi, anchored = 1, s_byte(p, 1) == B_CARET
    if anchored then pi = 2 end
    local ms = new_state(s, p)
    local parts, np = {}, 0
    local si, copied, n = 1, 1, 0  -- src[copied..si-1] is kept text not yet in parts
    while n < limit do
      ms.ncap = 0
      local e = match(ms, si, pi, 1)
      if e then
        n = n + 1
        if si > copied then np = np + 1; parts[np] = s_sub(s, copied, si - 1) end
        np = add_value(ms, parts, np, si, e, repl, kind, 3)
        copied = e
      end
      if e and e > si then
        si = e
      elseif si <= slen then
        si = si + 1  -- no match or an empty one: keep this character
      else
        break
      end
      if anchored then break end
    end
    if n == 0 then return s, 0 end
    if slen >= copied then np = np + 1; parts[np] = s_sub(s, copied, slen) end
    return concat(parts, "", 1, np), n
  end

  return { find = find, match = match_, gmatch = gmatch, gsub = gsub }
end
