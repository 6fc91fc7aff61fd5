/* The round trip of a frame over two pipes, out of the interpreter: write a request,
 * wait for the answer (busy-waiting first, then sleeping in poll), read it.
 *
 * Host and worker each do this once per round trip, and in Python the system calls
 * and the wait around them cost more than the calls themselves. This module is the
 * compiled form of the wait and the two system calls only; what the bytes mean stays
 * in Python (moonbox/isolation/_protocol.py, FrameReader.exchange). Where it cannot be
 * built, the same steps run in Python.
 *
 * The interpreter lock is released while writing, waiting and reading. The
 * interpreter's signal handlers run when a signal interrupts a system call (as in the
 * interpreter's own calls), after each part of a write the pipe could not take at once,
 * and when busy-waiting ends: an exception there (KeyboardInterrupt) ends the call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* One read takes at most this much; the caller reads the rest of a larger frame. */
#define READ_BYTES 65536

/* A wait in progress: the released lock, and the deadline on this module's own clock
 * (the caller gives a timeout, so the clock need not be the interpreter's). */
typedef struct {
    PyThreadState *state;
    int has_deadline;
    double deadline;
} Wait;

static double
now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* poll's timeout for the wait's deadline: -1 for none, and at most INT_MAX ms (24 days:
 * a later deadline is waited for in several polls). A deadline already past still takes
 * what is ready. */
static int
timeout_ms(const Wait *w)
{
    if (!w->has_deadline) {
        return -1;
    }
    double left = (w->deadline - now_s()) * 1000.0;
    if (left <= 0) {
        return 0;
    }
    if (left >= (double)INT_MAX - 1) {
        return INT_MAX;
    }
    return (int)left + 1;
}

/* Run the signal handlers with the lock held (after a system call failed with EINTR, or
 * before a sleep that a signal delivered meanwhile would not interrupt). -1 when one
 * raised, with errno 0: its exception is set. */
static int
signalled(Wait *w)
{
    PyEval_RestoreThread(w->state);
    int raised = PyErr_CheckSignals();
    w->state = PyEval_SaveThread();
    if (raised < 0) {
        errno = 0;
    }
    return raised;
}

/* After a read or write failed: 1 to try again (EINTR: its handlers ran), 0 when it
 * would block, -1 failed (errno set, or 0 when a handler raised). */
static int
after_failure(Wait *w)
{
    if (errno == EINTR) {
        return signalled(w) < 0 ? -1 : 1;
    }
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
}

/* Wait until fd has the events, at most until the deadline: 1 ready, 0 timed out, -1
 * failed (errno set, or 0 when a signal handler raised). */
static int
wait_for(int fd, short events, Wait *w)
{
    struct pollfd p = {fd, events, 0};
    for (;;) {
        int r = poll(&p, 1, timeout_ms(w));
        if (r > 0) {
            return 1;
        }
        if (r == 0) {
            if (w->has_deadline && now_s() < w->deadline) {
                continue;  /* a deadline past poll's longest timeout */
            }
            return 0;
        }
        if (errno != EINTR || signalled(w) < 0) {
            return -1;
        }
    }
}

/* The body's length in a frame's header: 4 bytes, little-endian. */
static uint64_t
frame_size(const char *header)
{
    const unsigned char *b = (const unsigned char *)header;
    return (uint64_t)b[0] | (uint64_t)b[1] << 8 | (uint64_t)b[2] << 16 | (uint64_t)b[3] << 24;
}

/* A file descriptor given as an int; -1 with an exception set when it is none. */
static int
fd_of(PyObject *value)
{
    int overflow = 0;
    long fd = PyLong_AsLongAndOverflow(value, &overflow);
    if (fd == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow || fd < 0 || fd > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "a file descriptor must be a non-negative int");
        return -1;
    }
    return (int)fd;
}

/* Write all of data (len bytes): 0 done, 1 timed out, -1 failed (errno set, or 0). */
static int
write_all(int fd, const char *data, Py_ssize_t len, Wait *w)
{
    while (len > 0) {
        ssize_t n = write(fd, data, (size_t)len);
        if (n >= 0) {
            data += n;
            len -= n;
            /* A signal that came while a write made progress interrupted nothing: its
             * handler runs now, not once the rest is written and answered. */
            if (len > 0 && signalled(w) < 0) {
                return -1;
            }
            continue;
        }
        int again = after_failure(w);
        if (again < 0) {
            return -1;
        }
        if (again) {
            continue;
        }
        int r = wait_for(fd, POLLOUT, w);
        if (r <= 0) {
            return r == 0 ? 1 : -1;
        }
    }
    return 0;
}

/* Wait for read_fd (busy-waiting up to spin seconds first) and read once into buf:
 * the count read (0 at end of file), -2 timed out, -1 failed (errno set, or 0). *hot:
 * whether it came within window seconds. */
static ssize_t
wait_and_read(int fd, char *buf, double spin, double window, int *hot, Wait *w)
{
    double began = now_s();
    int ready = 0;
    if (spin > 0) {
        struct pollfd p = {fd, POLLIN, 0};
        double end = began + spin;
        if (w->has_deadline && w->deadline < end) {
            end = w->deadline;
        }
        while (!(ready = poll(&p, 1, 0) > 0) && now_s() < end) {
        }
        /* Handlers of signals that came while it busy-waited, before it sleeps. */
        if (!ready && signalled(w) < 0) {
            return -1;
        }
    }
    for (;;) {
        /* A blocking fd with nothing to keep (no deadline, no busy-wait): the read is the
         * sleep. Otherwise wait first. */
        if (!ready && (w->has_deadline || spin > 0)) {
            int r = wait_for(fd, POLLIN, w);
            if (r <= 0) {
                return r == 0 ? -2 : -1;
            }
        }
        ssize_t got = read(fd, buf, READ_BYTES);
        if (got >= 0) {
            *hot = window <= 0 || now_s() - began <= window;
            return got;
        }
        int again = after_failure(w);
        if (again < 0) {
            return -1;
        }
        if (again) {
            continue;
        }
        ready = 0;  /* nothing in a non-blocking pipe after all: wait, then read */
        if (!w->has_deadline && spin <= 0) {
            int r = wait_for(fd, POLLIN, w);
            if (r < 0) {
                return -1;
            }
            ready = 1;
        }
    }
}

PyDoc_STRVAR(exchange_doc,
"exchange(write_fd, data, read_fd, spin_s, window_s, timeout_s, /)\n"
"--\n\n"
"Write data (bytes, whole; None: nothing) to write_fd, then wait for read_fd and read\n"
"what it holds, at most 65536 bytes, all within timeout_s seconds of the call (None: no\n"
"limit; 0 or less: only what is ready).\n\n"
"The wait busy-waits for up to spin_s seconds before it sleeps in poll. Without a\n"
"timeout or busy-waiting, a read on a blocking read_fd is the sleep.\n\n"
"Returns (data, whole, hot): what was read (empty at end of file), or only the body when\n"
"it was one whole frame (its 4-byte length, then that many bytes) and nothing more;\n"
"whether it was; whether it came within window_s seconds of the wait's start. None when\n"
"the time ran out first.\n\n"
"Raises OSError when writing or reading failed, and what a signal handler raises.");

static PyObject *
exchange(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "exchange() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    int write_fd, read_fd;
    double spin, window, timeout = 0.0;
    if ((write_fd = fd_of(args[0])) < 0 || (read_fd = fd_of(args[2])) < 0) {
        return NULL;
    }
    if (((spin = PyFloat_AsDouble(args[3])) == -1.0 && PyErr_Occurred())
        || ((window = PyFloat_AsDouble(args[4])) == -1.0 && PyErr_Occurred())) {
        return NULL;
    }
    int has_deadline = args[5] != Py_None;
    if (has_deadline && (timeout = PyFloat_AsDouble(args[5])) == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (isnan(timeout) || isnan(spin) || isnan(window)) {
        PyErr_SetString(PyExc_ValueError, "a time is not a number");
        return NULL;
    }
    PyObject *data = args[1];
    if (data != Py_None && !PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "data must be bytes or None");
        return NULL;
    }
    char *buf = malloc(READ_BYTES);
    if (buf == NULL) {
        return PyErr_NoMemory();
    }
    Wait w = {NULL, has_deadline, 0.0};
    ssize_t got = -1;
    int hot = 1, error = 0;
    w.state = PyEval_SaveThread();
    w.deadline = now_s() + timeout;
    /* data stays alive and unchanged: the caller holds it, and bytes do not change. */
    int wrote = data == Py_None ? 0 : write_all(write_fd, PyBytes_AS_STRING(data),
                                                PyBytes_GET_SIZE(data), &w);
    if (wrote == 0) {
        got = wait_and_read(read_fd, buf, spin, window, &hot, &w);
    }
    else if (wrote > 0) {
        got = -2;
    }
    error = errno;
    PyEval_RestoreThread(w.state);

    PyObject *result = NULL;
    if (got == -2) {
        result = Py_NewRef(Py_None);
    }
    else if (got < 0) {
        if (error != 0) {
            errno = error;
            PyErr_SetFromErrno(PyExc_OSError);
        }
        else if (!PyErr_Occurred()) {  /* a signal handler raised: its exception is set */
            PyErr_SetString(PyExc_SystemError, "the wait failed without saying why");
        }
    }
    else {
        /* The usual read: one whole frame and nothing after it. Its body alone, then. */
        int whole = got > 4 && frame_size(buf) == (uint64_t)(got - 4);
        PyObject *bytes = whole ? PyBytes_FromStringAndSize(buf + 4, got - 4)
                                : PyBytes_FromStringAndSize(buf, got);
        if (bytes != NULL) {
            result = PyTuple_Pack(3, bytes, whole ? Py_True : Py_False, hot ? Py_True : Py_False);
            Py_DECREF(bytes);
        }
    }
    free(buf);
    return result;
}

static PyMethodDef wire_methods[] = {
    {"exchange", (PyCFunction)(void (*)(void))exchange, METH_FASTCALL, exchange_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot wire_slots[] = {
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},  /* no state of its own: safe without the lock */
#endif
    {0, NULL},
};

static struct PyModuleDef wire_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "moonbox.isolation._wire",
    .m_doc = "A frame's round trip over two pipes, out of the interpreter.",
    .m_size = 0,
    .m_methods = wire_methods,
    .m_slots = wire_slots,
};

PyMODINIT_FUNC
PyInit__wire(void)
{
    return PyModuleDef_Init(&wire_module);
}
