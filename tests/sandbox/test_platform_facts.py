"""The lupa / LuaJIT facts moonbox's design rests on (DESIGN.md §2), pinned on this platform.

These tests talk to lupa directly, not through moonbox: if an upgrade of lupa or LuaJIT
changes one of these facts, the test that fails names the design decision to revisit.
Every loop here is bounded; nothing relies on a budget to stop.
"""

from __future__ import annotations

import pytest
from lupa import luajit21

# --- fact 1: import LuaJIT 2.1 by name --------------------------------------------------------


def test_luajit21_is_luajit_2_1_with_lua_5_1_semantics():
    rt = luajit21.LuaRuntime()
    assert rt.lua_implementation.startswith("LuaJIT 2.1")
    assert rt.lua_version == (5, 1)
    assert rt.eval("jit.version").startswith("LuaJIT 2.1")
    assert rt.eval("_VERSION") == "Lua 5.1"
    assert rt.eval("(jit.status())") is True  # the JIT is on by default


# --- fact 2: lupa's defaults hand Lua the whole Python process ---------------------------------


class _Victim:
    secret = "host data"


def _python_function() -> int:
    return 1


def test_default_runtime_exposes_python_eval_and_builtins():
    rt = luajit21.LuaRuntime()
    assert rt.eval("python") is not None
    assert rt.eval("package.loaded.python") is not None
    assert rt.eval("python.eval('6 * 7')") == 42
    assert rt.eval("python.builtins.len")("abc") == 3
    assert rt.eval("python.builtins.__import__") is not None


def test_default_runtime_gives_attribute_access_to_python_objects():
    rt = luajit21.LuaRuntime()
    globals_of = rt.eval("function(f) return f.__globals__ end")
    assert globals_of(_python_function) is _python_function.__globals__
    class_of = rt.eval("function(o) return o.__class__ end")
    assert class_of(_Victim()) is _Victim
    assert rt.eval("function(o) return o.secret end")(_Victim()) == "host data"


def test_eval_and_builtins_off_still_leaves_a_python_table():
    # register_eval=False / register_builtins=False remove eval and builtins, but the
    # `python` global (as_attrgetter, as_function, iter, ...) stays: moonbox deletes it.
    rt = luajit21.LuaRuntime(register_eval=False, register_builtins=False)
    assert rt.eval("python.eval") is None
    assert rt.eval("python.builtins") is None
    assert rt.eval("python") is not None
    assert rt.eval("package.loaded.python") is not None
    assert rt.eval("python.as_attrgetter") is not None


def test_deny_all_attribute_handlers_refuse_attribute_access():
    def deny(obj, name, *value):
        raise AttributeError("denied")

    rt = luajit21.LuaRuntime(attribute_handlers=(deny, deny))
    probe = rt.eval(
        "function(f) local ok, e = pcall(function() return f.__globals__ end) return ok end"
    )
    assert probe(_python_function) is False
    with pytest.raises(AttributeError):
        rt.eval("function(f) return f.__globals__ end")(_python_function)


# --- fact 3: LuaJIT never runs count hooks inside compiled traces ---------------------------

HOOKED_HOT_LOOP = """
local calls = 0
debug.sethook(function() calls = calls + 1 end, "", 1000)
local x = 0
for i = 1, 2000000 do x = x + i end
debug.sethook()
return calls, x
"""


def test_count_hook_does_not_fire_in_a_jit_compiled_loop():
    on = luajit21.LuaRuntime()
    calls_jit_on, total = on.execute(HOOKED_HOT_LOOP)
    off = luajit21.LuaRuntime()
    off.execute("jit.off()")
    calls_jit_off, total_off = off.execute(HOOKED_HOT_LOOP)
    assert total == total_off == 2000000 * 2000001 // 2
    # ~2 VM instructions per iteration: about 4000 hook calls when interpreted.
    assert calls_jit_off >= 2000
    assert calls_jit_on * 10 < calls_jit_off


_HOOKED_HOT_LOOP = """
debug.sethook(function() error("budget exceeded", 0) end, "", 1000)
local ok, err = pcall(function()
  local x = 0
  for i = 1, 5000000 do x = x + 1 end
  return x
end)
debug.sethook()
return ok, err
"""


def test_a_hook_budget_does_not_stop_a_hot_loop_with_the_jit_on():
    # The bounded form of "while true do end ran until killed": a hook that raises on its
    # first call never gets to raise, so the loop runs to its end.
    rt = luajit21.LuaRuntime()
    assert rt.execute(_HOOKED_HOT_LOOP) == (True, 5000000)


def test_with_the_jit_off_a_hook_budget_stops_the_same_loop():
    rt = luajit21.LuaRuntime()
    rt.execute("jit.off()")
    assert rt.execute(_HOOKED_HOT_LOOP) == (False, "budget exceeded")


# --- fact 5: a check written in Lua can yield, a hook cannot --------------------------------


def test_a_hook_cannot_yield_but_a_lua_check_can():
    rt = luajit21.LuaRuntime()
    rt.execute("jit.off()")
    from_hook = rt.execute(
        """
        local co = coroutine.create(function()
          debug.sethook(function() coroutine.yield("from hook") end, "", 100)
          local x = 0
          for i = 1, 100000 do x = x + i end
          return "finished"
        end)
        local ok, err = coroutine.resume(co)
        debug.sethook()
        return ok, err
        """
    )
    assert from_hook[0] is False
    assert "attempt to yield across C-call boundary" in from_hook[1]

    jit_rt = luajit21.LuaRuntime()
    from_check = jit_rt.execute(
        """
        local n = 0
        local function check() n = n + 1 if n % 1000 == 0 then coroutine.yield("paused") end end
        local co = coroutine.create(function()
          for i = 1, 10000 do check() end
          return "finished"
        end)
        local ok, v = coroutine.resume(co)
        return ok, v, coroutine.status(co)
        """
    )
    assert from_check == (True, "paused", "suspended")


# --- fact 6: a limit error is an ordinary, catchable Lua error ------------------------------


def test_an_error_raised_by_a_hook_is_caught_by_pcall_and_the_script_carries_on():
    rt = luajit21.LuaRuntime()
    rt.execute("jit.off()")
    result = rt.execute(
        """
        local ok, err = pcall(function()
          debug.sethook(function() error("limit", 0) end, "", 1000)
          while true do end
        end)
        debug.sethook()
        return ok, err, "carried on"
        """
    )
    assert result == (False, "limit", "carried on")


def test_an_error_raised_by_a_hook_is_caught_by_coroutine_resume():
    rt = luajit21.LuaRuntime()
    rt.execute("jit.off()")
    result = rt.execute(
        """
        local co = coroutine.create(function()
          debug.sethook(function() error("limit", 0) end, "", 1000)
          while true do end
        end)
        local ok, err = coroutine.resume(co)
        debug.sethook()
        return ok, err, coroutine.status(co)
        """
    )
    assert result == (False, "limit", "dead")


def test_an_error_raised_by_a_lua_check_is_caught_by_pcall_and_xpcall():
    rt = luajit21.LuaRuntime()
    result = rt.execute(
        """
        local n = 0
        local function check() n = n + 1 if n > 1000 then error("limit", 0) end end
        local ok1, e1 = pcall(function() while true do check() end end)
        n = 0
        local ok2, e2 = xpcall(function() while true do check() end end,
                               function(e) return "handled " .. e end)
        return ok1, e1, ok2, e2
        """
    )
    assert result == (False, "limit", False, "handled limit")


def test_the_xpcall_handler_of_a_hook_error_runs_with_hooks_disabled():
    # LuaJIT calls the message handler inside the hook that raised: no hook fires in it.
    # A handler that loops is therefore invisible to a hook-based meter (jit=False).
    rt = luajit21.LuaRuntime()
    rt.execute("jit.off()")
    result = rt.execute(
        """
        local calls = 0
        debug.sethook(function()
          calls = calls + 1
          if calls == 5 then error("limit", 0) end
        end, "", 100)
        local in_handler
        local ok, err = xpcall(function() while true do end end, function(e)
          local before = calls
          local x = 0
          for i = 1, 1000000 do x = x + i end
          in_handler = calls - before
          return e
        end)
        local before = calls
        local y = 0
        for i = 1, 100000 do y = y + i end
        local after_handler = calls - before
        debug.sethook()
        return ok, err, in_handler, after_handler
        """
    )
    ok, err, in_handler, after_handler = result
    assert (ok, err) == (False, "limit")
    assert in_handler == 0
    assert after_handler > 100


def test_a_memory_error_skips_the_xpcall_message_handler():
    rt = luajit21.LuaRuntime(max_memory=2 << 20)
    result = rt.execute(
        """
        local called = false
        local ok, err = xpcall(function()
          local t = {}
          for i = 1, 1e9 do t[i] = i end
        end, function(e) called = true return "replaced" end)
        return ok, err, called
        """
    )
    rt.gccollect()
    assert result == (False, "not enough memory", False)


# --- fact 7: one C call cannot be interrupted ---------------------------------------------


def test_a_backtracking_string_find_runs_without_a_single_hook_call():
    rt = luajit21.LuaRuntime()
    rt.execute("jit.off()")
    calls_during, found = rt.execute(
        """
        local calls = 0
        local subject, pattern = string.rep("a", 20), string.rep("a*", 6) .. "b"
        debug.sethook(function() calls = calls + 1 end, "", 1)
        local before = calls
        local found = string.find(subject, pattern)
        local during = calls - before
        debug.sethook()
        return during, found
        """
    )
    assert found is None
    # The call itself and the lines around it cost a handful of instructions; the
    # hundreds of thousands of backtracking steps inside the C function cost none.
    assert calls_during <= 10


# --- fact 8: max_memory works on luajit21 ---------------------------------------------------


def test_max_memory_raises_lua_memory_error():
    rt = luajit21.LuaRuntime(max_memory=4 << 20)
    assert rt.get_max_memory() == 4 << 20
    with pytest.raises(luajit21.LuaMemoryError) as info:
        rt.execute("local t = {} for i = 1, 1e9 do t[i] = i end")
    assert isinstance(info.value, luajit21.LuaError)
    assert isinstance(info.value, MemoryError)
    rt.gccollect()  # first thing after an out-of-memory error
    assert rt.get_memory_used() < 4 << 20
    assert rt.execute("return 1 + 1") == 2


def test_max_memory_is_seen_inside_lua_as_a_catchable_error():
    rt = luajit21.LuaRuntime(max_memory=4 << 20)
    result = rt.execute(
        "local ok, e = pcall(function() local t = {} for i = 1, 1e9 do t[i] = i end end)"
        " return ok, e"
    )
    rt.gccollect()
    assert result == (False, "not enough memory")


# --- fact 9: lupa's mode='t' is ignored; Lua's own load(..., "t") is not -------------------


@pytest.fixture
def bytecode() -> bytes:
    rt = luajit21.LuaRuntime(encoding=None)
    dumped = rt.eval("string.dump(function() return 42 end)")
    assert dumped[:3] == b"\x1bLJ"
    return dumped


def test_lupa_compile_and_execute_run_bytecode_even_with_mode_t(bytecode):
    rt = luajit21.LuaRuntime(encoding=None)
    assert rt.compile(bytecode, mode="t")() == 42
    assert rt.execute(bytecode, mode="t") == 42
    assert rt.compile(bytecode)() == 42
    assert rt.execute(bytecode) == 42
    # mode='b' does not refuse source either: the argument has no effect on LuaJIT.
    assert rt.compile(b"return 7", mode="b")() == 7


def test_lua_load_with_mode_t_refuses_bytecode(bytecode):
    rt = luajit21.LuaRuntime(encoding=None)
    load = rt.eval(
        "function(s, m) local f, e = load(s, '=probe', m)"
        " if f then return 'loaded', f() end return nil, e end"
    )
    assert load(bytecode, b"t") == (None, b"attempt to load chunk with wrong mode")
    assert load(bytecode, b"b") == (b"loaded", 42)
    assert load(bytecode, b"bt") == (b"loaded", 42)
    assert load(b"return 1", b"b") == (None, b"attempt to load chunk with wrong mode")
    # loadstring has no mode at all
    assert rt.eval("function(s) return loadstring(s)() end")(bytecode) == 42


def test_luajit_refuses_bytecode_behind_a_bom_or_shebang(bytecode):
    rt = luajit21.LuaRuntime(encoding=None)
    load = rt.eval("function(s) local f, e = load(s, '=probe', 'bt') return f ~= nil, e end")
    assert load(b"\xef\xbb\xbf" + bytecode) == (False, b"cannot load malformed bytecode")
    assert load(b"#!/usr/bin/lua\n" + bytecode) == (False, b"cannot load malformed bytecode")


# --- fact 10: one runtime per mod isolates the string metatable -----------------------------


def test_runtimes_do_not_share_the_string_metatable():
    a = luajit21.LuaRuntime()
    b = luajit21.LuaRuntime()
    a.execute("getmetatable('').__index = {upper = function() return 'pwned' end}")
    assert a.eval("('x'):upper()") == "pwned"
    assert b.eval("('x'):upper()") == "X"


# --- the alarm (moonbox/sandbox/_alarm.py): what another thread can reach -----------------------


def _poke_then_stop(cell_address: int, stop_address: int, start: int, seen: list) -> None:
    """Once the int32 at ``cell_address`` has moved 10^6 below ``start`` (the loop is long
    compiled), write -5 into it 200 times; then raise the int32 at ``stop_address``, which
    the loop reads each iteration. ``seen`` gets every value it read before a write."""
    import ctypes
    import time

    cell = ctypes.c_int32.from_address(cell_address)
    stop = ctypes.c_int32.from_address(stop_address)
    deadline = time.monotonic() + 60
    try:
        while 0 <= cell.value > start - 10**6 and time.monotonic() < deadline:
            time.sleep(0.0001)
        for _ in range(200):
            v = cell.value
            if v < 0:
                break  # the loop saw a write, or ran out: nothing more to learn
            seen.append(v)
            cell.value = -5
            time.sleep(0.0001)
    finally:
        stop.value = 1


def test_a_compiled_loop_keeps_its_ffi_cell_in_a_register():
    # The reason the alarm cannot reach a loop the JIT compiles whole: LuaJIT forwards the
    # cell's load from the check's store, so the trace never reads the cell again, and a
    # write from another thread is overwritten by the next store. The loop counts the
    # cell down and stops when it reads a negative value, or when the writing thread
    # raises a flag (a second cell, which the trace reads again after each store, as the
    # meter's poll flag): it ends when that thread says, however fast the CPU.
    import threading

    start = 2**31 - 1
    rt = luajit21.LuaRuntime()
    cell, stop = rt.execute(
        "ffi = require('ffi') N = ffi.new('int32_t[1]', ...) S = ffi.new('int32_t[1]') "
        "return tonumber(ffi.cast('intptr_t', N)), tonumber(ffi.cast('intptr_t', S))", start)
    seen: list = []
    poker = threading.Thread(target=_poke_then_stop, args=(cell, stop, start, seen))
    poker.start()
    n, left = rt.execute("local N, S, n, v = N, S, 0, 0 while S[0] == 0 do v = N[0] - 1 "
                         "N[0] = v if v < 0 then break end n = n + 1 end return n, v")
    poker.join()
    assert seen, "the writing thread never saw the loop run"
    # Every step counted down from the start, none of the writes seen (a seen write
    # leaves -6, far from what n says). The loop's own last value, not the cell's: the
    # writing thread's last write may land after the loop's last store (the loop's
    # thread descheduled between its store and its read of the flag), and stay there.
    assert left == start - n or (left == -1 and n == start), (n, left)


def test_lua_sethook_from_another_thread_stops_an_interpreted_loop():
    # What the alarm does: lua_sethook is one of the C calls LuaJIT lets another thread make.
    # A loop that cannot finish, in the interpreter (the JIT off for it: a loop that calls a
    # C function may still be compiled, its trace stitched around the call, and run no
    # hook), runs the hook and stops.
    import ctypes
    import threading

    from moonbox.sandbox._alarm import _hook_api

    api = _hook_api()
    assert api is not None, "the LuaJIT library exports lua_sethook and lua_gethook"
    sethook, hookf = api
    rt = luajit21.LuaRuntime()
    address = int(rt.execute(
        "keep = coroutine.create(function() end) "
        "debug.sethook(function() debug.sethook() error('alarm', 0) end, '', 0) "
        "return (string.format('%p', keep))"), 16)
    timer = threading.Timer(0.05, sethook, (ctypes.c_void_p(address), hookf, 8, 1))
    timer.start()
    ok, err = rt.execute("return pcall(function() jit.off(true, true) local x = 0 "
                         "while true do x = x + 1 end end)")
    timer.join()
    assert (ok, err) == (False, "alarm")
