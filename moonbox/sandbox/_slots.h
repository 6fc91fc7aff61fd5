/* The slots of Python objects, read and written from C by their offsets, for the compiled
 * modules that keep to an object's steady state without running its class's Python
 * (_resume.c's run_call, moonbox/engine/_tick.c). An offset is that of an object slot
 * (__slots__) of a class, read once from its member descriptor. */
#ifndef MOONBOX_SLOTS_H
#define MOONBOX_SLOTS_H

#include <Python.h>
#include <structmember.h>

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

/* The offset of slot `name` of `type` (a member descriptor of a writable object slot),
 * or -1 with TypeError set. */
static inline Py_ssize_t
slot_offset(PyObject *type, const char *name)
{
    PyObject *d = PyObject_GetAttrString(type, name);
    if (d == NULL) {
        return -1;
    }
    Py_ssize_t off = -1;
    if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY)) {
            off = m->offset;
        }
    }
    Py_DECREF(d);
    if (off < 0) {
        PyErr_Format(PyExc_TypeError, "%s is not an object slot", name);
    }
    return off;
}

/* Sets a slot to a new reference, which it takes (NULL: fails, as the value's making
 * did). */
static inline int
set_slot(PyObject *o, Py_ssize_t off, PyObject *v)
{
    if (v == NULL) {
        return -1;
    }
    PyObject *old = SLOT(o, off);
    SLOT(o, off) = v;
    Py_XDECREF(old);
    return 0;
}

/* A slot's truth, as `not x` tests it: 1 or 0; -1 for a slot not set, or a value whose
 * truth failed (the error cleared). */
static inline int
truth(PyObject *o, Py_ssize_t off)
{
    PyObject *v = SLOT(o, off);
    if (v == Py_True) {
        return 1;
    }
    if (v == Py_False || v == Py_None) {
        return 0;
    }
    if (v == NULL) {
        return -1;
    }
    int t = PyObject_IsTrue(v);
    if (t < 0) {
        PyErr_Clear();
    }
    return t;
}

#endif
