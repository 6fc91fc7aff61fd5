/* The engine's tick, compiled: step 2 of Game.tick (_dispatch.py), each mod in load order.
 *
 * Most mods, most ticks, do one thing: their one `tick` handler runs and yields nothing,
 * with nothing queued, no timer due and no task waiting. For those the loop here makes
 * the same checks Dispatch._run_mod_tick makes, reading the mod's slots, calls the handler
 * through the compiled Run.call (moonbox/sandbox/_resume.c, by its capsule) and accounts
 * the call for the mod's stats as Dispatch._call_tick_handler does: no Python runs for
 * such a call. Every other mod, and every call that ends otherwise (values, a failure,
 * a trip, reports to take, a late end), goes to the engine's Python, in its place in the
 * order, with the same state it would have had there:
 *
 *   slow(mod)                              Dispatch._tick_slow: the whole of the mod's tick
 *   finish(mod, run, cb, start, res, err)  Dispatch._tick_finish: a call that ran
 *   reported(mod, run, cb, start, steps)   Dispatch._tick_reported: a plain call that
 *                                          reported lines
 *   broken(mod, error)                     Dispatch._broken: this loop failed (no memory)
 *
 * The mod's id is on the game's chain while its call runs (an export call reads it);
 * finish pops it itself, after it has taken the run's end. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <math.h>

#include "../sandbox/_resume.h"
#include "../sandbox/_slots.h"


static const ResumeAPI *resume;

static struct {
    PyTypeObject *mod_type, *callback_type, *stats_type;
    PyObject *tick_name, *zero;
    Py_ssize_t mod_id, mod_quarantine, mod_run, mod_queue, mod_tasks, mod_isolated,
        mod_timers, mod_failures, mod_trips, mod_by_event, mod_emits, mod_stats, mod_tally;
    Py_ssize_t cb_id;
    Py_ssize_t st_peak;
    Py_ssize_t run_peak, run_reports, run_ended_at;
    int ready;
} k;

/* What the loop has accounted of a mod's calls since its stats last took it (Mod.stats
 * does, as it is read): one small object of the mod's instead of three numbers of its
 * ModStats made anew per call. */
typedef struct {
    PyObject_HEAD
    long long calls;
    double steps, wall;
} Tally;

static PyObject *
tally_take(Tally *t, PyObject *unused)
{
    PyObject *taken = Py_BuildValue("(LLd)", t->calls, (long long)t->steps, t->wall);
    if (taken != NULL) {
        t->calls = 0;
        t->steps = t->wall = 0;
    }
    return taken;
}

static PyObject *
tally_pending(Tally *t, void *unused)
{
    return PyBool_FromLong(t->calls != 0);
}

static PyMethodDef tally_methods[] = {
    {"take", (PyCFunction)tally_take, METH_NOARGS,
     "(calls, steps, wall_s) accounted since the last take, and zero again."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef tally_getset[] = {
    {"pending", (getter)tally_pending, NULL, "Whether a call was accounted since the last take.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TallyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "moonbox.engine._tick.Tally",
    .tp_basicsize = sizeof(Tally),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Tally(): a mod's calls accounted by the compiled tick, until its stats take them.",
    .tp_new = PyType_GenericNew,
    .tp_methods = tally_methods,
    .tp_getset = tally_getset,
};

PyDoc_STRVAR(set_up_doc,
"set_up(Mod, Callback, ModStats, Run)\n\n"
"The classes whose slots the tick reads and writes. Until it is called (and where the\n"
"compiled resume is missing), tick answers None and does nothing.");

static PyObject *
set_up(PyObject *self, PyObject *args)
{
    PyObject *mod, *callback, *stats, *run;
    if (!PyArg_ParseTuple(args, "O!O!O!O!:set_up", &PyType_Type, &mod, &PyType_Type,
                          &callback, &PyType_Type, &stats, &PyType_Type, &run)) {
        return NULL;
    }
    if (resume == NULL) {
        resume = PyCapsule_Import(MOONBOX_RESUME_CAPSULE, 0);
        if (resume == NULL) {
            return NULL;
        }
    }
#define S(field, type, name) if ((k.field = slot_offset(type, name)) < 0) return NULL;
    S(mod_id, mod, "id") S(mod_quarantine, mod, "quarantine") S(mod_run, mod, "_run")
    S(mod_queue, mod, "queue") S(mod_tasks, mod, "tasks") S(mod_isolated, mod, "_isolated")
    S(mod_timers, mod, "timers") S(mod_failures, mod, "failures_in_a_row")
    S(mod_trips, mod, "trips_in_a_row") S(mod_by_event, mod, "by_event")
    S(mod_emits, mod, "emits_this_tick") S(mod_stats, mod, "_stats") S(mod_tally, mod, "_tally")
    S(cb_id, callback, "id")
    S(st_peak, stats, "memory_peak_bytes")
    S(run_peak, run, "peak_bytes") S(run_reports, run, "reports")
    S(run_ended_at, run, "ended_at")
#undef S
    if (k.tick_name == NULL) {
        k.tick_name = PyUnicode_InternFromString("tick");
        k.zero = PyLong_FromLong(0);
        if (k.tick_name == NULL || k.zero == NULL) {
            return NULL;
        }
    }
    Py_INCREF(mod);
    Py_XSETREF(k.mod_type, (PyTypeObject *)mod);
    Py_INCREF(callback);
    Py_XSETREF(k.callback_type, (PyTypeObject *)callback);
    Py_INCREF(stats);
    Py_XSETREF(k.stats_type, (PyTypeObject *)stats);
    k.ready = 1;
    Py_RETURN_NONE;
}

/* The mod's one `tick` handler when its tick is that alone (the test of
 * Dispatch._run_mod_tick), else NULL; a borrowed reference. */
static PyObject *
steady_handler(PyObject *mod, PyObject *t)
{
    PyObject *run = SLOT(mod, k.mod_run);
    if (run == NULL || run == Py_None || truth(mod, k.mod_queue) != 0 ||
            truth(mod, k.mod_tasks) != 0 || truth(mod, k.mod_isolated) != 0 ||
            truth(mod, k.mod_failures) != 0 || truth(mod, k.mod_trips) != 0) {
        return NULL;
    }
    PyObject *timers = SLOT(mod, k.mod_timers);
    if (timers == NULL || !PyList_CheckExact(timers)) {
        return NULL;
    }
    if (PyList_GET_SIZE(timers) != 0) {  /* the next timer is not due */
        PyObject *first = PyList_GET_ITEM(timers, 0);
        if (!PyTuple_CheckExact(first) || PyTuple_GET_SIZE(first) < 1 ||
                PyObject_RichCompareBool(PyTuple_GET_ITEM(first, 0), t, Py_GT) != 1) {
            PyErr_Clear();
            return NULL;
        }
    }
    PyObject *by_event = SLOT(mod, k.mod_by_event);
    if (by_event == NULL || !PyDict_CheckExact(by_event)) {
        return NULL;
    }
    PyObject *handlers = PyDict_GetItemWithError(by_event, k.tick_name);
    if (handlers == NULL || !PyList_CheckExact(handlers) || PyList_GET_SIZE(handlers) != 1) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *cb = PyList_GET_ITEM(handlers, 0);
    if (Py_TYPE(cb) != k.callback_type || SLOT(cb, k.cb_id) == NULL) {
        return NULL;
    }
    return cb;
}

/* A plain call's figures in the mod's tally (its stats take them as they are read), and
 * its peak in its stats when the run's rose: as Dispatch._call_tick_handler adds them. */
static int
account(PyObject *mod, PyObject *run, const RunCall *c)
{
    Tally *tally = (Tally *)SLOT(mod, k.mod_tally);
    PyObject *stats = SLOT(mod, k.mod_stats);
    if (tally == NULL || Py_TYPE(tally) != &TallyType || stats == NULL ||
            Py_TYPE(stats) != k.stats_type) {
        PyErr_SetString(PyExc_TypeError, "a mod's tally or stats are not the engine's");
        return -1;
    }
    tally->calls++;
    tally->steps += c->steps;
    tally->wall += c->wall;
    if (!c->peaked) {
        return 0;  /* no higher than it was: the stats have seen it */
    }
    PyObject *peak = SLOT(run, k.run_peak), *had = SLOT(stats, k.st_peak);
    if (peak == NULL || had == NULL) {
        PyErr_SetString(PyExc_AttributeError, "peak_bytes");
        return -1;
    }
    int higher = PyObject_RichCompareBool(peak, had, Py_GT);
    if (higher < 0) {
        return -1;
    }
    if (higher) {
        Py_INCREF(peak);
        set_slot(stats, k.st_peak, peak);
    }
    return 0;
}

/* Calls fn(*args) for its effect; 0, or -1 with the exception set. */
static int
call_back(PyObject *fn, PyObject *const *args, size_t n)
{
    PyObject *r = PyObject_Vectorcall(fn, args, n, NULL);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* Pops the last id off the chain (the mod's, pushed for its call). */
static int
pop_chain(PyObject *chain)
{
    Py_ssize_t n = PyList_GET_SIZE(chain);
    return n > 0 ? PyList_SetSlice(chain, n - 1, n, NULL) : 0;
}

PyDoc_STRVAR(tick_doc,
"tick(mods, t, chain, slow, finish, reported, broken) -> int | None\n\n"
"Step 2 of tick ``t`` over ``mods`` (a list, in load order): each mod not quarantined\n"
"either gets its one ``tick`` handler called here or is handed to ``slow``; a call that\n"
"ran here and ended otherwise than plainly is handed to ``finish`` (or ``reported``);\n"
"should this loop itself fail for a mod, ``broken(mod, error)``.\n"
"Answers the calls made and accounted here, or None where there is no compiled tick\n"
"(nothing was done).");

static PyObject *
tick(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyList_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) ||
            !PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "tick(mods: list, t: int, chain: list, slow, "
                        "finish, reported, broken)");
        return NULL;
    }
    if (!k.ready || resume == NULL) {
        Py_RETURN_NONE;
    }
    PyObject *mods = args[0], *t = args[1], *chain = args[2];
    PyObject *slow = args[3], *finish = args[4], *reported = args[5], *broken = args[6];
    long calls = 0;
    double start = NAN;  /* the end of the last call made here, on the clock `process` */
    int process = -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(mods); i++) {
        if (PyErr_CheckSignals() < 0) {
            return NULL;
        }
        PyObject *mod = PyList_GET_ITEM(mods, i);
        Py_INCREF(mod);  /* the list is the caller's, and Python runs meanwhile */
        int failed = 0;
        PyObject *cb = NULL, *run = NULL;
        if (Py_TYPE(mod) != k.mod_type) {
            failed = call_back(slow, &mod, 1);
            start = NAN;
            goto next;
        }
        if (SLOT(mod, k.mod_quarantine) != Py_None) {
            goto next;  /* quarantined (or not set: Python says so in the slow way) */
        }
        cb = steady_handler(mod, t);
        if (cb == NULL) {
            failed = call_back(slow, &mod, 1);
            start = NAN;
            goto next;
        }
        Py_INCREF(cb);
        run = SLOT(mod, k.mod_run);
        Py_INCREF(run);
        Py_INCREF(k.zero);
        if (set_slot(mod, k.mod_emits, k.zero) < 0 || PyList_Append(chain, SLOT(mod, k.mod_id)) < 0) {
            failed = -2;
            goto next;
        }
        PyObject *call_args[2] = {SLOT(cb, k.cb_id), t};
        RunCall c = {0};
        /* A start read on another clock is no start: the call reads its own. */
        int ran = resume->run_call(run, process == -1 ? NAN : start, call_args, 2, &c);
        if (ran == RUN_PLAIN) {
            if (pop_chain(chain) < 0) {
                failed = -2;
                goto next;
            }
            start = c.end;
            process = c.process;
            /* The lines it reported: Python takes them (and accounts the call). */
            PyObject *lines = SLOT(run, k.run_reports);
            int any = lines != NULL && (!PyList_CheckExact(lines) || PyList_GET_SIZE(lines));
            if (any) {
                /* As Run.call leaves the run for the engine's Python to read. */
                PyObject *s = PyFloat_FromDouble(c.start), *n = PyLong_FromDouble(c.steps);
                if (s == NULL || n == NULL ||
                        set_slot(run, k.run_ended_at, PyFloat_FromDouble(c.end)) < 0) {
                    Py_XDECREF(s);
                    Py_XDECREF(n);
                    failed = -2;
                    goto next;
                }
                PyObject *argv[5] = {mod, run, cb, s, n};
                failed = call_back(reported, argv, 5);
                Py_DECREF(s);
                Py_DECREF(n);
                goto next;
            }
            if (account(mod, run, &c) < 0) {
                failed = -2;
                goto next;
            }
            calls++;
        } else if (ran == RUN_ENDED) {
            PyObject *error = NULL;
            PyObject *res = c.res;
            if (res == NULL) {
                PyObject *type, *tb;
                PyErr_Fetch(&type, &error, &tb);
                PyErr_NormalizeException(&type, &error, &tb);
                if (error != NULL && tb != NULL) {
                    PyException_SetTraceback(error, tb);
                }
                Py_XDECREF(type);
                Py_XDECREF(tb);
                res = Py_None;
                Py_INCREF(res);
            }
            PyObject *s = PyFloat_FromDouble(c.start);
            if (s == NULL) {
                Py_DECREF(res);
                Py_XDECREF(error);
                pop_chain(chain);
                failed = -2;
                goto next;
            }
            PyObject *argv[6] = {mod, run, cb, s, res, error ? error : Py_None};
            failed = call_back(finish, argv, 6);
            Py_DECREF(s);
            Py_DECREF(res);
            Py_XDECREF(error);
            start = NAN;
        } else if (ran == RUN_BEFORE) {
            if (pop_chain(chain) < 0) {
                failed = -2;
                goto next;
            }
            failed = call_back(slow, &mod, 1);
            start = NAN;
        } else {  /* RUN_FAILED */
            pop_chain(chain);
            failed = -2;
        }
    next:
        if (failed == -2 && PyErr_ExceptionMatches(PyExc_Exception)) {
            /* The engine failed here, not the mod: as Game.tick does, the mod is
             * quarantined and the tick goes on. */
            PyObject *type, *error, *tb;
            PyErr_Fetch(&type, &error, &tb);
            PyErr_NormalizeException(&type, &error, &tb);
            PyObject *argv[2] = {mod, error ? error : Py_None};
            failed = call_back(broken, argv, 2);
            Py_XDECREF(type);
            Py_XDECREF(error);
            Py_XDECREF(tb);
            start = NAN;
        }
        Py_XDECREF(cb);
        Py_XDECREF(run);
        Py_DECREF(mod);
        if (failed < 0) {
            return NULL;
        }
    }
    return PyLong_FromLong(calls);
}

static PyMethodDef methods[] = {
    {"set_up", set_up, METH_VARARGS, set_up_doc},
    {"tick", (PyCFunction)(void (*)(void))tick, METH_FASTCALL, tick_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef tick_module = {
    PyModuleDef_HEAD_INIT, "_tick",
    "The engine's tick, compiled: the steady mods' calls without the engine's Python.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__tick(void)
{
    if (PyType_Ready(&TallyType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&tick_module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&TallyType);
    if (PyModule_AddObject(m, "Tally", (PyObject *)&TallyType) < 0) {
        Py_DECREF(&TallyType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
