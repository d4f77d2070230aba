/* The helpers below every concern: binding METH_FASTCALL / vectorcall
 * arguments to parameter names, checking numbers, imports, hashing. */
#ifndef RBC_ARGS_H
#define RBC_ARGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* A signature, written once, next to the function it belongs to: the
 * parameter names in order, how many of them may also come by position
 * (the rest are keyword-only), and the function's name for messages.  It
 * drives both binders below: vectorcall / METH_FASTCALL and tp_init.  Its
 * text form (for __text_signature__ and the docstring) is written beside
 * it, and a test holds the two to each other (tests/c_only/test_signatures.py). */
typedef struct {
    const char *function;
    const char *const *names;
    Py_ssize_t count;
    Py_ssize_t positional;
} rbc_signature;

int rbc_bind_keywords(const rbc_signature *sig, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, PyObject **values);

/* Bind args[0:nargs] and the keywords named in kwnames to the parameters
 * of `sig`.  values[] holds the defaults on entry (NULL for a required
 * parameter) and borrowed references to the bound arguments on return.
 * Returns 0, or -1 with a TypeError in CPython's words.  Inline, for the
 * usual call by position (compute(n), call_with_retry(do, fail)), the one
 * fast path of every binding. */
static inline int
rbc_bind(const rbc_signature *sig, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
         PyObject **values)
{
    if (kwnames == NULL && nargs <= sig->positional) {
        for (Py_ssize_t i = 0; i < nargs; i++) {
            values[i] = args[i];
        }
        Py_ssize_t j = nargs;
        while (j < sig->count && values[j] != NULL) {
            j++;
        }
        if (j == sig->count) {
            return 0;
        }
    }
    return rbc_bind_keywords(sig, args, nargs, kwnames, values);
}

/* The same for tp_init's (args tuple, kwds dict or NULL). */
int rbc_bind_tuple(const rbc_signature *sig, PyObject *args, PyObject *kwds, PyObject **values);

/* Is `obj` a real number: int, float, bool, or has __float__ / __index__? */
int rbc_is_real_number(PyObject *obj);

/* TypeError "<owner>() argument '<name>' must be a real number, not <type>"
 * when `value` is not one; returns 0 or -1. */
int rbc_check_real(const char *owner, const char *name, PyObject *value);

/* A getset setter's `value` NULL (del obj.attr): AttributeError "cannot
 * delete attribute '<name>'" and -1; else 0. */
int rbc_refuse_delete(PyObject *value, const char *name);

/* hash() of a tuple whose items hash to lanes[0..count): Python's own
 * tuple hash, without the tuple. */
Py_hash_t rbc_combine_hashes(const Py_hash_t *lanes, Py_ssize_t count);

/* getattr(importlib.import_module(module_name), name): for start-up.  A
 * new reference, or NULL. */
PyObject *rbc_import_attr(const char *module_name, const char *name);

/* tp_descr_get of a C object that stands in a class for a Python function
 * (patch()'s wrappers): bound to an instance as a function is, itself
 * when read from the class. */
PyObject *rbc_function_descr_get(PyObject *self, PyObject *obj, PyObject *type);

/* The attribute of a wrapper that is its wrapped function's (`original`,
 * NULL once the wrapper is cleared): the function itself for `name` NULL
 * (__wrapped__), else its attribute `name` (__name__, __doc__, ...), as
 * functools.wraps copies them.  A new reference, or NULL. */
PyObject *rbc_wrapped_attr(PyObject *original, const char *name);

/* The sentinel inspect.iscoroutinefunction() (3.12+) looks for in a
 * callable's _is_coroutine_marker: what a C method that stands for an
 * `async def` answers.  A new reference, or NULL. */
PyObject *rbc_coroutine_mark(void);

/* getattr(module, name) for the module named `module_name`, taken from
 * sys.modules when it is there, else imported; looked up at each call so
 * that a test can patch the attribute (the patchable `sleep` of both
 * Retry types).  A new reference, or NULL. */
PyObject *rbc_module_attr(PyObject *module_name, PyObject *name);

/* A real number's value as a double into *out: 0, or -1 with TypeError
 * naming it (`owner`() argument `name`). */
int rbc_real_value(const char *owner, const char *name, PyObject *value, double *out);
/* The same for a real number > 0 (and finite unless allow_infinite):
 * ValueError naming it otherwise.  RetryBudget's parameters, a deadline. */
int rbc_positive_value(const char *owner, const char *name, PyObject *value, int allow_infinite,
                       double *out);

#endif
