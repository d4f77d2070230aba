/* Binding of METH_FASTCALL / vectorcall arguments to parameter names. */
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

#endif
