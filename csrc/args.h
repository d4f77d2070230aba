/* The helpers below every concern: binding METH_FASTCALL / vectorcall
 * arguments to parameter names, checking numbers, imports, hashing. */
#ifndef RBC_ARGS_H
#define RBC_ARGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Bind args[0:nargs] and the keywords named in kwnames to the
 * positional-or-keyword parameters `names[0:nnames]`.  values[] holds the
 * defaults on entry (NULL for a required parameter) and borrowed
 * references to the bound arguments on return.  Returns 0, or -1 with a
 * TypeError in CPython's words, naming `fname`. */
int rbc_bind_args(const char *fname, const char *const *names, Py_ssize_t nnames,
                  PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                  PyObject **values);

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

/* getattr(module, name) for the module named `module_name`, taken from
 * sys.modules when it is there, else imported; looked up at each call so
 * that a test can patch the attribute (the patchable `sleep` of both
 * Retry types).  A new reference, or NULL. */
PyObject *rbc_module_attr(PyObject *module_name, PyObject *name);

#endif
