/* The round trip of a frame over two pipes, out of the interpreter: write a request,
 * wait for the answer (busy-waiting first, then sleeping in poll), read it.
 *
 * Host and worker each do this once per round trip, and in Python the system calls
 * and the wait around them cost more than the calls themselves. This module is the
 * compiled form of the wait and the two system calls only; what the bytes mean stays
 * in Python (moonbox/isolation/_protocol.py, FrameReader.exchange). Where it cannot be
 * built, the same steps run in Python.
 *
 * The interpreter lock is released while writing, waiting and reading. A signal that
 * interrupts a system call runs the interpreter's handlers, as the interpreter's own
 * calls do: an exception there (KeyboardInterrupt) ends the call.
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

static double
now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* poll's timeout for a deadline in monotonic seconds (negative: none). A deadline
 * already past still takes what is ready. */
static int
timeout_ms(double deadline)
{
    if (deadline < 0) {
        return -1;
    }
    double left = (deadline - now_s()) * 1000.0;
    if (left <= 0) {
        return 0;
    }
    if (left >= (double)INT_MAX - 1) {
        return INT_MAX;
    }
    return (int)left + 1;
}

/* After a system call failed with EINTR: run the signal handlers with the lock held.
 * -1 when one raised. */
static int
signalled(PyThreadState **state)
{
    PyEval_RestoreThread(*state);
    int raised = PyErr_CheckSignals();
    *state = PyEval_SaveThread();
    return raised;
}

/* Wait until fd has the events, at most until deadline: 1 ready, 0 timed out, -1 failed
 * (errno set, or a handler raised: errno 0). */
static int
wait_for(int fd, short events, double deadline, PyThreadState **state)
{
    struct pollfd p = {fd, events, 0};
    for (;;) {
        int r = poll(&p, 1, timeout_ms(deadline));
        if (r > 0) {
            return 1;
        }
        if (r == 0) {
            return 0;
        }
        if (errno != EINTR) {
            return -1;
        }
        if (signalled(state) < 0) {
            errno = 0;
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
    long fd = PyLong_AsLong(value);
    if (fd == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (fd < 0 || fd > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "a file descriptor must be a non-negative int");
        return -1;
    }
    return (int)fd;
}

PyDoc_STRVAR(exchange_doc,
"exchange(write_fd, data, read_fd, spin_s, window_s, deadline, /)\n"
"--\n\n"
"Write data (bytes, whole; None: nothing) to write_fd, then wait for read_fd and read\n"
"what it holds, at most 65536 bytes, all by deadline (monotonic seconds; None: no\n"
"limit).\n\n"
"The wait busy-waits for up to spin_s seconds before it sleeps in poll. Without a\n"
"deadline or busy-waiting, a read on a blocking read_fd is the sleep.\n\n"
"Returns (data, whole, hot): what was read (empty at end of file), or only the body when\n"
"it was one whole frame (its 4-byte length, then that many bytes) and nothing more;\n"
"whether it was; whether it came within window_s seconds of the wait's start. None when\n"
"the deadline passed first.\n\n"
"Raises OSError when writing or reading failed.");

static PyObject *
exchange(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "exchange() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    int write_fd = fd_of(args[0]);
    int read_fd = fd_of(args[2]);
    double spin = PyFloat_AsDouble(args[3]);
    double window = PyFloat_AsDouble(args[4]);
    double deadline = args[5] == Py_None ? -1.0 : PyFloat_AsDouble(args[5]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (isnan(deadline)) {
        PyErr_SetString(PyExc_ValueError, "the deadline is not a number");
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
    /* data stays alive: the caller holds it for the length of the call. */
    const char *out = data == Py_None ? NULL : PyBytes_AS_STRING(data);
    Py_ssize_t left = data == Py_None ? 0 : PyBytes_GET_SIZE(data);
    ssize_t got = 0;
    int failed = 0, timed_out = 0, hot = 1;

    PyThreadState *state = PyEval_SaveThread();
    while (left > 0) {
        ssize_t n = write(write_fd, out, (size_t)left);
        if (n >= 0) {
            out += n;
            left -= n;
            continue;
        }
        if (errno == EINTR) {
            if (signalled(&state) < 0) {
                errno = 0;
                failed = 1;
                break;
            }
            continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            failed = 1;
            break;
        }
        int r = wait_for(write_fd, POLLOUT, deadline, &state);
        if (r <= 0) {
            failed = r < 0;
            timed_out = r == 0;
            break;
        }
    }
    if (!failed && !timed_out) {
        double began = now_s();
        int ready = 0;
        if (spin > 0) {
            struct pollfd p = {read_fd, POLLIN, 0};
            double end = began + spin;
            if (deadline >= 0 && deadline < end) {
                end = deadline;
            }
            while (!(ready = poll(&p, 1, 0) > 0) && now_s() < end) {
            }
            if (!ready && signalled(&state) < 0) {  /* handlers due before the sleep */
                errno = 0;
                failed = 1;
            }
        }
        for (;;) {
            if (failed) {
                break;
            }
            if (!ready && (deadline >= 0 || spin > 0)) {
                int r = wait_for(read_fd, POLLIN, deadline, &state);
                if (r <= 0) {
                    failed = r < 0;
                    timed_out = r == 0;
                    break;
                }
            }
            got = read(read_fd, buf, READ_BYTES);
            if (got >= 0) {
                break;
            }
            if (errno == EINTR) {
                if (signalled(&state) < 0) {
                    errno = 0;
                    failed = 1;
                }
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                failed = 1;
                break;
            }
            ready = 0;  /* a non-blocking pipe with nothing in it: wait, then read */
            if (deadline < 0 && spin <= 0) {
                int r = wait_for(read_fd, POLLIN, deadline, &state);
                if (r < 0) {
                    failed = 1;
                    break;
                }
                ready = 1;
            }
        }
        if (!failed && !timed_out && window > 0) {
            hot = now_s() - began <= window;
        }
    }
    int error = errno;
    PyEval_RestoreThread(state);

    PyObject *result = NULL;
    if (failed) {
        if (error != 0) {
            errno = error;
            PyErr_SetFromErrno(PyExc_OSError);
        }
        /* else a signal handler raised: its exception is set */
    }
    else if (timed_out) {
        result = Py_NewRef(Py_None);
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

static struct PyModuleDef wire_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "moonbox.isolation._wire",
    .m_doc = "A frame's round trip over two pipes, out of the interpreter.",
    .m_size = 0,
    .m_methods = wire_methods,
};

PyMODINIT_FUNC
PyInit__wire(void)
{
    return PyModuleDef_Init(&wire_module);
}
