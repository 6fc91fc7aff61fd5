/* The compiled resume of a run: what the prelude's host.call does (runs.lua), begin, the
 * resume and settle, without running any of the prelude's Lua on the way.
 *
 * An engine calls each mod's handlers once per tick, each call one resume of the mod's
 * run in its own runtime. With a thousand runtimes, a call's cost is mostly memory: the
 * prelude's bookkeeping around the resume is bytecode, upvalues and tables of each
 * runtime, which the other runtimes pushed out of the caches since its last call. Here
 * the bookkeeping is this module's code, shared by every runtime, and the state it works
 * on is one struct per runtime (moonbox_meter, declared the same way in meter.lua) and one
 * per run (moonbox_run): a call touches a few cache lines of its runtime, not hundreds.
 *
 * The plain end of a call, a yield of nothing within the budget, is answered here: the
 * steps, or the figures when the peak or the heap's 64 KiB block changed, exactly as
 * ends.call answers. Every other end (values, an error, a trip, the end of the run) goes
 * to the prelude's host.call_end with what the coroutine answered, settled the same way;
 * the host takes its answer with host.take_end, as lupa converts any answer. What this
 * path cannot set up (the count hook armed for single instructions, a trip not yet
 * cleared, a coroutine not suspended in a yield) it leaves to host.call: the call answers
 * NotImplemented and changes nothing.
 *
 * The interpreter lock is released while the coroutine runs, as lupa releases it around
 * every call into Lua: the host's alarm thread must run meanwhile, and host functions
 * (lupa's callbacks) take the lock back while they run. The Lua API comes from lupa's
 * LuaJIT extension module, as in _heap.c.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "_resume.h"
#include "_slots.h"

typedef struct lua_State lua_State;
typedef int (*lua_CFunction)(lua_State *L);

#define LUA_REGISTRYINDEX (-10000)
#define LUA_YIELD 1
#define LUA_ERRMEM 4
#define LUA_GCCOUNT 3
#define LUA_GCCOUNTB 4
#define LUA_TNIL 0

/* The meter's struct and a run's figures: the same declarations as meter.lua's cdef. */
typedef struct {
    int32_t window, poll;
    bool active, tripped, growth_limited, preempt, hook_pending;
    double host_call_max_kb, granted, used, total_base, start, deadline, alloc_kb, start_kb,
        peak_kb, k, last_poll, run_co, heap_block, margin_kb;
    double steps, wall_s, total_limit, alloc_bytes, max_memory;
} Meter;

typedef struct {
    double total, peak;
    bool dead;
} RunFigures;

#define STICKY (-1073741824)  /* meter.lua: a window that stays negative */
#define K_START_MAX 4096.0     /* begin's bound on the poll interval a resume starts with */

static struct {
    int (*gettop)(lua_State *);
    void (*settop)(lua_State *, int);
    void (*pushvalue)(lua_State *, int);
    void (*pushnumber)(lua_State *, double);
    void (*pushboolean)(lua_State *, int);
    void (*pushnil)(lua_State *);
    void (*getfield)(lua_State *, int, const char *);
    void (*xmove)(lua_State *, lua_State *, int);
    int (*status)(lua_State *);
    int (*resume)(lua_State *, int);
    int (*pcall)(lua_State *, int, int, int);
    int (*cpcall)(lua_State *, lua_CFunction, void *);
    int (*gc)(lua_State *, int, int);
    int (*checkstack)(lua_State *, int);
    const char *(*tolstring)(lua_State *, int, size_t *);
    void *(*touserdata)(lua_State *, int);
    int (*type)(lua_State *, int);
    int (*error)(lua_State *);
    int (*toboolean)(lua_State *, int);
    double (*tonumber)(lua_State *, int);
    void (*pushlstring)(lua_State *, const char *, size_t);
    void (*pushstring)(lua_State *, const char *);
    void (*pushlightuserdata)(lua_State *, void *);
    void (*pushcclosure)(lua_State *, lua_CFunction, int);
    void (*setfield)(lua_State *, int, const char *);
    void (*replace)(lua_State *, int);
    void (*insert)(lua_State *, int);
    void (*remove)(lua_State *, int);
    void (*call)(lua_State *, int, int);
    int (*next)(lua_State *, int);
    int ready;
} api;

static int
load_api(const char *library)
{
    if (api.ready) {
        return 1;
    }
    void *h = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL) {
        return 0;
    }
#define FIND(field, name) \
    *(void **)(&api.field) = dlsym(h, name); \
    if (api.field == NULL) { dlclose(h); return 0; }
    FIND(gettop, "lua_gettop")
    FIND(settop, "lua_settop")
    FIND(pushvalue, "lua_pushvalue")
    FIND(pushnumber, "lua_pushnumber")
    FIND(pushboolean, "lua_pushboolean")
    FIND(pushnil, "lua_pushnil")
    FIND(getfield, "lua_getfield")
    FIND(xmove, "lua_xmove")
    FIND(status, "lua_status")
    FIND(resume, "lua_resume")
    FIND(pcall, "lua_pcall")
    FIND(cpcall, "lua_cpcall")
    FIND(gc, "lua_gc")
    FIND(checkstack, "lua_checkstack")
    FIND(tolstring, "lua_tolstring")
    FIND(touserdata, "lua_touserdata")
    FIND(type, "lua_type")
    FIND(error, "lua_error")
    FIND(toboolean, "lua_toboolean")
    FIND(tonumber, "lua_tonumber")
    FIND(pushlstring, "lua_pushlstring")
    FIND(pushstring, "lua_pushstring")
    FIND(pushlightuserdata, "lua_pushlightuserdata")
    FIND(pushcclosure, "lua_pushcclosure")
    FIND(setfield, "lua_setfield")
    FIND(replace, "lua_replace")
    FIND(insert, "lua_insert")
    FIND(remove, "lua_remove")
    FIND(call, "lua_call")
    FIND(next, "lua_next")
#undef FIND
    dlclose(h);  /* the module stays loaded: lupa holds it */
    api.ready = 1;
    return 1;
}

static inline double
heap_kb(lua_State *L)
{
    /* collectgarbage("count"), exactly: the heap's bytes over 1024. */
    return (double)api.gc(L, LUA_GCCOUNT, 0) + (double)api.gc(L, LUA_GCCOUNTB, 0) / 1024.0;
}

/* A sandbox's binding: its runtime's call thread, host.call_end, the meter, and for the
 * compiled crossing of host calls the host's dispatcher and its failure marker. */
typedef struct {
    PyObject_HEAD
    lua_State *thread;  /* a coroutine of the runtime never resumed: the call thread */
    Meter *meter;
    int open;
    PyObject *memory_error;  /* lupa's LuaMemoryError, and its LuaError */
    PyObject *lua_error;
    PyObject *dispatch;      /* the sandbox's dispatcher: dispatch(index, *args) */
    PyObject *failed;        /* the first value of a failed call's answer */
    PyObject *taken;         /* an answer only lupa converts, until host.c_take takes it */
    PyObject *directs;       /* by index: a host function's direct answer, or None */
    PyObject *pairs_directs; /* by index: the same for a walked flat table's call */
    unsigned long long crossed;  /* host calls the crossing made itself */
    unsigned long long walked;   /* of those, calls whose table it walked itself */
    unsigned long long directed; /* of those, calls a direct answer served */
    long long flat_items, flat_bytes;  /* the sandbox's value limits (values.lua) */
    /* What run_call read last from its run's and sandbox's slots, with the objects it read
     * it from (held, and compared by identity: those slots hold ints and floats set once):
     * a call reads the slots, not the numbers behind them. */
    PyObject *k_co, *k_figures, *k_id, *k_wall, *k_late;
    long long co, figures, id;
    double wall, late;
    char *buffer;             /* the strings of an answer, between the lock and the pushes */
    size_t used, capacity;
} Resumer;

static PyTypeObject ResumerType;

/* The crossing's markers, the first value it answers (light userdata no mod can make). */
static char MARK_OK, MARK_PRELUDE, MARK_TAKE, MARK_FAILED, MARK_FLAT;

#define LUA_GLOBALSINDEX (-10002)
#define UPVALUE(i) (LUA_GLOBALSINDEX - (i))
#define LUA_TBOOLEAN 1
#define LUA_TNUMBER 3
#define LUA_TSTRING 4
#define LUA_TTABLE 5
/* At most this many arguments: a flat table's 16 pairs after its call's two values. */
#define FLAT_MAX 16
#define CROSSING_MAX_ARGS (2 + 2 * FLAT_MAX)

/* A Lua value as lupa hands it to Python (encoding None: strings are bytes), for the
 * types the crossing takes. */
static PyObject *
from_lua(lua_State *L, int i)
{
    switch (api.type(L, i)) {
    case LUA_TNIL:
        Py_RETURN_NONE;
    case LUA_TBOOLEAN:
        return PyBool_FromLong(api.toboolean(L, i));
    case LUA_TNUMBER: {
        double d = api.tonumber(L, i);
        /* lupa: the number cast to lua_Integer, an int when that is equal */
        if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 &&
                (double)(long long)d == d) {
            return PyLong_FromLongLong((long long)d);
        }
        return PyFloat_FromDouble(d);
    }
    default: {  /* a string: checked by the caller */
        size_t len = 0;
        const char *text = api.tolstring(L, i, &len);
        return PyBytes_FromStringAndSize(text, (Py_ssize_t)len);
    }
    }
}

/* A value of a host call's answer, as the crossing pushes it (strings in the buffer). */
typedef struct {
    int type;
    double num;
    size_t off, len;
} Answer;

#define ANSWER_MAX 32
enum { MARK_KIND_OK, MARK_KIND_TAKE, MARK_KIND_FAILED };

/* Reads `v` into `a` when the crossing pushes it itself (None, a boolean, a float, an int
 * of at most 2^53, bytes); whether it does. NULL: the generic failure message. The lock is
 * held. */
static int
keep(Resumer *r, Answer *a, PyObject *v)
{
    if (v == NULL) {
        a->type = LUA_TSTRING;
        a->off = (size_t)-1;
        a->len = 0;
    } else if (v == Py_None) {
        a->type = LUA_TNIL;
    } else if (v == Py_True || v == Py_False) {
        a->type = LUA_TBOOLEAN;
        a->num = v == Py_True;
    } else if (PyFloat_CheckExact(v)) {
        a->type = LUA_TNUMBER;
        a->num = PyFloat_AS_DOUBLE(v);
    } else if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || n > (1LL << 53) || n < -(1LL << 53)) {
            PyErr_Clear();
            return 0;
        }
        a->type = LUA_TNUMBER;
        a->num = (double)n;
    } else if (PyBytes_CheckExact(v)) {
        size_t len = (size_t)PyBytes_GET_SIZE(v);
        if (r->used + len > r->capacity) {
            size_t want = (r->used + len) * 2 + 256;
            char *grown = realloc(r->buffer, want);
            if (grown == NULL) {
                return 0;
            }
            r->buffer = grown;
            r->capacity = want;
        }
        memcpy(r->buffer + r->used, PyBytes_AS_STRING(v), len);
        a->type = LUA_TSTRING;
        a->off = r->used;
        a->len = len;
        r->used += len;
    } else {
        return 0;
    }
    return 1;
}

/* The pairs of the table at index t pushed above the stack's top `top`, as flat_pairs
 * (dispatch.lua) collects them, in the same order (lua_next's is next's): its count, when
 * the table has 1 to FLAT_MAX entries, every key a string and every value a boolean,
 * number or string, within the byte limit. Else 0, with nothing pushed, and the prelude
 * walks the table (which then finds what it finds, as before). Only string keys: lua_next
 * finds each key again along its hash chain, which a mod can make long with number keys
 * (their hash is not seeded, DESIGN.md), and a table of them takes the prelude's walk, by
 * slot index. A string key's chain may still hold number keys the mod placed there (even
 * removed ones, until a rehash): at most 16 finds along chains no longer than the table,
 * so the walk stays linear in the table's size, as the prelude's is (its scan for the
 * next live slot crosses the whole hash part). */
static int
walk_flat(Resumer *r, lua_State *L, int t, int top)
{
    if (!api.checkstack(L, 2 * FLAT_MAX + 2)) {
        return 0;
    }
    long long bytes = 0;
    int n = 0;
    size_t len = 0;
    api.pushnil(L);
    while (api.next(L, t)) {  /* the key at -2, its value at -1 */
        n++;
        int tv = api.type(L, -1);
        if (n > FLAT_MAX || n > r->flat_items || api.type(L, -2) != LUA_TSTRING ||
                (tv != LUA_TSTRING && tv != LUA_TNUMBER && tv != LUA_TBOOLEAN)) {
            api.settop(L, top);
            return 0;
        }
        api.tolstring(L, -2, &len);
        bytes += (long long)len;
        if (tv == LUA_TSTRING) {
            api.tolstring(L, -1, &len);
            bytes += (long long)len;
        }
        api.pushvalue(L, -2);  /* the key again: lua_next takes it */
    }
    if (n == 0 || bytes > r->flat_bytes) {
        api.settop(L, top);
        return 0;
    }
    return n;
}

/* A host function's call (see make_host_function in dispatch.lua): (id, cost, ...args). */
static int
c_host(lua_State *L)
{
    Resumer *r = api.touserdata(L, UPVALUE(1));
    int top = api.gettop(L);
    int nargs = top - 2;
    Meter *M = r->meter;
    int plain = r->open && r->dispatch != NULL && nargs >= 0 && nargs <= CROSSING_MAX_ARGS;
    for (int i = 3; plain && i <= top; i++) {
        int t = api.type(L, i);
        plain = t == LUA_TNIL || t == LUA_TBOOLEAN || t == LUA_TNUMBER || t == LUA_TSTRING;
    }
    double cost = api.tonumber(L, 2);
    double c = (double)M->window - cost;
    int walked = 0;
    if (!plain && r->open && nargs == 2 && api.type(L, 4) == LUA_TTABLE) {
        /* (a, t): charged and checked here as the prelude's way would. A flat table with
         * string keys (`{x = 1}`, the commonest) is walked here and crosses as its pairs,
         * charged one step each as flat_call charges them: the call the prelude's
         * flat_call then makes, with no Lua run from this C function. Any other table the
         * prelude walks (flat_call), without charging and checking again. */
        int t = api.type(L, 3);
        if ((t == LUA_TNIL || t == LUA_TBOOLEAN || t == LUA_TNUMBER || t == LUA_TSTRING) &&
                c >= (double)M->poll && heap_kb(L) <= M->host_call_max_kb) {
            int n = r->dispatch != NULL ? walk_flat(r, L, 4, top) : 0;
            double cn = c - (M->active ? (double)n : 0.0);
            if (n > 0 && cn >= (double)M->poll) {
                /* As flat_call's call: (-1 - id, 0, a, n, k1, v1, ...). */
                api.pushnumber(L, -1.0 - api.tonumber(L, 1));
                api.replace(L, 1);
                api.pushnumber(L, (double)n);
                api.replace(L, 4);
                c = cn;
                top = api.gettop(L);
                nargs = top - 2;
                plain = 1;
                walked = 1;
                r->walked++;
            } else {
                api.settop(L, top);
                M->window = (int32_t)c;
                api.pushlightuserdata(L, &MARK_FLAT);
                api.replace(L, 2);
                return top - 1;
            }
        }
    }
    /* (A walked call was checked before its walk, and its arguments are rewritten: the
     * poll flag, which the alarm's thread may raise meanwhile, or the stack's growth for
     * the pairs must not send it the prelude's way now. It polls at the next check.) */
    if (!walked && (!plain || c < (double)M->poll || heap_kb(L) > M->host_call_max_kb)) {
        /* The prelude's way does it all: the marker, then the arguments. */
        api.pushlightuserdata(L, &MARK_PRELUDE);
        api.replace(L, 2);
        return top - 1;
    }
    M->window = (int32_t)c;  /* as the prelude charges: not overdrawn, within the window */
    r->crossed++;

    PyGILState_STATE gil = PyGILState_Ensure();
    /* The dispatcher's arguments: the index (for a flat table, -1 - id: see flat_call),
     * then the call's. */
    PyObject *argv[CROSSING_MAX_ARGS + 1];
    int made = 0;
    PyObject *answer = NULL;
    int directed = 0;  /* a direct answer served the call */
    argv[0] = PyLong_FromDouble(api.tonumber(L, 1));
    if (argv[0] != NULL) {
        for (made = 1; made <= nargs; made++) {
            argv[made] = from_lua(L, made + 2);
            if (argv[made] == NULL) {
                break;
            }
        }
        if (made == nargs + 1) {
            /* (A flat table's call, walked here or by the prelude: -1 - id.) */
            long long id = (long long)api.tonumber(L, 1);
            PyObject *table = id < 0 ? r->pairs_directs : r->directs;
            id = id < 0 ? -1 - id : id;
            if (table != NULL && id >= 0 && id < PyTuple_GET_SIZE(table) &&
                    PyTuple_GET_ITEM(table, id) != Py_None) {
                /* Held through the call: another thread (the watchdog abandoning the
                 * runtime) may drop the tuple meanwhile. */
                PyObject *direct = Py_NewRef(PyTuple_GET_ITEM(table, id));
                answer = PyObject_Vectorcall(direct, argv + 1,
                                             (size_t)nargs | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                             NULL);
                Py_DECREF(direct);
                if (answer == Py_None) {
                    Py_DECREF(answer);
                    answer = PyObject_Vectorcall(r->dispatch, argv, (size_t)made, NULL);
                } else if (answer != NULL) {
                    directed = 1;
                    r->directed++;
                }
            } else {
                answer = PyObject_Vectorcall(r->dispatch, argv, (size_t)made, NULL);
            }
        }
    }
    for (int i = 0; i < made; i++) {
        Py_DECREF(argv[i]);
    }
    /* The answer, read while the lock is held into plain C values (strings copied to the
     * binding's buffer), pushed once it is released: a push can raise a Lua error (out of
     * memory), which must not unwind past a held interpreter lock. */
    Answer out[ANSWER_MAX];
    int count = 0, kind = MARK_KIND_OK;
    if (answer == NULL) {
        /* The dispatcher answers every failure itself: what escapes it is the host's
         * own (an interrupt, or no memory for the conversions). An interrupt is raised
         * again in the host's main thread; the mod's call fails as a host failure. */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (type != NULL && PyErr_GivenExceptionMatches(type, PyExc_KeyboardInterrupt)) {
            PyErr_SetInterrupt();
        } else if (type != NULL) {
            PyErr_Restore(type, value, tb);
            PyErr_WriteUnraisable(r->dispatch);
            type = value = tb = NULL;
        }
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        kind = MARK_KIND_FAILED;
        r->used = 0;
        count = keep(r, &out[0], NULL) ? 1 : 0;
    } else if (PyTuple_CheckExact(answer)) {
        Py_ssize_t n = PyTuple_GET_SIZE(answer);
        r->used = 0;
        if (n == 2 && PyTuple_GET_ITEM(answer, 0) == r->failed &&
                PyBytes_CheckExact(PyTuple_GET_ITEM(answer, 1))) {
            kind = MARK_KIND_FAILED;
            count = keep(r, &out[0], PyTuple_GET_ITEM(answer, 1)) ? 1 : 0;
        } else if (n <= ANSWER_MAX) {
            for (count = 0; count < n; count++) {
                if (!keep(r, &out[count], PyTuple_GET_ITEM(answer, count))) {
                    break;
                }
            }
            if (count < n) {
                kind = MARK_KIND_TAKE;
            }
        } else {
            kind = MARK_KIND_TAKE;
        }
    } else {
        r->used = 0;
        count = 1;
        if (!keep(r, &out[0], answer)) {
            kind = MARK_KIND_TAKE;
        }
    }
    if (kind == MARK_KIND_TAKE && directed) {
        /* A direct answer answers plain values only (HostFunction.make_direct): one that
         * only lupa would convert is a host bug, failed as one, never handed over. */
        PyErr_SetString(PyExc_TypeError, "a direct answer answered other than plain values");
        PyErr_WriteUnraisable(r->dispatch);
        kind = MARK_KIND_FAILED;
        count = 1;
        out[0].type = LUA_TSTRING;
        out[0].len = 0;
        out[0].off = (size_t)-1;
    } else if (kind == MARK_KIND_TAKE) {
        Py_XSETREF(r->taken, answer);
        answer = NULL;
        count = 0;
    } else if (kind == MARK_KIND_FAILED && count == 0) {
        count = 1;  /* no memory for the message: the generic one */
        out[0].type = LUA_TSTRING;
        out[0].len = 0;
        out[0].off = (size_t)-1;
    }
    Py_XDECREF(answer);
    PyGILState_Release(gil);

    api.settop(L, 0);
    api.checkstack(L, count + 1);
    api.pushlightuserdata(L, kind == MARK_KIND_OK ? &MARK_OK
                             : kind == MARK_KIND_TAKE ? (void *)&MARK_TAKE : &MARK_FAILED);
    for (int i = 0; i < count; i++) {
        Answer *a = &out[i];
        if (a->type == LUA_TNIL) {
            api.pushnil(L);
        } else if (a->type == LUA_TBOOLEAN) {
            api.pushboolean(L, a->num != 0);
        } else if (a->type == LUA_TNUMBER) {
            api.pushnumber(L, a->num);
        } else if (a->off == (size_t)-1) {
            api.pushstring(L, "host function failed");
        } else {
            api.pushlstring(L, r->buffer + a->off, a->len);
        }
    }
    return count + 1;
}

#define LUA_MULTRET (-1)

static int
stack_overflow(lua_State *L)
{
    /* A C function has room for a few values whatever its arguments (LUA_MINSTACK). */
    api.pushstring(L, "stack overflow");
    return api.error(L);
}

/* A host function's crossing bound to the function (c_bind): upvalues the binding, the
 * function's id and cost, and the prelude's c_after (dispatch.lua). The commonest answer,
 * C_OK and the results, is the function's own; any other goes to c_after as it would
 * from the prelude's closure, with the marker and what follows it. The host function is
 * then this C closure, not a Lua closure around c_host: a call runs no Lua of the
 * prelude's when it crosses here. */
static int
c_host_bound(lua_State *L)
{
    /* Room for the id and cost, then for c_after, id and cost before an answer that keeps
     * the arguments (the prelude's way, a table to walk). A call with nearly as many
     * arguments as a stack holds fails as the prelude's closure's call would. */
    if (!api.checkstack(L, 5)) {
        return stack_overflow(L);
    }
    api.pushvalue(L, UPVALUE(2));
    api.insert(L, 1);
    api.pushvalue(L, UPVALUE(3));
    api.insert(L, 2);
    int k = c_host(L);  /* its answer: the top k values */
    int base = api.gettop(L) - k;
    if (k > 0 && api.touserdata(L, base + 1) == &MARK_OK) {
        api.remove(L, base + 1);
        return k - 1;
    }
    if (!api.checkstack(L, 3)) {
        return stack_overflow(L);
    }
    api.pushvalue(L, UPVALUE(4));
    api.insert(L, base + 1);
    api.pushvalue(L, UPVALUE(2));
    api.insert(L, base + 2);
    api.pushvalue(L, UPVALUE(3));
    api.insert(L, base + 3);
    api.call(L, k + 2, LUA_MULTRET);
    return api.gettop(L) - base;
}

/* c_bind(id, cost, after): the host function `id` as c_host_bound. */
static int
c_bind(lua_State *L)
{
    api.settop(L, 3);
    api.pushlightuserdata(L, api.touserdata(L, UPVALUE(1)));
    api.insert(L, 1);
    api.pushcclosure(L, c_host_bound, 4);
    return 1;
}

/* bind's work in the runtime, protected: the crossing and its markers in the registry. */
static int
register_protected(lua_State *L)
{
    Resumer *r = api.touserdata(L, 1);
    api.pushlightuserdata(L, r);
    api.pushcclosure(L, c_host, 1);
    api.setfield(L, LUA_REGISTRYINDEX, "moonbox.c_host");
    api.pushlightuserdata(L, r);
    api.pushcclosure(L, c_bind, 1);
    api.setfield(L, LUA_REGISTRYINDEX, "moonbox.c_bind");
    api.pushlightuserdata(L, &MARK_OK);
    api.setfield(L, LUA_REGISTRYINDEX, "moonbox.c_ok");
    api.pushlightuserdata(L, &MARK_PRELUDE);
    api.setfield(L, LUA_REGISTRYINDEX, "moonbox.c_prelude");
    api.pushlightuserdata(L, &MARK_TAKE);
    api.setfield(L, LUA_REGISTRYINDEX, "moonbox.c_take");
    api.pushlightuserdata(L, &MARK_FAILED);
    api.setfield(L, LUA_REGISTRYINDEX, "moonbox.c_failed");
    api.pushlightuserdata(L, &MARK_FLAT);
    api.setfield(L, LUA_REGISTRYINDEX, "moonbox.c_flat");
    return 0;
}

PyDoc_STRVAR(bind_doc,
"bind(library, holder, meter, memory_error, lua_error, dispatch, failed, flat_items=0,\n"
"     flat_bytes=0) -> Resumer\n\n"
"Bind to a runtime: ``library`` is lupa's LuaJIT extension module, ``holder`` the address\n"
"of a coroutine of the runtime never resumed (the thread host.call_end is called on, from\n"
"the registry's \"moonbox.call_end\"), ``meter`` the address of the runtime's\n"
"moonbox_meter; the two exception classes are raised for a failure of host.call_end (out\n"
"of memory, or any other). With ``dispatch`` (the sandbox's dispatcher) and ``failed``\n"
"(the first value of its failure answers), it also puts the compiled crossing of host\n"
"calls in the runtime's registry, for the host functions made after it; a flat table\n"
"argument of at most ``flat_items`` entries and ``flat_bytes`` bytes (the sandbox's value\n"
"limits) with string keys, it walks itself. None where the API is missing.");

static PyObject *
bind(PyObject *self, PyObject *args)
{
    const char *library;
    unsigned long long holder, meter;
    PyObject *memory_error, *lua_error, *dispatch, *failed;
    long long flat_items = 0, flat_bytes = 0;
    if (!PyArg_ParseTuple(args, "sKKOOOO|LL:bind", &library, &holder, &meter, &memory_error,
                          &lua_error, &dispatch, &failed, &flat_items, &flat_bytes)) {
        return NULL;
    }
    if (holder == 0 || meter == 0 || !load_api(library)) {
        Py_RETURN_NONE;
    }
    Resumer *r = PyObject_GC_New(Resumer, &ResumerType);
    if (r == NULL) {
        return NULL;
    }
    r->thread = (lua_State *)(uintptr_t)holder;
    r->meter = (Meter *)(uintptr_t)meter;
    r->open = 1;
    Py_INCREF(memory_error);
    r->memory_error = memory_error;
    Py_INCREF(lua_error);
    r->lua_error = lua_error;
    r->dispatch = NULL;
    r->failed = NULL;
    r->taken = NULL;
    r->directs = r->pairs_directs = NULL;
    r->crossed = r->walked = r->directed = 0;
    r->flat_items = flat_items;
    r->flat_bytes = flat_bytes;
    r->k_co = r->k_figures = r->k_id = r->k_wall = r->k_late = NULL;
    r->buffer = NULL;
    r->used = r->capacity = 0;
    PyObject_GC_Track(r);
    if (dispatch != Py_None) {
        if (api.cpcall(r->thread, register_protected, r) != 0) {
            api.settop(r->thread, 0);  /* no crossing: host functions take lupa's */
        } else {
            Py_INCREF(dispatch);
            r->dispatch = dispatch;
            Py_INCREF(failed);
            r->failed = failed;
        }
    }
    return (PyObject *)r;
}

static PyObject *
resumer_close(Resumer *r, PyObject *unused)
{
    r->open = 0;
    Py_CLEAR(r->taken);
    Py_CLEAR(r->directs);
    Py_CLEAR(r->pairs_directs);
    Py_RETURN_NONE;
}

static PyObject *
resumer_set_directs(Resumer *r, PyObject *args)
{
    PyObject *plain, *pairs;
    if (!PyArg_ParseTuple(args, "OO:set_directs", &plain, &pairs)) {
        return NULL;
    }
    if ((plain != Py_None && !PyTuple_CheckExact(plain)) ||
            (pairs != Py_None && !PyTuple_CheckExact(pairs))) {
        PyErr_SetString(PyExc_TypeError, "set_directs takes two tuples or None");
        return NULL;
    }
    Py_XSETREF(r->directs, plain == Py_None ? NULL : Py_NewRef(plain));
    Py_XSETREF(r->pairs_directs, pairs == Py_None ? NULL : Py_NewRef(pairs));
    Py_RETURN_NONE;
}

static PyObject *
resumer_take(Resumer *r, PyObject *unused)
{
    PyObject *taken = r->taken;
    r->taken = NULL;
    if (taken == NULL) {
        Py_RETURN_NONE;
    }
    return taken;
}

static int
resumer_traverse(Resumer *r, visitproc visit, void *arg)
{
    Py_VISIT(r->dispatch);
    Py_VISIT(r->failed);
    Py_VISIT(r->taken);
    Py_VISIT(r->directs);
    Py_VISIT(r->pairs_directs);
    return 0;
}

static int
resumer_clear(Resumer *r)
{
    r->open = 0;  /* what the crossing calls is gone: it answers the prelude's way */
    Py_CLEAR(r->k_co);
    Py_CLEAR(r->k_figures);
    Py_CLEAR(r->k_id);
    Py_CLEAR(r->k_wall);
    Py_CLEAR(r->k_late);
    Py_CLEAR(r->dispatch);
    Py_CLEAR(r->failed);
    Py_CLEAR(r->taken);
    Py_CLEAR(r->directs);
    Py_CLEAR(r->pairs_directs);
    return 0;
}

static void
resumer_dealloc(Resumer *r)
{
    PyObject_GC_UnTrack(r);
    resumer_clear(r);
    Py_XDECREF(r->memory_error);
    Py_XDECREF(r->lua_error);
    free(r->buffer);
    PyObject_GC_Del(r);
}

static PyMethodDef resumer_methods[] = {
    {"close", (PyCFunction)resumer_close, METH_NOARGS,
     "The runtime is closing: every later call answers NotImplemented, every host call "
     "the crossing gets goes the prelude's way."},
    {"set_directs", (PyCFunction)resumer_set_directs, METH_VARARGS,
     "Host functions answered without the dispatcher: two tuples by index (plain calls, "
     "calls with a walked flat table) of callables or None, or None. A direct callable "
     "gets the call's arguments as the dispatcher would after the index and answers as it "
     "does, or None to send the call to the dispatcher."},
    {"take", (PyCFunction)resumer_take, METH_NOARGS,
     "The answer of the last host call the crossing could not convert itself (see "
     "host.set_c_take)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef resumer_members[] = {
    {"crossed", T_ULONGLONG, offsetof(Resumer, crossed), READONLY,
     "How many host calls the compiled crossing made itself."},
    {"walked", T_ULONGLONG, offsetof(Resumer, walked), READONLY,
     "Of those, how many had a flat table argument the crossing walked itself."},
    {"directed", T_ULONGLONG, offsetof(Resumer, directed), READONLY,
     "Of those, how many a direct answer served (see set_directs)."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ResumerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "moonbox.sandbox._resume.Resumer",
    .tp_basicsize = sizeof(Resumer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A sandbox runtime's compiled resume and host crossing (see bind).",
    .tp_dealloc = (destructor)resumer_dealloc,
    .tp_traverse = (traverseproc)resumer_traverse,
    .tp_clear = (inquiry)resumer_clear,
    .tp_methods = resumer_methods,
    .tp_members = resumer_members,
};

/* A number as lupa gives it to Python: an int when it is one, else a float. */
static PyObject *
number(double d)
{
    if (d == floor(d) && fabs(d) < 9007199254740992.0) {
        return PyLong_FromLongLong((long long)d);
    }
    return PyFloat_FromDouble(d);
}


/* host.call_end(id, ok, kb, plain, ...values) on the call thread, protected. */
typedef struct {
    Resumer *r;
    lua_State *co;
    double id, kb;
    int ok, plain, values;
    int status;  /* host.call_end's: its message is then on the call thread */
} End;

static int
end_protected(lua_State *T)
{
    End *e = api.touserdata(T, 1);
    api.settop(T, 0);
    if (!api.checkstack(T, e->values + 5)) {
        return 0;  /* cannot fail in LuaJIT short of memory, which raises */
    }
    api.getfield(T, LUA_REGISTRYINDEX, "moonbox.call_end");
    api.pushnumber(T, e->id);
    api.pushboolean(T, e->ok);
    api.pushnumber(T, e->kb);
    api.pushboolean(T, e->plain);
    api.xmove(e->co, T, e->values);
    e->status = api.pcall(T, 4 + e->values, 0, 0);
    if (e->status != 0) {
        return api.error(T);  /* its message, out of this frame: cpcall's answer */
    }
    return 0;
}

/* How a compiled call ended (do_call). */
enum {
    CALL_PLAIN,    /* a yield of nothing within the budget: steps */
    CALL_FIGURES,  /* the same, its figures changed: steps, peak, heap (block: moved) */
    CALL_DEAD,     /* the run was over: nothing ran */
    CALL_OTHER,    /* any other end: host.take_end has the answer */
    CALL_NOTIMPL,  /* take host.call's way: nothing changed */
    CALL_ERROR,    /* host.call_end failed: the exception is set */
};

typedef struct {
    double steps, peak, heap;
    int moved;  /* CALL_FIGURES: the heap moved to another 64 KiB block */
} CallFigures;

/* host.call(id, start, growth_limited, fresh, ...args), compiled (see call_doc): the
 * arguments None, booleans, ints or floats (anything else: CALL_NOTIMPL, as for more than
 * 16 of them). */
static int
do_call(Resumer *r, lua_State *co, RunFigures *run, double id, double start,
        int growth_limited, int fresh, PyObject *const *args, int n, CallFigures *out)
{
    Meter *M = r->meter;
    if (!r->open || co == NULL || run == NULL || M->hook_pending || M->tripped || M->active) {
        return CALL_NOTIMPL;
    }
    if (run->dead) {
        return CALL_DEAD;
    }
    if (api.status(co) != LUA_YIELD || api.gettop(co) != 0 || n > 16) {
        return CALL_NOTIMPL;  /* a suspended coroutine has room for 16 arguments */
    }
    for (int i = 0; i < n; i++) {  /* checked first: nothing is pushed for a refusal */
        PyObject *v = args[i];
        if (!(v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) ||
              PyFloat_CheckExact(v))) {
            return CALL_NOTIMPL;
        }
    }
    for (int i = 0; i < n; i++) {
        PyObject *v = args[i];
        if (v == Py_None) {
            api.pushnil(co);
        } else if (PyBool_Check(v)) {
            api.pushboolean(co, v == Py_True);
        } else if (PyLong_CheckExact(v)) {
            double d = PyLong_AsDouble(v);
            if (d == -1.0 && PyErr_Occurred()) {
                PyErr_Clear();
                api.settop(co, 0);
                return CALL_NOTIMPL;  /* too large for a double: host.call refuses it */
            }
            api.pushnumber(co, d);
        } else {
            api.pushnumber(co, PyFloat_AS_DOUBLE(v));
        }
    }

    /* begin (runs.lua), on the struct. */
    if (fresh) {
        M->heap_block = -1;
    }
    double kb = heap_kb(co);
    M->used = 0;
    M->total_base = run->total;
    M->run_co = (double)(uintptr_t)co;
    M->peak_kb = kb;
    M->start_kb = kb;
    M->alloc_kb = kb + M->alloc_bytes / 1024;
    M->growth_limited = growth_limited;
    M->host_call_max_kb = growth_limited ? M->alloc_kb - M->margin_kb
                                         : M->max_memory / 1024 - M->margin_kb;
    M->start = start;
    M->last_poll = start;
    M->deadline = start + M->wall_s;
    if (M->k > K_START_MAX) {
        M->k = K_START_MAX;
    }
    double w = M->k;  /* refill */
    double left = M->steps - M->used;
    if (left < w) {
        w = left;
    }
    if (M->total_limit >= 0) {
        double total_left = M->total_limit - M->total_base - M->used;
        if (total_left < w) {
            w = total_left;
        }
    }
    if (w < 0) {
        w = 0;
    }
    M->granted = w;
    M->window = (int32_t)w;
    M->poll = 0;
    M->active = true;

    int status;
    Py_BEGIN_ALLOW_THREADS
    status = api.resume(co, n);
    Py_END_ALLOW_THREADS

    /* settle (runs.lua). */
    M->active = false;
    int ok = status == 0 || status == LUA_YIELD;
    if (!ok) {
        run->dead = true;
    }
    int32_t c = M->window;
    if (c > STICKY / 2) {
        M->used += M->granted - c;
    }
    M->granted = c;
    M->run_co = 0;
    kb = heap_kb(co);
    if (kb > M->peak_kb) {
        M->peak_kb = kb;
    }
    if (M->used < 0) {
        M->used = 0;
    }
    run->total += M->used;
    int plain = ok && !M->tripped && kb <= M->alloc_kb;
    int values = ok ? api.gettop(co) : 1;
    if (plain && status == LUA_YIELD && values == 0) {
        double peak = M->peak_kb * 1024, block = floor(kb / 64);
        out->steps = M->used;
        if (peak > run->peak || block != M->heap_block) {
            if (peak > run->peak) {
                run->peak = peak;
            }
            out->moved = block != M->heap_block;
            M->heap_block = block;
            out->peak = run->peak;
            out->heap = kb * 1024;
            return CALL_FIGURES;
        }
        return CALL_PLAIN;
    }
    /* Any other end: host.call_end answers it, as ends.call would, with the values the
     * coroutine answered (the top of its stack: for an error, the error value alone; the
     * rest stays, for the frames of the traceback). */
    End e = {r, co, id, kb, ok, plain, values, 0};
    int failed = api.cpcall(r->thread, end_protected, &e);
    if (failed) {
        if (e.status != 0) {
            failed = e.status;  /* host.call_end's own, raised again by end_protected */
        }
        size_t len = 0;
        const char *message = api.tolstring(r->thread, -1, &len);
        PyObject *kind = failed == LUA_ERRMEM ? r->memory_error : r->lua_error;
        if (message != NULL) {
            PyErr_Format(kind, "%s", message);
        } else {
            PyErr_Format(kind, "host.call_end failed (an error value of type %d)",
                         api.type(r->thread, -1));
        }
        api.settop(r->thread, 0);
        return CALL_ERROR;
    }
    api.settop(r->thread, 0);
    return CALL_OTHER;
}

/* do_call's end as host.call answers it: the steps, (0, steps, peak, heap), False, None,
 * NotImplemented; NULL for CALL_ERROR. */
static PyObject *
call_answer(int kind, const CallFigures *f)
{
    switch (kind) {
    case CALL_PLAIN:
        return number(f->steps);
    case CALL_FIGURES:
        return Py_BuildValue("(iNNN)", 0, number(f->steps), number(f->peak),
                             number(f->heap));
    case CALL_DEAD:
        Py_RETURN_FALSE;
    case CALL_OTHER:
        Py_RETURN_NONE;
    case CALL_NOTIMPL:
        Py_RETURN_NOTIMPLEMENTED;
    default:
        return NULL;
    }
}

PyDoc_STRVAR(call_doc,
"call(resumer, co, run, id, start, growth_limited, fresh, *args)\n\n"
"host.call(id, start, growth_limited, fresh, *args), compiled: ``co`` and ``run`` are the\n"
"addresses host.run_addresses gave for run ``id``, the arguments numbers, booleans or\n"
"None. Answers the steps (a plain yield), (0, steps, peak, heap) (a plain yield whose\n"
"figures changed), False (the run is over), None (any other end: host.take_end has the\n"
"answer) or NotImplemented (take host.call's way; nothing changed).");

static PyObject *
call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 7 || Py_TYPE(args[0]) != &ResumerType) {
        PyErr_SetString(PyExc_TypeError, "call(resumer, co, run, id, start, growth_limited, "
                        "fresh, *args)");
        return NULL;
    }
    Resumer *r = (Resumer *)args[0];
    lua_State *co = (lua_State *)PyLong_AsVoidPtr(args[1]);
    RunFigures *run = (RunFigures *)PyLong_AsVoidPtr(args[2]);
    double id = PyFloat_AsDouble(args[3]);
    double start = PyFloat_AsDouble(args[4]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    int growth_limited = PyObject_IsTrue(args[5]);
    int fresh = PyObject_IsTrue(args[6]);
    if (growth_limited < 0 || fresh < 0) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    CallFigures f;
    int kind = do_call(r, co, run, id, start, growth_limited, fresh, args + 7,
                       (int)(nargs - 7), &f);
    return call_answer(kind, &f);
}

/* Run.call compiled (_run.py): the same checks of the run's and its sandbox's steady
 * state, read from their slots, the same bookkeeping of a plain end. For a host that
 * calls many runs in a row from C (the engine's tick, moonbox/engine/_tick.c), through
 * the capsule below: Python runs only for the calls that need it. */

/* The slots it reads and writes, by their offsets in Run and Sandbox (set_up). */
static struct {
    PyTypeObject *run_type, *sandbox_type;
    PyObject *monotonic, *process_time;  /* the clocks a sandbox may read */
    Py_ssize_t run_sandbox, run_open, run_reports, run_dropped_now, run_report_chars,
        run_c_co, run_c_run, run_id, run_peak;
    Py_ssize_t sb_running, sb_call_limit, sb_current_limit, sb_lua_budget, sb_budget,
        sb_dropped, sb_watchdog, sb_start, sb_deadline, sb_wall_s_limit, sb_late_s,
        sb_growth, sb_fresh, sb_clock, sb_resumer;
    int ready;
} steady;

/* The sandbox's clock, read as time.monotonic and time.process_time read it. */
static double
clock_now(int process)
{
    struct timespec ts;
    clock_gettime(process ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    return (double)ns / 1e9;
}

PyDoc_STRVAR(set_up_doc,
"set_up(Run, Sandbox, monotonic, process_time)\n\n"
"The classes whose slots run_call reads and the clocks a sandbox reads (time.monotonic,\n"
"time.process_time). Until it is called, run_call answers RUN_BEFORE.");

static PyObject *
set_up(PyObject *self, PyObject *args)
{
    PyObject *run, *sandbox, *monotonic, *process_time;
    if (!PyArg_ParseTuple(args, "O!O!OO:set_up", &PyType_Type, &run, &PyType_Type, &sandbox,
                          &monotonic, &process_time)) {
        return NULL;
    }
#define RUN(field, name) if ((steady.field = slot_offset(run, name)) < 0) return NULL;
#define SB(field, name) if ((steady.field = slot_offset(sandbox, name)) < 0) return NULL;
    RUN(run_sandbox, "sandbox") RUN(run_open, "_open") RUN(run_reports, "reports")
    RUN(run_dropped_now, "reports_dropped_now") RUN(run_report_chars, "_report_chars")
    RUN(run_c_co, "_c_co") RUN(run_c_run, "_c_run") RUN(run_id, "_id")
    RUN(run_peak, "peak_bytes")
    SB(sb_running, "_running") SB(sb_call_limit, "_call_limit")
    SB(sb_current_limit, "_current_limit") SB(sb_lua_budget, "_lua_budget")
    SB(sb_budget, "budget") SB(sb_dropped, "_dropped") SB(sb_watchdog, "_watchdog")
    SB(sb_start, "_start") SB(sb_deadline, "_deadline") SB(sb_wall_s_limit, "_wall_s_limit")
    SB(sb_late_s, "_late_s") SB(sb_growth, "_call_growth_limited")
    SB(sb_fresh, "_call_fresh") SB(sb_clock, "_clock") SB(sb_resumer, "_resumer")
#undef RUN
#undef SB
    Py_INCREF(run);
    Py_XSETREF(steady.run_type, (PyTypeObject *)run);
    Py_INCREF(sandbox);
    Py_XSETREF(steady.sandbox_type, (PyTypeObject *)sandbox);
    Py_INCREF(monotonic);
    Py_XSETREF(steady.monotonic, monotonic);
    Py_INCREF(process_time);
    Py_XSETREF(steady.process_time, process_time);
    steady.ready = 1;
    Py_RETURN_NONE;
}

/* A slot holding a float or an int, as a double; NAN when it holds neither. */
static inline double
slot_double(PyObject *o, Py_ssize_t off)
{
    PyObject *v = SLOT(o, off);
    if (v != NULL && PyFloat_CheckExact(v)) {
        return PyFloat_AS_DOUBLE(v);
    }
    if (v != NULL && PyLong_CheckExact(v)) {
        double d = PyLong_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return NAN;
        }
        return d;
    }
    return NAN;
}

/* An int slot's value, when it is an int of at most 2^53 either way. */
static inline int
slot_exact(PyObject *o, Py_ssize_t off, long long *out)
{
    PyObject *v = SLOT(o, off);
    if (v == NULL || !PyLong_CheckExact(v)) {
        return 0;
    }
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (n == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = n;
    return n >= -(1LL << 53) && n <= (1LL << 53);
}

/* Run.call(start, *args) compiled: see _resume.h. */
static int
run_call(PyObject *run, double start, PyObject *const *args, int n, RunCall *out)
{
    if (!steady.ready || Py_TYPE(run) != steady.run_type || n > 8) {
        return RUN_BEFORE;
    }
    PyObject *sb = SLOT(run, steady.run_sandbox);
    if (sb == NULL || Py_TYPE(sb) != steady.sandbox_type) {
        return RUN_BEFORE;
    }
    PyObject *limit = SLOT(sb, steady.sb_call_limit);
    PyObject *current = SLOT(sb, steady.sb_current_limit);
    if (SLOT(sb, steady.sb_running) != Py_None || limit == NULL || current == NULL ||
            PyObject_RichCompareBool(limit, current, Py_EQ) != 1 ||
            truth(run, steady.run_open) != 1 ||
            SLOT(sb, steady.sb_lua_budget) != SLOT(sb, steady.sb_budget) ||
            truth(sb, steady.sb_dropped) != 0 || SLOT(sb, steady.sb_watchdog) != Py_None) {
        PyErr_Clear();
        return RUN_BEFORE;
    }
    for (int i = 0; i < n; i++) {
        PyObject *v = args[i];
        if (PyLong_CheckExact(v)) {
            int overflow = 0;
            long long k = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow || k > (1LL << 53) || k < -(1LL << 53)) {
                PyErr_Clear();
                return RUN_BEFORE;
            }
        } else if (!(PyFloat_CheckExact(v) || v == Py_None || PyBool_Check(v))) {
            return RUN_BEFORE;
        }
    }
    PyObject *clock = SLOT(sb, steady.sb_clock);
    int process = clock == steady.process_time;
    Resumer *r = (Resumer *)SLOT(sb, steady.sb_resumer);
    if ((clock != steady.monotonic && !process) || r == NULL ||
            Py_TYPE(r) != &ResumerType) {
        return RUN_BEFORE;
    }
    /* The numbers behind the slots, read again only when a slot holds another object. */
    PyObject *k_co = SLOT(run, steady.run_c_co), *k_figures = SLOT(run, steady.run_c_run);
    PyObject *k_id = SLOT(run, steady.run_id);
    if (k_co == NULL || k_co != r->k_co || k_figures != r->k_figures || k_id != r->k_id) {
        long long co = 0, figures = 0, id = 0;
        Py_CLEAR(r->k_co);
        if (!slot_exact(run, steady.run_c_co, &co) ||
                !slot_exact(run, steady.run_c_run, &figures) || co == 0 || figures == 0 ||
                !slot_exact(run, steady.run_id, &id)) {
            return RUN_BEFORE;
        }
        r->co = co, r->figures = figures, r->id = id;
        Py_INCREF(k_co);
        Py_XSETREF(r->k_co, k_co);
        Py_INCREF(k_figures);
        Py_XSETREF(r->k_figures, k_figures);
        Py_INCREF(k_id);
        Py_XSETREF(r->k_id, k_id);
    }
    PyObject *k_wall = SLOT(sb, steady.sb_wall_s_limit), *k_late = SLOT(sb, steady.sb_late_s);
    if (k_wall == NULL || k_wall != r->k_wall || k_late != r->k_late) {
        Py_CLEAR(r->k_wall);
        r->wall = slot_double(sb, steady.sb_wall_s_limit);
        r->late = slot_double(sb, steady.sb_late_s);
        if (isnan(r->wall) || isnan(r->late)) {
            return RUN_BEFORE;
        }
        Py_INCREF(k_wall);
        Py_XSETREF(r->k_wall, k_wall);
        Py_INCREF(k_late);
        Py_XSETREF(r->k_late, k_late);
    }
    double wall_s = r->wall, late_s = r->late;
    int growth_limited = truth(sb, steady.sb_growth), fresh = truth(sb, steady.sb_fresh);
    if (growth_limited < 0 || fresh < 0) {
        return RUN_BEFORE;
    }
    /* The caps are per call: the host took the last call's reports. */
    PyObject *reports = SLOT(run, steady.run_reports);
    if (reports == NULL || !PyList_CheckExact(reports)) {
        return RUN_BEFORE;
    }
    if (PyList_GET_SIZE(reports) != 0 || truth(run, steady.run_dropped_now) != 0) {
        if (PyList_SetSlice(reports, 0, PyList_GET_SIZE(reports), NULL) < 0 ||
                set_slot(run, steady.run_report_chars, PyLong_FromLong(0)) < 0 ||
                set_slot(run, steady.run_dropped_now, PyLong_FromLong(0)) < 0) {
            PyErr_Clear();
            return RUN_BEFORE;
        }
    }
    if (isnan(start)) {
        start = clock_now(process);
    }
    /* After the deadline, the run: the alarm reads them in this order. */
    if (set_slot(sb, steady.sb_start, PyFloat_FromDouble(start)) < 0 ||
            set_slot(sb, steady.sb_deadline, PyFloat_FromDouble(start + wall_s)) < 0) {
        PyErr_Clear();
        return RUN_BEFORE;
    }
    Py_INCREF(run);
    set_slot(sb, steady.sb_running, run);
    out->start = start;
    out->process = process;
    CallFigures f;
    int kind = do_call(r, (lua_State *)(uintptr_t)r->co, (RunFigures *)(uintptr_t)r->figures,
                       (double)r->id, start, growth_limited, fresh, args, n, &f);
    double end = clock_now(process);
    double wall = end - start;
    if ((kind == CALL_PLAIN || (kind == CALL_FIGURES && !f.moved)) && wall <= late_s) {
        /* A peak alone changed: the allocator's limit stays (Sandbox._limit_calls: it
         * follows the heap's 64 KiB block, with a block to spare). */
        Py_INCREF(Py_None);
        set_slot(sb, steady.sb_running, Py_None);
        out->end = end;
        out->wall = wall;
        out->steps = f.steps;
        out->peaked = 0;
        if (kind == CALL_FIGURES && !(f.peak <= slot_double(run, steady.run_peak))) {
            if (set_slot(run, steady.run_peak, number(f.peak)) < 0) {
                return RUN_FAILED;
            }
            out->peaked = 1;
        }
        return RUN_PLAIN;
    }
    out->res = call_answer(kind, &f);
    return RUN_ENDED;
}

static ResumeAPI resume_api = {run_call, clock_now};

PyDoc_STRVAR(layout_doc,
"layout() -> ((size, ((field, offset), ...)), (size, ((field, offset), ...)))\n\n"
"How this module lays out moonbox_meter and moonbox_run, which meter.lua declares to the\n"
"FFI too: the two must agree, field for field.");

typedef struct {
    const char *name;
    size_t offset;
} Field;

#define FIELD(type, name) {#name, offsetof(type, name)}
static const Field METER_FIELDS[] = {
    FIELD(Meter, window), FIELD(Meter, poll), FIELD(Meter, active), FIELD(Meter, tripped),
    FIELD(Meter, growth_limited), FIELD(Meter, preempt), FIELD(Meter, hook_pending),
    FIELD(Meter, host_call_max_kb), FIELD(Meter, granted), FIELD(Meter, used),
    FIELD(Meter, total_base), FIELD(Meter, start), FIELD(Meter, deadline),
    FIELD(Meter, alloc_kb), FIELD(Meter, start_kb), FIELD(Meter, peak_kb), FIELD(Meter, k),
    FIELD(Meter, last_poll), FIELD(Meter, run_co), FIELD(Meter, heap_block),
    FIELD(Meter, margin_kb), FIELD(Meter, steps), FIELD(Meter, wall_s),
    FIELD(Meter, total_limit), FIELD(Meter, alloc_bytes), FIELD(Meter, max_memory),
};
static const Field RUN_FIELDS[] = {
    FIELD(RunFigures, total), FIELD(RunFigures, peak), FIELD(RunFigures, dead),
};
#undef FIELD

/* (size, ((field, offset), ...)) of one struct. */
static PyObject *
struct_layout(size_t size, const Field *fields, size_t n)
{
    PyObject *items = PyTuple_New((Py_ssize_t)n);
    if (items == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        PyObject *item = Py_BuildValue("(sn)", fields[i].name, (Py_ssize_t)fields[i].offset);
        if (item == NULL) {
            Py_DECREF(items);
            return NULL;
        }
        PyTuple_SET_ITEM(items, (Py_ssize_t)i, item);
    }
    return Py_BuildValue("(nN)", (Py_ssize_t)size, items);
}

static PyObject *
layout(PyObject *self, PyObject *unused)
{
    return Py_BuildValue(
        "(NN)",
        struct_layout(sizeof(Meter), METER_FIELDS, sizeof METER_FIELDS / sizeof *METER_FIELDS),
        struct_layout(sizeof(RunFigures), RUN_FIELDS, sizeof RUN_FIELDS / sizeof *RUN_FIELDS));
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, bind_doc},
    {"layout", layout, METH_NOARGS, layout_doc},
    {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL, call_doc},
    {"set_up", set_up, METH_VARARGS, set_up_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef resume_module = {
    PyModuleDef_HEAD_INIT, "_resume",
    "The compiled resume of a sandbox's run: host.call without the prelude's bookkeeping.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__resume(void)
{
    if (PyType_Ready(&ResumerType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&resume_module);
    if (m == NULL) {
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(&resume_api, "moonbox.sandbox._resume.API", NULL);
    if (PyModule_AddObject(m, "API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
