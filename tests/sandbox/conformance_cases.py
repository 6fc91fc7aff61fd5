"""The conformance cases: Lua the manual describes, each run plainly and in a sandbox.

Each case is a chunk body (see conformance.py): it returns values or raises, and both are
compared, messages and positions included. Calls whose errors are compared are made in
statements of their own (``local x = f()``), not as ``return f()``: a tail call has no
caller line, in LuaJIT as here, and the cases mean to check the line.

Cases a sandbox deliberately answers otherwise are in DIFFERENT, each with the name of its
reason in docs/conformance.md; the suite checks that each of them still differs.
"""

from __future__ import annotations

from conformance import Case

_CASES: dict[str, str] = {}


def case(name: str, source: str) -> None:
    assert name not in _CASES, name
    _CASES[name] = source


# ------------------------------------------------------------------------------------------
# Strings
# ------------------------------------------------------------------------------------------
case("string.sub", "local s = 'hello world' return s:sub(1, 5), s:sub(-5), s:sub(7), s:sub(0), s:sub(5, 2), s:sub(-100, 100), s:sub(3, -3)")
case("string.sub_floats", "return ('abcdef'):sub(1.9, 3.2), ('abcdef'):sub('2', '4')")
case("string.sub_bad_arg", "local x = string.sub('abc', false)")
case("string.sub_no_value", "local x = string.sub()")
case("string.sub_method_bad_arg", "local s = 'abc'\nlocal x = s:sub({})")
case("string.sub_nil_start", "local x = ('abc'):sub(nil)")
case("string.byte", "local s = 'ABC' return s:byte(), s:byte(2), s:byte(1, -1), s:byte(10), s:byte(-1), s:byte(0)")
case("string.byte_bad", "local x = string.byte({})")
case("string.char", "return string.char(72, 105), string.char(), #string.char(0, 255)")
case("string.char_bad", "local x = string.char(256)")
case("string.char_type", "local x = string.char('x')")
case("string.rep", "return ('ab'):rep(3), ('x'):rep(0), ('x'):rep(-1), ('ab'):rep(3, '-'), string.rep('', 5)")
case("string.rep_no_value", "local x = string.rep()")
case("string.rep_missing_count", "local x = string.rep('x')")
case("string.rep_bad_count", "local x = string.rep('x', 'y')")
case("string.upper_lower", "return ('MiXeD 123'):upper(), ('MiXeD 123'):lower(), string.upper(12), string.lower('')")
case("string.lower_no_value", "local x = string.lower()")
case("string.upper_table", "local x = string.upper({})")
case("string.reverse", "return ('abc'):reverse(), (''):reverse(), string.reverse(123)")
case("string.len", "return #'abc', string.len(''), string.len('\\0\\0'), string.len(123)")
case("string.len_bad", "local x = string.len()")
case("string.format_basic", "return string.format('%d %5d %-5d| %05d %x %X %o', 42, 42, 42, 42, 255, 255, 8)")
case("string.format_floats", "return string.format('%.3f %e %g %g %g', 3.14159, 12345.678, 0.0001, 1e20, 100)")
case("string.format_strings", "return string.format('%s|%10s|%-10s|%.2s', 'abc', 'abc', 'abc', 'abc')")
case("string.format_q", "return string.format('%q', 'a\\nb\"c\\\\\\0d\\r')")
case("string.format_c", "return string.format('%c%c%c', 76, 117, 97)")
case("string.format_percent", "return string.format('100%% %s', 'sure')")
case("string.format_numbers_as_s", "return string.format('%s %s %s', 1, 1.5, -0.0)")
case("string.format_bool_nil", "return string.format('%s %s', true, nil)")
case("string.format_bad_option", "local x = string.format('%y', 1)")
case("string.format_missing_arg", "local x = string.format('%d %d', 1)")
case("string.format_bad_number", "local x = string.format('%d', 'x')")
case("string.format_table_d", "local x = string.format('%d', {})")
case("string.format_no_value", "local x = string.format()")
case("string.format_tostring_meta", "local t = setmetatable({}, {__tostring = function() return 'T!' end}) return string.format('[%s] [%6s]', t, t)")
case("string.format_tostring_number", "local t = setmetatable({}, {__tostring = function() return 12 end}) return string.format('%s|%5s', t, t)")
case("string.format_int_range", "return string.format('%d', 2^31), string.format('%d', -2^31), string.format('%.0f', 2^53)")
case("string.coercion", "return '10' + 5, '3' * '4', 10 .. 20, '0x10' + 0, ' 5 ' * 2")
case("string.coercion_error", "local x = 'abc' + 1")
case("string.concat_error", "local t = {}\nlocal x = 'a' .. t")
case("string.compare", "return 'a' < 'b', 'abc' < 'abd', 'Z' < 'a', '' < 'a', 'a\\0b' < 'a\\0c'")
case("string.compare_error", "local x = 'a' < 1")
case("string.escapes", "return '\\65\\066\\x43', '\\z   x', 'a\\\nb', #'\\0'")
case("string.long_brackets", "local s = [==[\na]]b]=]c]==] return s, #s")
case("string.method_on_number", "local x = (5):rep(2)")

# ------------------------------------------------------------------------------------------
# Patterns
# ------------------------------------------------------------------------------------------
case("pattern.find_plain", "local s = 'a.b.c' return s:find('.', 1, true), s:find('.b', 1, true), s:find('x', 1, true), s:find('', 10, true)")
case("pattern.find_magic", "local s = 'hello world' return s:find('o'), s:find('o', 6), s:find('l+'), s:find('^h'), s:find('^w'), s:find('d$')")
case("pattern.find_captures", "return ('key = value'):find('(%w+)%s*=%s*(%w+)')")
case("pattern.find_init", "local s = 'aaa' return s:find('a', -1), s:find('a', -10), s:find('a', 4), s:find('', 4), s:find('', 5)")
case("pattern.match", "return ('  trim me  '):match('^%s*(.-)%s*$'), ('2024-01-15'):match('(%d+)-(%d+)-(%d+)'), ('abc'):match('x')")
case("pattern.match_position_capture", "return ('hello'):match('()ll()')")
case("pattern.classes", "local s = 'aZ9 _.\\t\\n' local out = {} for _, c in ipairs({'%a', '%d', '%l', '%u', '%s', '%w', '%p', '%c', '%x'}) do out[#out + 1] = c .. '=' .. select(2, s:gsub(c, '')) end return table.concat(out, ' ')")
case("pattern.sets", "return ('abc123XYZ'):gsub('[a-c1-2]', '.'), ('a-b'):gsub('[%-]', '+'), ('x]y'):gsub('[]]', '!'), ('abc'):gsub('[^b]', '_')")
case("pattern.quantifiers", "return ('aaab'):match('a-b'), ('aaab'):match('a*'), ('b'):match('a?b'), ('aaa'):match('a+'), (''):match('a*')")
case("pattern.balanced", "return ('f(a(b)c) (d)'):match('%b()'), ('[[x]]'):match('%b[]')")
case("pattern.frontier", "return ('THE (quick) fox'):gsub('%f[%a]%a+', 'W')")
case("pattern.backref", "return ('say \"hi\" or \\'yo\\''):match('([\"\\'])(.-)%1')")
case("pattern.gmatch", "local out = {} for k, v in ('a=1, b=2, c=3'):gmatch('(%w+)=(%w+)') do out[#out + 1] = k .. v end return table.concat(out, ';')")
case("pattern.gmatch_empty", "local out = {} for w in ('abc'):gmatch('x*') do out[#out + 1] = '[' .. w .. ']' end return table.concat(out)")
case("pattern.gmatch_anchor", "local out = {} for w in ('^a^b'):gmatch('^.') do out[#out + 1] = w end return table.concat(out, ',')")
case("pattern.gsub_string", "return ('hello world'):gsub('o', '0'), ('hello'):gsub('', '-'), ('abc'):gsub('%w', '%0%0'), ('abc'):gsub('(a)(b)', '%2%1')")
case("pattern.gsub_limit", "return ('aaaa'):gsub('a', 'b', 2), ('aaaa'):gsub('a', 'b', 0), ('aaaa'):gsub('a', 'b', -1)")
case("pattern.gsub_function", "return ('1 2 3'):gsub('%d', function(d) return d * 2 end), ('abc'):gsub('.', function(c) if c == 'b' then return nil end return c:upper() end)")
case("pattern.gsub_table", "return ('$a $b $c'):gsub('%$(%w)', {a = 'A', b = false, c = 3})")
case("pattern.gsub_table_meta", "local t = setmetatable({}, {__index = function(_, k) return k:upper() end}) return ('x y'):gsub('%w', t)")
case("pattern.gsub_anchor", "return ('aaa'):gsub('^a', 'b')")
case("pattern.gsub_percent_end", "return ('x'):gsub('x', '%')")
case("pattern.gsub_bad_capture_index", "local x = ('abc'):gsub('a', '%2')")
case("pattern.gsub_bad_percent", "local x = ('abc'):gsub('a', '%x')")
case("pattern.gsub_bad_repl_value", "local x = ('abc'):gsub('b', {b = {}})")
case("pattern.gsub_bad_repl_type", "local x = ('abc'):gsub('b', true)")
case("pattern.gsub_callback_error", "local x = ('abc'):gsub('b', function()\nerror('in callback')\nend)")
case("pattern.gsub_callback_error_level2", "local ok, e = pcall(string.gsub, 'abc', 'b', function() error('lv', 2) end) return e")
case("pattern.malformed_end", "local x = ('abc'):find('%')")
case("pattern.malformed_set", "local x = ('abc'):find('[a')")
case("pattern.unfinished_capture", "local x = ('abc'):match('(a')")
case("pattern.invalid_capture", "local x = ('abc'):match('%1')")
case("pattern.frontier_missing_set", "local x = ('abc'):find('%f')")
case("pattern.unbalanced", "local x = ('abc'):find('%b')")
case("pattern.bad_init", "local x = ('abc'):find('b', {})")
case("pattern.long_subject_metered", "local s = ('ab '):rep(400) .. 'end' return s:find('(%a+)%s+end'), select(2, s:gsub('%s+', ' ')), #s:gsub('b', 'BB')")
case("pattern.long_subject_errors", "local s = ('ab '):rep(400)\nlocal x = s:gsub('(a+', 'x')")
case("pattern.long_subject_callback", "local s = ('ab '):rep(400) local n = 0 local r = s:gsub('(%a+)', function(w) n = n + #w return w:upper() end) return n, r:sub(1, 12)")
case("pattern.long_subject_gmatch", "local s = ('k=v; '):rep(300) local n = 0 for k, v in s:gmatch('(%w+)=(%w+)') do n = n + #k + #v end return n")
case("pattern.number_pattern", "return ('a1.5b'):find(1.5), ('x10y'):gsub(10, 'ten')")
case("pattern.nul_in_pattern", "return ('a\\0b'):find('\\0', 1, true), ('a\\0b'):find('%z')")

# ------------------------------------------------------------------------------------------
# Tables
# ------------------------------------------------------------------------------------------
case("table.insert_remove", "local t = {} table.insert(t, 'a') table.insert(t, 1, 'b') table.insert(t, 2, 'c') local r = table.remove(t, 1) local l = table.remove(t) return r, l, show(t), table.remove({}), #t")
case("table.insert_bad_table", "local x = table.insert(nil, 1)")
case("table.insert_no_value", "table.insert()")
case("table.insert_wrong_count", "table.insert({}, 1, 2, 3)")
case("table.insert_bad_pos", "table.insert({}, 'x', 1)")
case("table.insert_far", "local t = {1, 2} table.insert(t, 10, 'x') return show(t)")
case("table.remove_positions", "local t = {1, 2, 3} return table.remove(t, 5), table.remove(t, 0), table.remove(t, 3), show(t)")
case("table.remove_no_value", "local x = table.remove()")
case("table.remove_bad_pos", "local x = table.remove({}, 'x')")
case("table.concat", "return table.concat({1, 2, 3}), table.concat({'a', 'b'}, ', '), table.concat({1, 'x', 2.5}, '-', 2, 3), table.concat({}, 'x'), table.concat({'a'}, 'x', 3, 2)")
case("table.concat_invalid_value", "local x = table.concat({1, {}, 3})")
case("table.concat_nil_hole", "local x = table.concat({1, 2}, ',', 1, 3)")
case("table.concat_bad_sep", "local x = table.concat({1}, {})")
case("table.concat_no_value", "local x = table.concat()")
case("table.concat_string_range", "return table.concat({'a', 'b', 'c'}, '', '2', '3')")
case("table.sort_numbers", "local t = {5, 2, 8, 1, 9, 3} table.sort(t) return table.concat(t, ',')")
case("table.sort_strings", "local t = {'pear', 'apple', 'fig', 'Banana'} table.sort(t) return table.concat(t, ',')")
case("table.sort_comparator", "local t = {5, 2, 8, 1, 9, 3} table.sort(t, function(a, b) return a > b end) return table.concat(t, ',')")
case("table.sort_ties_order", "local t = {} for i = 1, 40 do t[i] = {k = i % 4, id = i} end table.sort(t, function(a, b) return a.k < b.k end) local out = {} for i = 1, #t do out[i] = t[i].id end return table.concat(out, ',')")
case("table.sort_ties_order_large", "local t = {} for i = 1, 5000 do t[i] = {k = (i * 7919) % 13, id = i} end table.sort(t, function(a, b) return a.k < b.k end) local h = 0 for i = 1, #t do h = (h * 31 + t[i].id) % 1000000007 end return h")
case("table.sort_large_numbers", "local t = {} for i = 1, 6000 do t[i] = (i * 7919) % 6007 end table.sort(t) local ok = true for i = 2, #t do if t[i - 1] > t[i] then ok = false end end return ok, t[1], t[#t]")
case("table.sort_metamethod_lt", "local mt = {__lt = function(a, b) return a.v < b.v end} local t = {} for i, v in ipairs({3, 1, 2}) do t[i] = setmetatable({v = v}, mt) end table.sort(t) return t[1].v, t[2].v, t[3].v")
case("table.sort_compare_error", "local x = table.sort({{}, {}})")
case("table.sort_mixed_error", "local x = table.sort({1, 'x', 2})")
case("table.sort_invalid_order", "local t = {} for i = 1, 20 do t[i] = i end\nlocal x = table.sort(t, function(a, b) return true end)")
case("table.sort_comparator_error", "local x = table.sort({3, 2, 1}, function(a, b)\nerror('cmp')\nend)")
case("table.sort_comparator_error_level2", "local ok, e = pcall(table.sort, {3, 2, 1}, function(a, b) error('lv', 2) end) return e")
case("table.sort_bad_comparator", "local x = table.sort({}, 1)")
case("table.sort_no_value", "local x = table.sort()")
case("table.sort_comparator_calls", "local n = 0 local t = {} for i = 1, 30 do t[i] = (i * 17) % 31 end table.sort(t, function(a, b) n = n + 1 return a < b end) return n")
case("table.sort_comparator_sees", "local seen = {} local t = {4, 1, 3, 2, 5} table.sort(t, function(a, b) seen[#seen + 1] = a .. '<' .. b return a < b end) return table.concat(seen, ' ')")
case("table.maxn_getn", "local t = {1, 2, 3, [10] = 'x'} return table.maxn(t), table.getn({1, 2}), #t")
case("table.foreachi", "local out = {} local r = table.foreachi({'a', 'b', 'c'}, function(i, v) out[#out + 1] = i .. v if i == 2 then return 'stop' end end) return r, table.concat(out)")
case("table.foreach", "local n = 0 table.foreach({a = 1, b = 2, 3}, function(k, v) n = n + v end) return n")
case("table.foreach_bad", "local x = table.foreach({}, 1)")
case("table.foreach_error_level2", "local ok, e = pcall(table.foreach, {1}, function() error('lv', 2) end) return e")
case("table.foreachi_error_level2", "local ok, e = pcall(table.foreachi, {1}, function() error('lv', 2) end) return e")
case("table.move", "local a = {1, 2, 3, 4, 5} table.move(a, 2, 4, 1) local b = table.move({1, 2, 3}, 1, 3, 2, {}) return table.concat(a, ','), show(b)")
case("table.move_bad", "local x = table.move({}, 'a', 2, 1)")
case("table.unpack", "return unpack({1, 2, 3}), unpack({1, 2, 3}, 2), unpack({1, 2, 3}, 2, 3), select('#', unpack({}, 1, 3))")
case("table.unpack_bad", "local x = unpack(nil)")
# Short unpacks with both bounds (the guard's own path, docs/guards.md): holes, raw access
# past __index, bounds at 0, negative, -0, near the integer limits, non-integral or numeric
# strings (the native's path), an empty range and every length of the short path and past it.
case("table.unpack_short", "local t = setmetatable({10, nil, 30, 40, 50, [0] = 0, [-1] = -1}, {__index = function() return 'mt' end}) "
     "local function n(...) return select('#', ...), ... end "
     "return show({n(unpack(t, 1, 1))}), show({n(unpack(t, 1, 2))}), show({n(unpack(t, 1, 3))}), show({n(unpack(t, 1, 4))}), "
     "show({n(unpack(t, 1, 5))}), show({n(unpack(t, -1, 1))}), show({n(unpack(t, -0, 0))}), show({n(unpack(t, 3, 2))}), "
     "show({n(unpack(t, 2.5, 4))}), show({n(unpack(t, '2', 3))}), show({n(unpack(t, 1, 2, 3))}), "
     "show({n(unpack(t, 2147483646, 2147483647))}), show({n(unpack(t, -2147483648, -2147483647))})")
case("table.unpack_short_pcall_loop", "local t, n = {}, 0 for i = 1, 300 do t[i] = {'e', i % 3, i, i + 1} end "
     "local function h(a, b) n = n + (a or 0) + (b or 0) end "
     "for i = 1, 300 do local e = t[i] pcall(h, unpack(e, 3, 2 + e[2])) end return n")
case("table.unpack_too_many", "local x = unpack({}, 1, 1e7)")
case("table.length_border", "local t = {1, 2, 3} t[5] = 5 local u = {nil, nil, 3} return #t == 3 or #t == 5, #u == 3 or #u == 0, #{n = 1}")
case("table.next", "local t = {10} local k, v = next(t) return k, v, next(t, 1), next({})")
case("table.next_bad_key", "local x = next({}, 'nope')")
case("table.ipairs", "local out = {} for i, v in ipairs({'a', 'b', nil, 'd'}) do out[#out + 1] = i .. v end return table.concat(out)")
case("table.pairs_sum", "local t = {a = 1, b = 2, c = 3, 10, 20} local s = 0 for k, v in pairs(t) do s = s + v end return s")
case("table.pairs_bad", "local x = pairs(nil)")
case("table.ipairs_bad", "local x = ipairs()")
case("table.rawlen_like", "local t = setmetatable({}, {__index = function() return 1 end}) return rawget(t, 1), t[1], rawequal(t, t), rawequal(t, {})")
case("table.rawset_bad", "local x = rawset({}, nil, 1)")
case("table.nan_key", "local x = {} x[0/0] = 1")
case("table.constructor", "local function f() return 1, 2, 3 end local t = {f(), f()} local u = {f(), (f())} return #t, #u, show({[1] = 'a', 'b'})")

# ------------------------------------------------------------------------------------------
# Math and bit
# ------------------------------------------------------------------------------------------
case("math.basic", "return math.floor(3.7), math.ceil(3.2), math.floor(-3.5), math.abs(-4), math.max(1, 5, 3), math.min(2, -1)")
case("math.fmod_modf", "return math.fmod(7, 3), math.fmod(-7, 3), math.modf(3.7), math.modf(-3.7)")
case("math.trig", "return math.sin(0), math.cos(0), math.floor(math.atan2(1, 1) * 1000), math.floor(math.deg(math.pi)), math.rad(180) == math.pi")
case("math.exp_log", "return math.exp(0), math.log(1), math.log10(1000), math.sqrt(16), math.pow(2, 10), 2 ^ 0.5 == math.sqrt(2)")
case("math.frexp_ldexp", "return math.frexp(8), math.ldexp(0.5, 4)")
case("math.huge", "return math.huge, -math.huge, math.huge > 1e308, 1 / 0 == math.huge")
case("math.division", "return 7 / 2, 7 % 3, -7 % 3, 7 % -3, 5.5 % 2, 2 ^ -1, 0 / 0 ~= 0 / 0")
case("math.max_no_value", "local x = math.max()")
case("math.floor_bad", "local x = math.floor('x')")
case("math.random_seeded", "math.randomseed(42) local a, b, c = math.random(), math.random(10), math.random(5, 7) math.randomseed(42) return a == math.random(), b, c")
case("math.random_bad_range", "local x = math.random(5, 1)")
case("math.number_formatting", "return tostring(1e15), tostring(1e16), tostring(0.1), tostring(-0.0), tostring(1/3), 2^53, 2^63, -2^63")
case("math.tonumber", "return tonumber('42'), tonumber('0x1F'), tonumber('  12  '), tonumber('1e3'), tonumber('abc'), tonumber('10', 2), tonumber('zz', 36), tonumber('8', 8), tonumber(nil)")
case("math.tonumber_no_value", "local x = tonumber()")
case("math.tonumber_bad_base", "local x = tonumber('10', 99)")
case("math.arith_error", "local t = nil\nlocal x = t + 1")
case("math.arith_field_error", "local t = {}\nlocal x = t.field * 2")
case("math.unary_minus_error", "local x = -{}")
case("bit.ops", "return bit.band(0xff, 0x0f), bit.bor(1, 2), bit.bxor(3, 1), bit.bnot(0), bit.lshift(1, 4), bit.rshift(256, 4), bit.arshift(-256, 4)")
case("bit.more", "return bit.rol(1, 1), bit.ror(1, 1), bit.tohex(255), bit.tohex(255, 4), bit.tobit(2^32 + 1), bit.bswap(0x12345678)")
case("bit.bad", "local x = bit.band('x')")

# ------------------------------------------------------------------------------------------
# Coroutines
# ------------------------------------------------------------------------------------------
case("co.basic", "local co = coroutine.create(function(a, b) local c = coroutine.yield(a + b) local d, e = coroutine.yield(c * 2) return d + e end) return show(coroutine.resume(co, 1, 2)), show(coroutine.resume(co, 10)), show(coroutine.resume(co, 3, 4)), show(coroutine.resume(co)), coroutine.status(co)")
case("co.status", "local co co = coroutine.create(function() return coroutine.status(co) end) local before = coroutine.status(co) local _, inside = coroutine.resume(co) return before, inside, coroutine.status(co)")
case("co.wrap", "local gen = coroutine.wrap(function() for i = 1, 3 do coroutine.yield(i) end end) return gen(), gen(), gen()")
case("co.wrap_dead", "local f = coroutine.wrap(function() end) f()\nlocal x = f()")
case("co.wrap_error", "local f = coroutine.wrap(function()\nerror('inner')\nend)\nlocal x = f()")
case("co.wrap_error_level2", "local f = coroutine.wrap(function() error('m', 2) end)\nlocal x = f()")
case("co.wrap_error_level0", "local f = coroutine.wrap(function() error('m', 0) end)\nlocal x = f()")
case("co.wrap_error_table", "local f = coroutine.wrap(function() error({code = 7}) end) local ok, e = pcall(f) return type(e), e.code")
case("co.wrap_bad", "local x = coroutine.wrap(1)")
case("co.resume_error", "local co = coroutine.create(function()\nerror('boom')\nend) return coroutine.resume(co)")
case("co.resume_dead", "local co = coroutine.create(function() end) coroutine.resume(co) return coroutine.resume(co)")
case("co.resume_bad", "local x = coroutine.resume(1)")
case("co.resume_no_value", "local x = coroutine.resume()")
case("co.resume_self", "local co co = coroutine.create(function() return coroutine.resume(co) end) return coroutine.resume(co)")
case("co.running", "local main = coroutine.running() local co = coroutine.create(function() return coroutine.running() end) local _, inner = coroutine.resume(co) return main, inner == co")
case("co.isyieldable_inside", "local co = coroutine.create(function() return coroutine.isyieldable() end) return coroutine.resume(co)")
case("co.yield_across_pcall", "local co = coroutine.create(function() local ok, v = pcall(function() return coroutine.yield(1) + 1 end) return ok, v end) local _, a = coroutine.resume(co) return a, coroutine.resume(co, 41)")
case("co.yield_in_metamethod", "local t = setmetatable({}, {__index = function(_, k) return coroutine.yield(k) end}) local co = coroutine.create(function() return t.foo end) local _, k = coroutine.resume(co) return k, coroutine.resume(co, 'bar')")
case("co.create_bad", "local x = coroutine.create(1)")
case("co.status_bad", "local x = coroutine.status({})")
case("co.generator_chain", "local function gen(n) return coroutine.wrap(function() for i = 1, n do coroutine.yield(i) end end) end local s = 0 for v in gen(10) do s = s + v end return s")
case("co.nested", "local inner = coroutine.wrap(function() coroutine.yield('a') coroutine.yield('b') end) local outer = coroutine.wrap(function() coroutine.yield(inner()) coroutine.yield(inner()) end) return outer(), outer()")
# The counted coroutines (protected.lua): a resume with one argument or none takes what the
# coroutine hands back in fixed slots, by the count its yield or its end gave; every arity
# of a handover, trailing nils and all, comes back as LuaJIT's does.
case("co.counted_yield_arities", "local co = coroutine.create(function(...) local n = select('#', ...) coroutine.yield() coroutine.yield(nil) coroutine.yield(1, nil) coroutine.yield(1, 2, nil) coroutine.yield(nil, nil, nil, nil) return n end) local out = {} for i = 1, 6 do out[i] = show(coroutine.resume(co)) end return table.concat(out, ' | '), show(coroutine.resume(co))")
case("co.counted_end_arities", "local function run(f, ...) local co = coroutine.create(f) return show(coroutine.resume(co, ...)) end return run(function() end), run(function() return nil end), run(function(a) return a, nil end), run(function(a) return a, 2, 3, nil, nil end, 'x'), run(function(...) return select('#', ...) end, nil)")
case("co.counted_resume_arities", "local co = coroutine.create(function(...) local a = {select('#', ...)} while true do a = {select('#', coroutine.yield(a[1]))} end end) return show(coroutine.resume(co)), show(coroutine.resume(co)), show(coroutine.resume(co, nil)), show(coroutine.resume(co, 1, 2)), show(coroutine.resume(co, nil, nil, nil))")
case("co.counted_wrap_arities", "local f = coroutine.wrap(function(...) local n = select('#', ...) n = select('#', coroutine.yield(n)) n = select('#', coroutine.yield(nil, n)) coroutine.yield(n, 2, 3) coroutine.yield() return 1, nil end) return show(f()), show(f(nil)), show(f(1, 2)), show(f()), show(f()), show(f())")
case("co.counted_nested_handover", "local outer = coroutine.create(function() local inner = coroutine.create(function() coroutine.yield(1) return 'i1', 'i2', 'i3' end) local a = {coroutine.resume(inner)} local b = {coroutine.resume(inner)} coroutine.yield(#a, #b, b[4]) return 'o1', nil, 'o3', nil end) return show(coroutine.resume(outer)), show(coroutine.resume(outer)), show(coroutine.resume(outer))")
case("co.counted_yield_through_pcall", "local co = coroutine.create(function() local ok, a, b = pcall(coroutine.yield, 1, nil) return ok, a, b, nil end) return show(coroutine.resume(co)), show(coroutine.resume(co, 'x', nil))")
case("co.counted_error_positions", "local co = coroutine.create(function(x)\ncoroutine.yield(x)\nerror('boom')\nend) local a = {coroutine.resume(co, 1)} local ok, e = coroutine.resume(co) local f = coroutine.wrap(function()\ncoroutine.yield(1)\nerror('w')\nend) f() return a[2], ok, e, pcall(f)")
case("co.counted_error_values", "local co = coroutine.create(function() coroutine.yield() error({code = 3}) end) coroutine.resume(co) local ok, e = coroutine.resume(co) local f = coroutine.wrap(function() error(nil) end) return ok, type(e), e.code, pcall(f)")
# Coroutines whose body is a library function are not counted: they take the plain way,
# every value of every handover, also when the mod reaches a wrap's coroutine by running().
case("co.library_body_values", "local co = coroutine.create(pcall) "
     "local a = show(coroutine.resume(co, function(...) coroutine.yield(1, nil, 3, nil, 5, nil) return ... end, 'a', nil, 'c', nil, 'e', nil)) "
     "local b = show(coroutine.resume(co, 'x', nil)) local c2 = coroutine.create(select) "
     "return a, b, show(coroutine.resume(c2, 2, 'a', 'b', 'c', 'd', 'e', nil)), show(coroutine.resume(c2))")
case("co.library_wrap_resumed_by_running", "local saved local w = coroutine.wrap(pcall) "
     "local r = show(w(function() saved = coroutine.running() local a, b = coroutine.yield(1, 2, 3, 4, 5, nil) return a, b, nil, nil, 'z', nil end)) "
     "return r, show(coroutine.resume(saved, 'p', nil)), coroutine.status(saved), show(coroutine.resume(saved))")
case("co.counted_dead_and_self", "local co co = coroutine.create(function() return coroutine.resume(co) end) local r = show(coroutine.resume(co)) local f = coroutine.wrap(function() return 1 end) f() return r, show(coroutine.resume(co)), show(coroutine.resume(co, 1)), pcall(f), pcall(f, 1)")
case("co.counted_many_values", "local co = coroutine.create(function(...) coroutine.yield(...) return ... end) local t = {} for i = 1, 300 do t[i] = i end local a = {coroutine.resume(co, unpack(t))} local b = {coroutine.resume(co)} return #a, a[301], #b, show(coroutine.resume(co))")
case("co.counted_mixed_paths", "local b = coroutine.create(function() while true do coroutine.yield(1, nil, 3) end end) local a = coroutine.create(function(x, y, z) local r = {coroutine.resume(b)} coroutine.yield(#r, r[4]) r = {coroutine.resume(b, 1, 2, 3)} coroutine.yield(#r, nil, nil) local w = coroutine.wrap(function() coroutine.yield(5, 4, 3, 2, 1) end) coroutine.yield(w()) return 'end', nil end) return show(coroutine.resume(a, 1, 2, 3)), show(coroutine.resume(a)), show(coroutine.resume(a, 'x')), show(coroutine.resume(a, 1, 2)), show(coroutine.resume(a))")
case("co.library_bodies", "local co = coroutine.create(select) local w = coroutine.wrap(select) return show(coroutine.resume(co, '#', nil, nil)), show(w(2, 'a', 'b', nil)), show(coroutine.resume(coroutine.create(coroutine.yield), 1, nil))")

# ------------------------------------------------------------------------------------------
# Metatables
# ------------------------------------------------------------------------------------------
case("meta.index", "local base = {greet = function() return 'hi' end} local obj = setmetatable({}, {__index = base}) return obj.greet(), obj.missing")
case("meta.index_function", "local t = setmetatable({}, {__index = function(t, k) return k .. '!' end}) return t.a, t[1]")
case("meta.newindex", "local log = {} local t = setmetatable({}, {__newindex = function(t, k, v) log[#log + 1] = k rawset(t, k, v * 2) end}) t.x = 1 t.x = 5 return t.x, table.concat(log)")
case("meta.call", "local t = setmetatable({}, {__call = function(self, a, b) return a + b end}) return t(2, 3)")
case("meta.arith", "local mt = {} mt.__add = function(a, b) return 'add' end mt.__sub = function() return 'sub' end mt.__mul = function() return 'mul' end mt.__div = function() return 'div' end mt.__mod = function() return 'mod' end mt.__pow = function() return 'pow' end mt.__unm = function() return 'unm' end local t = setmetatable({}, mt) return t + 1, 1 - t, t * t, t / 2, t % 2, t ^ 2, -t")
case("meta.concat", "local t = setmetatable({}, {__concat = function(a, b) return 'cat' end}) return t .. 'x', 'x' .. t, 1 .. t")
case("meta.eq", "local mt = {__eq = function() return true end} local a, b = setmetatable({}, mt), setmetatable({}, mt) return a == b, a ~= b, a == {}, rawequal(a, b)")
case("meta.lt_le", "local mt = {__lt = function(a, b) return a.v < b.v end, __le = function(a, b) return a.v <= b.v end} local a, b = setmetatable({v = 1}, mt), setmetatable({v = 2}, mt) return a < b, a <= b, a > b, a >= b")
case("meta.le_falls_back_to_lt", "local mt = {__lt = function(a, b) return a.v < b.v end} local a, b = setmetatable({v = 1}, mt), setmetatable({v = 2}, mt) return a <= b, b <= a")
case("meta.len_not_for_tables", "local t = setmetatable({1, 2}, {__len = function() return 99 end}) return #t")
case("meta.tostring", "local t = setmetatable({}, {__tostring = function() return 'custom' end}) return tostring(t)")
case("meta.tostring_non_string", "local t = setmetatable({}, {__tostring = function() return 1, 2 end}) return tostring(t)")
case("meta.tostring_callable_table", "local f = setmetatable({}, {__call = function(self, v) return 'called' end}) local t = setmetatable({}, {__tostring = f}) return tostring(t)")
case("meta.tostring_not_callable", "local t = setmetatable({}, {__tostring = 'nope'})\nlocal x = tostring(t)")
case("meta.metatable_field", "local t = setmetatable({}, {__metatable = 'locked'}) return getmetatable(t)")
case("meta.metatable_protected", "local t = setmetatable({}, {__metatable = 'locked'})\nsetmetatable(t, {})")
case("meta.setmetatable_bad", "local x = setmetatable(1, {})")
case("meta.setmetatable_bad_mt", "local x = setmetatable({}, 1)")
case("meta.getmetatable_number", "return getmetatable(1), getmetatable({}), getmetatable(setmetatable({}, {}))  ~= nil")
case("meta.index_chain", "local a = {x = 1} local b = setmetatable({}, {__index = a}) local c = setmetatable({}, {__index = b}) return c.x")
case("meta.call_error", "local t = {}\nlocal x = t()")
case("meta.index_error", "local t = nil\nlocal x = t.field")
case("meta.index_global_error", "local x = undefined_global.field")
case("meta.call_method_error", "local t = {}\nt:nomethod()")
case("meta.inheritance", "local Animal = {} Animal.__index = Animal function Animal.new(name) return setmetatable({name = name}, Animal) end function Animal:speak() return self.name .. ' makes a sound' end local Dog = setmetatable({}, {__index = Animal}) Dog.__index = Dog function Dog.new(name) return setmetatable(Animal.new(name), Dog) end function Dog:speak() return self.name .. ' barks' end return Animal.new('cat'):speak(), Dog.new('rex'):speak()")

# ------------------------------------------------------------------------------------------
# Varargs and select
# ------------------------------------------------------------------------------------------
case("vararg.select", "local function f(...) return select('#', ...), select(2, ...) end return f(1, nil, 3)")
case("vararg.select_negative", "return select(-1, 'a', 'b', 'c'), select(-2, 'a', 'b', 'c')")
case("vararg.select_bad", "local x = select(0, 'a')")
case("vararg.select_too_negative", "local x = select(-5, 'a')")
case("vararg.select_no_value", "local x = select()")
case("vararg.select_string", "local x = select('x', 1)")
case("vararg.nil_holes", "local function f(...) local t = {...} return select('#', ...), #t >= 0 end return f(nil, nil)")
case("vararg.pass_through", "local function id(...) return ... end return id(1, nil, 3, nil)")
case("vararg.adjust", "local function f() return 1, 2 end local a, b, c = f() local d = (f()) return a, b, c, d")
case("vararg.arg_count", "local function f(a, b, ...) return a, b, select('#', ...) end return f(1), f(1, 2, 3, 4)")
case("vararg.unpack_select", "local t = {1, 2, 3, 4, 5} return select('#', unpack(t)), (select(3, unpack(t)))")

# ------------------------------------------------------------------------------------------
# goto
# ------------------------------------------------------------------------------------------
case("goto.continue", "local out = {} for i = 1, 5 do if i % 2 == 0 then goto continue end out[#out + 1] = i ::continue:: end return table.concat(out, ',')")
case("goto.backward", "local i, s = 0, 0 ::top:: i = i + 1 s = s + i if i < 10 then goto top end return s")
case("goto.nested_break", "for i = 1, 3 do for j = 1, 3 do if i * j == 4 then goto done end end end ::done:: return 'out'")
case("goto.closures", "local fs = {} local i = 1 ::again:: local j = i fs[#fs + 1] = function() return j end i = i + 1 if i <= 3 then goto again end return fs[1](), fs[2](), fs[3]()")

# ------------------------------------------------------------------------------------------
# Errors and levels
# ------------------------------------------------------------------------------------------
case("error.level1", "local function f()\nerror('one')\nend\nf()")
case("error.level2", "local function f()\nerror('two', 2)\nend\nf()")
case("error.level3", "local function g()\nerror('three', 3)\nend\nlocal function f()\ng()\nend\nf()")
case("error.level0", "error('zero', 0)")
case("error.level_beyond", "local function f() error('far', 50) end f()")
case("error.level_fraction", "local function f()\nerror('half', 1.9)\nend\nf()")
case("error.level_string", "local function f()\nerror('s', '2')\nend\nf()")
case("error.level_bad", "local x = error('m', {})")
case("error.negative_level", "error('neg', -1)")
case("error.table", "local ok, e = pcall(error, {code = 42}) return ok, type(e), e.code")
case("error.number", "local ok, e = pcall(function() error(42) end) return ok, e, type(e)")
case("error.number_level0", "local ok, e = pcall(error, 42, 0) return e, type(e)")
case("error.nil", "return pcall(error)")
case("error.nil_value", "return pcall(error, nil)")
case("error.rethrow", "local ok, e = pcall(function()\nerror('first')\nend) local ok2, e2 = pcall(error, e, 0) return e2")
case("error.pcall_error_level2", "return select(2, pcall(error, 'm', 2))")
case("error.pcall_error_level1", "return pcall(error, 'm')")
case("error.pcall_error_level3", "return pcall(error, 'm', 3)")
case("error.xpcall_error_level2", "return select(2, xpcall(error, function(m) return m end, 'm', 2))")
case("error.nested_pcall_level3", "return pcall(pcall, error, 'm', 3)")
case("error.in_function_under_pcall", "local function f() error('deep', 2) end return pcall(f)")
case("error.level2_in_callee", "local function check(x) if type(x) ~= 'number' then error('expected number', 2) end return x end\nlocal function user()\nreturn check('a') + 1\nend\nlocal ok, e = pcall(user) return e")
case("error.tail_call_error", "local function f() return error('tail') end return pcall(f)")
case("error.assert", "local ok, e = pcall(assert, false) local ok2, e2 = pcall(assert, nil, 'custom') local ok3, e3 = pcall(assert, 1 == 1, 'unused') return e, e2, ok3, e3")
case("error.assert_line", "local x = 1\nassert(x == 2)")
case("error.assert_message", "assert(false, 'with message')")
case("error.assert_table", "local t = {} local ok, e = pcall(assert, false, t) return e == t")
case("error.assert_values", "return assert(1, 2, 3)")
case("error.assert_no_value", "local x = assert()")
case("error.xpcall", "return xpcall(function() error('x') end, function(m) return 'handled: ' .. m end)")
case("error.xpcall_args", "return xpcall(function(a, b) return a + b end, print, 2, 3)")
case("error.xpcall_handler_result", "return xpcall(error, function() return 1, 2 end)")
case("error.xpcall_handler_no_result", "return select('#', xpcall(error, function() end))")
case("error.xpcall_handler_error", "return xpcall(error, function() error('again') end)")
case("error.xpcall_no_handler", "local x = xpcall(print)")
case("error.xpcall_bad_handler", "local x = xpcall(print, 1)")
case("error.xpcall_no_value", "local x = xpcall()")
case("error.pcall_no_value", "local x = pcall()")
case("error.pcall_nil", "return pcall(nil)")
case("error.pcall_values", "return pcall(function(...) return ... end, 1, 2, 3)")
case("error.pcall_builtin_arg_error", "return pcall(string.rep)")
case("error.pcall_tonumber_no_value", "return pcall(tonumber)")
case("error.pcall_lower_no_value", "return pcall(string.lower)")
case("error.stack_overflow", "local function f() return f() + 1 end\nreturn pcall(f)")
# After a stack overflow LuaJIT calls an xpcall handler on the few stack slots it keeps
# beyond its limit: in this shape it fits, and all agree; in the next, LuaJIT runs none.
case("error.xpcall_stack_overflow", "return xpcall(function() local function f() return f() + 1 end return f() end, function(m) return 'handled: ' .. tostring(m) end)")
case("error.xpcall_stack_overflow_no_handler", "local n = 0\nlocal ok, m = xpcall(function() local function f() return f() + 1 end return f() end, function(m) n = n + 1 return 'handled: ' .. tostring(m) end)\nreturn ok, m, n")
case("error.stack_overflow_multiline", "local function f()\n  local x = 1\n  return f() + x\nend\nreturn pcall(f)")
case("error.error_in_tostring_meta", "local t = setmetatable({}, {__tostring = function()\nerror('ts')\nend})\nlocal x = tostring(t)")
case("error.runtime_in_nested", "local function a() local t = nil return t.x end\nlocal function b() return (a()) end\nlocal ok, e = pcall(b) return e")
case("error.compare_error", "local x = {} < {}")
case("error.call_nil_field", "local t = {}\nt.nothing()")
case("error.coroutine_body_is_error", "local co = coroutine.create(error) local a, b = coroutine.resume(co, 'm', 1) return a, b, pcall(coroutine.wrap(error), 'w')")
case("error.level2_through_gsub", "local ok, e = pcall(function()\nlocal x = ('a'):gsub('a', function() error('g', 3) end)\nend) return e")
case("error.level2_through_sort", "local ok, e = pcall(function()\ntable.sort({1, 2, 3}, function() error('s', 3) end)\nend) return e")
case("error.level3_through_pcall", "local function f() error('p', 3) end\nlocal ok, e = pcall(function()\nlocal a, b = pcall(f)\nreturn b\nend) return e")
case("error.in_xpcall_handler_level", "return xpcall(function() error('a') end, function(m) return select(2, pcall(error, m .. '!', 2)) end)")
case("error.foreach_as_callback", "local ok, e = pcall(table.foreach, {1}, error) return e")
case("error.level1_tail_call", "local function f()\nreturn error('t')\nend\nlocal function g()\nlocal x = f()\nreturn x\nend\nreturn pcall(g)")
case("error.syntax_in_message", "local ok, e = pcall(error, 'x:1: looks positioned', 0) return e")

# ------------------------------------------------------------------------------------------
# tostring, functions and closures
# ------------------------------------------------------------------------------------------
case("tostring.values", "return tostring(nil), tostring(true), tostring(12), tostring(1.5), tostring('s'), tostring(1/0), tostring(-1/0)")
case("tostring.no_value", "local x = tostring()")
case("tostring.builtins", "return tostring(print), tostring(string.sub), tostring(tostring), tostring(pairs), tostring(math.floor), tostring(coroutine.wrap(function() end)), tostring(('x'):gmatch('x'))")
case("tostring.builtin_detection", "return string.find(tostring(print), 'builtin') ~= nil, string.find(tostring(function() end), 'builtin') == nil")
case("closure.counter", "local function counter() local n = 0 return function() n = n + 1 return n end end local c = counter() c() c() return c()")
case("closure.shared_upvalue", "local fs = {} for i = 1, 3 do fs[i] = function() return i end end return fs[1](), fs[2](), fs[3]()")
case("closure.recursion", "local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end return fib(20)")
case("closure.deep_recursion", "local function depth(n) if n == 0 then return 0 end return 1 + depth(n - 1) end return depth(5000)")
case("closure.tail_recursion", "local function loop(n, acc) if n == 0 then return acc end return loop(n - 1, acc + n) end return loop(100000, 0)")
case("misc.while_repeat", "local i, s = 0, 0 while i < 10 do i = i + 1 s = s + i end repeat local j = i i = i - 1 until j <= 5 return s, i")
case("misc.numeric_for", "local s = '' for i = 10, 1, -3 do s = s .. i .. ' ' end for i = 1, 0 do s = s .. 'never' end return s")
case("misc.for_float_step", "local n = 0 for i = 0, 1, 0.25 do n = n + 1 end return n")
case("misc.for_bad_step", "for i = 1, 'x' do end")
case("misc.and_or", "return nil or 'default', false and 'no', 1 and 2, nil and nil, false or nil")
case("misc.version", "return _VERSION, type(_G), _G._G == _G")
case("misc.string_methods_via_meta", "local s = 'abc' return s:len(), s:upper(), ('%d'):format(5)")
case("misc.long_string_build", "local parts = {} for i = 1, 1000 do parts[i] = string.format('%04d', i) end local s = table.concat(parts) return #s, s:sub(1, 8), s:sub(-4)")
case("misc.integer_keys", "local t = {} t[1.0] = 'a' t[2] = 'b' return t[1], #t, t[2.0]")


# ------------------------------------------------------------------------------------------
# Addresses (compared with addresses and ids written the same way)
# ------------------------------------------------------------------------------------------
case("address.tostring", "local t, f = {}, function() end return tostring(t), tostring(f), tostring(coroutine.create(f))")
case("address.format", "local t = {} return string.format('%s %p', t, t)")
case("address.tostring_stable", "local t = {} return tostring(t) == tostring(t), tostring(t) ~= tostring({})")

# ------------------------------------------------------------------------------------------
# What a sandbox refuses or answers otherwise on purpose (DIFFERENT below)
# ------------------------------------------------------------------------------------------
case("host.load", "return load('return 1')()")
case("host.loadstring", "return loadstring('return 1')()")
case("host.debug", "return debug.traceback()")
case("host.os", "return os.time() > 0")
case("host.io", "return io.write ~= nil")
case("host.require", "return require('string') == string")
case("host.string_dump", "return string.dump(function() end) ~= nil")
case("host.getfenv", "return getfenv(1) ~= nil")
case("host.newproxy", "return newproxy() ~= nil")
case("host.jit", "return jit.version")
case("host.gcinfo", "return gcinfo() > 0")
case("host.collectgarbage_collect", "return collectgarbage()")
case("host.collectgarbage_step", "return collectgarbage('step')")
case("host.string_metatable", "return getmetatable('').__index == string")
case("host.isyieldable_main", "return coroutine.isyieldable()")
case("host.random_unseeded", "return math.random(1000000)")
case("host.format_p_address", "local t = {} return string.format('%p', t) == string.format('%p', t), #string.format('%p', t)")
case("host.stack_overflow_hook", "local function f()\n  local x = 1\n  return f() + x\nend\nreturn pcall(f)")


# Cases a sandbox answers otherwise on purpose: the name of the reason each has in
# docs/conformance.md, and the modes it differs in.
BOTH = ("jit", "hook")
DIFFERENT: dict[str, tuple[str, tuple[str, ...]]] = {
    "host.load": ("no-load", BOTH),
    "host.loadstring": ("no-load", BOTH),
    "host.debug": ("no-host-libraries", BOTH),
    "host.os": ("no-host-libraries", BOTH),
    "host.io": ("no-host-libraries", BOTH),
    "host.require": ("no-host-libraries", BOTH),
    "host.string_dump": ("no-bytecode", BOTH),
    "host.getfenv": ("no-environments", BOTH),
    "host.newproxy": ("no-finalizers", BOTH),
    "host.jit": ("no-host-libraries", BOTH),
    "host.gcinfo": ("collector-is-the-hosts", BOTH),
    "host.collectgarbage_collect": ("collector-is-the-hosts", BOTH),
    "host.collectgarbage_step": ("collector-is-the-hosts", BOTH),
    "host.string_metatable": ("string-metatable", BOTH),
    "host.isyieldable_main": ("runs-are-coroutines", BOTH),
    "host.random_unseeded": ("seeded-random", BOTH),
    "host.format_p_address": ("hidden-addresses", BOTH),
    "host.stack_overflow_hook": ("hook-stack-overflow", ("hook",)),
    "error.stack_overflow_multiline": ("hook-stack-overflow", ("hook",)),
    "error.xpcall_stack_overflow_no_handler": ("handler-after-overflow", BOTH),
}

CASES: tuple[Case, ...] = tuple(Case(name, source) for name, source in _CASES.items())
