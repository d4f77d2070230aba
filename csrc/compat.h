/* Small shims over C-API differences between CPython 3.10 and 3.13. */
#ifndef RBC_COMPAT_H
#define RBC_COMPAT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#if PY_VERSION_HEX < 0x030B0000
#include <longintrepr.h>
#endif

/* PyType_GetModuleByDef() is 3.11+; 3.10 gets the same MRO walk here.
 * Returns a borrowed reference, or NULL with TypeError set (RuntimeError
 * for a type already cleared). */
static inline PyObject *
rbc_type_module_by_def(PyTypeObject *type, PyModuleDef *def)
{
    PyObject *mro = type->tp_mro;
    if (mro == NULL) {
        /* A type cleared in the interpreter's final collections: CPython's
         * PyType_GetModuleByDef would read its MRO anyway. */
        PyErr_Format(PyExc_RuntimeError, "type '%.100s' was cleared", type->tp_name);
        return NULL;
    }
#if PY_VERSION_HEX >= 0x030B0000
    return PyType_GetModuleByDef(type, def);
#else
    Py_ssize_t n = PyTuple_GET_SIZE(mro);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTypeObject *base = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (base->tp_flags & Py_TPFLAGS_HEAPTYPE) {
            PyObject *module = ((PyHeapTypeObject *)base)->ht_module;
            if (module != NULL && PyModule_GetDef(module) == def) {
                return module;
            }
        }
    }
    PyErr_Format(PyExc_TypeError,
                 "PyType_GetModuleByDef: No superclass of '%s' has the given module",
                 type->tp_name);
    return NULL;
#endif
}

/* PyObject_GetOptionalAttr() is 3.13+: 1 and *result set, 0 and NULL when
 * the attribute is missing, -1 on any other error. */
static inline int
rbc_get_optional_attr(PyObject *obj, PyObject *name, PyObject **result)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyObject_GetOptionalAttr(obj, name, result);
#else
    *result = PyObject_GetAttr(obj, name);
    if (*result != NULL) {
        return 1;
    }
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        return 0;
    }
    return -1;
#endif
}

/* The value of an exact int or bool that fits in one digit, read inline
 * (the C-API call costs more than the rest of an ExponentialBackoff
 * compute); 0 when the int is larger and the caller must ask the C-API. */
static inline int
rbc_small_int_value(PyObject *obj, long long *value)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact((PyLongObject *)obj)) {
        *value = (long long)PyUnstable_Long_CompactValue((PyLongObject *)obj);
        return 1;
    }
#else
    Py_ssize_t size = Py_SIZE(obj);
    if (size >= -1 && size <= 1) {
        *value = (long long)size * (long long)((PyLongObject *)obj)->ob_digit[0];
        return 1;
    }
#endif
    return 0;
}

/* Py_NO_INLINE and Py_ALWAYS_INLINE are 3.11+. */
#ifndef Py_NO_INLINE
#if defined(__GNUC__) || defined(__clang__)
#define Py_NO_INLINE __attribute__((noinline))
#elif defined(_MSC_VER)
#define Py_NO_INLINE __declspec(noinline)
#else
#define Py_NO_INLINE
#endif
#endif
#ifndef Py_ALWAYS_INLINE
#if defined(__GNUC__) || defined(__clang__)
#define Py_ALWAYS_INLINE __attribute__((always_inline))
#elif defined(_MSC_VER)
#define Py_ALWAYS_INLINE __forceinline
#else
#define Py_ALWAYS_INLINE
#endif
#endif

/* ---- exceptions: the raised and the handled one, 3.10 to 3.13 ----- */

/* The raised exception, taken out of the thread state (normalised, its
 * __traceback__ set), or NULL if none: a new reference. */
static inline PyObject *
rbc_exc_fetch(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL) {
        return NULL;
    }
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL) {
        PyException_SetTraceback(value, tb);
    }
    Py_DECREF(type);
    Py_XDECREF(tb);
    return value;
#endif
}

/* Raise `error` again, as it is, with its traceback: steals the reference. */
static inline void
rbc_exc_restore(PyObject *error)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(error);
#else
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(error)), error, PyException_GetTraceback(error));
#endif
}

/* Make `error` the handled exception; returns the previous one (new
 * reference, or NULL for none), to give back to rbc_exc_end_handling. */
static inline PyObject *
rbc_exc_begin_handling(PyObject *error)
{
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *previous = PyErr_GetHandledException();
    PyErr_SetHandledException(error);
    return previous;
#else
    PyObject *type, *value, *tb;
    PyErr_GetExcInfo(&type, &value, &tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    PyErr_SetExcInfo(Py_NewRef((PyObject *)Py_TYPE(error)), Py_NewRef(error),
                     PyException_GetTraceback(error));
    return value;
#endif
}

/* Restore the handled exception saved by begin (steals the reference). */
static inline void
rbc_exc_end_handling(PyObject *previous)
{
#if PY_VERSION_HEX >= 0x030B0000
    PyErr_SetHandledException(previous);
    Py_XDECREF(previous);
#else
    if (previous == NULL || previous == Py_None) {
        Py_XDECREF(previous);
        PyErr_SetExcInfo(NULL, NULL, NULL);
        return;
    }
    PyErr_SetExcInfo(Py_NewRef((PyObject *)Py_TYPE(previous)), previous,
                     PyException_GetTraceback(previous));
#endif
}

/* The lock of RetryBudget and RetryStats (budget.h, stats.h): their
 * mutex on a free-threaded build. */
#ifdef Py_GIL_DISABLED
#define RBC_EXTRAS_LOCK(obj) PyMutex_Lock(&(obj)->mutex)
#define RBC_EXTRAS_UNLOCK(obj) PyMutex_Unlock(&(obj)->mutex)
#else
/* The GIL serialises every update: none calls Python code. */
#define RBC_EXTRAS_LOCK(obj) ((void)0)
#define RBC_EXTRAS_UNLOCK(obj) ((void)0)
#endif

#endif
