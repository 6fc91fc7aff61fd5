/* What the compiled resume (_resume.c) offers other compiled modules of moonbox, through
 * the capsule moonbox.sandbox._resume.API: Run.call compiled, for a host that calls many
 * runs in a row from C (the engine's tick, moonbox/engine/_tick.c). */
#ifndef MOONBOX_RESUME_H
#define MOONBOX_RESUME_H

#include <Python.h>

#define MOONBOX_RESUME_CAPSULE "moonbox.sandbox._resume.API"

/* How run_call ended. RUN_BEFORE: nothing ran (the run's report allowance may have been
 * renewed, as Run.call renews it): the call takes Run.call's way. RUN_PLAIN: a yield of
 * nothing within the budget; the run's peak_bytes is kept up (RunCall.peaked), and the
 * rest of the call's accounting (its steps, time, the run's resumes and ended_at) is the
 * caller's. RUN_ENDED: the run was resumed (or its end is yet to be found) and ended
 * otherwise; the sandbox still marks the run running, and Run._finish_call(start, res,
 * args, error) finishes it, accounting it as Run.call does. RUN_FAILED: keeping the
 * peak failed (no memory): the exception is set. */
enum { RUN_BEFORE, RUN_PLAIN, RUN_ENDED, RUN_FAILED };

typedef struct {
    double start, end, wall, steps;
    int process;    /* the clock read: time.process_time's (else time.monotonic's) */
    int peaked;     /* RUN_PLAIN: the run's peak_bytes rose */
    PyObject *res;  /* RUN_ENDED: the compiled call's answer, a new reference (NULL: the
                     * error is set) */
} RunCall;

typedef struct {
    /* Run.call(start, *args), compiled; start NAN: the clock is read first. */
    int (*run_call)(PyObject *run, double start, PyObject *const *args, int n, RunCall *out);
    /* The sandbox clocks, read as time.monotonic and time.process_time read them. */
    double (*clock_now)(int process);
} ResumeAPI;

#endif
