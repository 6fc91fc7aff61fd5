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

#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
#undef FIND
    dlclose(h);  /* the module stays loaded: lupa holds it */
    api.ready = 1;
    return 1;
}

/* A sandbox's binding: its runtime's call thread, host.call_end, the meter. */
typedef struct {
    PyObject_HEAD
    lua_State *thread;  /* a coroutine of the runtime never resumed: the call thread */
    Meter *meter;
    int open;
    PyObject *memory_error;  /* lupa's LuaMemoryError, and its LuaError */
    PyObject *lua_error;
} Resumer;

static PyTypeObject ResumerType;

PyDoc_STRVAR(bind_doc,
"bind(library, holder, meter, memory_error, lua_error) -> Resumer\n\n"
"Bind to a runtime: ``library`` is lupa's LuaJIT extension module, ``holder`` the address\n"
"of a coroutine of the runtime never resumed (the thread host.call_end is called on, from\n"
"the registry's \"moonbox.call_end\"), ``meter`` the address of the runtime's\n"
"moonbox_meter; the two exception classes are raised for a failure of host.call_end (out\n"
"of memory, or any other). None where the API is missing.");

static PyObject *
bind(PyObject *self, PyObject *args)
{
    const char *library;
    unsigned long long holder, meter;
    PyObject *memory_error, *lua_error;
    if (!PyArg_ParseTuple(args, "sKKOO:bind", &library, &holder, &meter, &memory_error,
                          &lua_error)) {
        return NULL;
    }
    if (holder == 0 || meter == 0 || !load_api(library)) {
        Py_RETURN_NONE;
    }
    Resumer *r = PyObject_New(Resumer, &ResumerType);
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
    return (PyObject *)r;
}

static PyObject *
resumer_close(Resumer *r, PyObject *unused)
{
    r->open = 0;
    Py_RETURN_NONE;
}

static void
resumer_dealloc(Resumer *r)
{
    Py_XDECREF(r->memory_error);
    Py_XDECREF(r->lua_error);
    PyObject_Free(r);
}

static PyMethodDef resumer_methods[] = {
    {"close", (PyCFunction)resumer_close, METH_NOARGS,
     "The runtime is closing: every later call answers NotImplemented."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ResumerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "moonbox.sandbox._resume.Resumer",
    .tp_basicsize = sizeof(Resumer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A sandbox runtime's compiled resume (see bind).",
    .tp_dealloc = (destructor)resumer_dealloc,
    .tp_methods = resumer_methods,
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

static inline double
heap_kb(lua_State *L)
{
    /* collectgarbage("count"), exactly: the heap's bytes over 1024. */
    return (double)api.gc(L, LUA_GCCOUNT, 0) + (double)api.gc(L, LUA_GCCOUNTB, 0) / 1024.0;
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
    Meter *M = r->meter;
    if (!r->open || co == NULL || run == NULL || growth_limited < 0 || fresh < 0 ||
            M->hook_pending || M->tripped || M->active) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (run->dead) {
        Py_RETURN_FALSE;
    }
    if (api.status(co) != LUA_YIELD || api.gettop(co) != 0) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    int n = (int)(nargs - 7);
    if (n > 16) {
        Py_RETURN_NOTIMPLEMENTED;  /* a suspended coroutine has room for this many */
    }
    for (int i = 0; i < n; i++) {  /* checked first: nothing is pushed for a refusal */
        PyObject *v = args[7 + i];
        if (!(v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) ||
              PyFloat_CheckExact(v))) {
            Py_RETURN_NOTIMPLEMENTED;
        }
    }
    for (int i = 0; i < n; i++) {
        PyObject *v = args[7 + i];
        if (v == Py_None) {
            api.pushnil(co);
        } else if (PyBool_Check(v)) {
            api.pushboolean(co, v == Py_True);
        } else if (PyLong_CheckExact(v)) {
            api.pushnumber(co, PyLong_AsDouble(v));
        } else {
            api.pushnumber(co, PyFloat_AS_DOUBLE(v));
        }
    }
    if (PyErr_Occurred()) {
        api.settop(co, 0);
        return NULL;
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
        if (peak > run->peak || block != M->heap_block) {
            if (peak > run->peak) {
                run->peak = peak;
            }
            M->heap_block = block;
            PyObject *figures = PyTuple_New(4);
            if (figures == NULL) {
                return NULL;
            }
            PyTuple_SET_ITEM(figures, 0, PyLong_FromLong(0));
            PyTuple_SET_ITEM(figures, 1, number(M->used));
            PyTuple_SET_ITEM(figures, 2, number(run->peak));
            PyTuple_SET_ITEM(figures, 3, number(kb * 1024));
            return figures;
        }
        return number(M->used);
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
        return NULL;
    }
    api.settop(r->thread, 0);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, bind_doc},
    {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL, call_doc},
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
    return PyModule_Create(&resume_module);
}
