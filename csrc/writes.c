/* The writes policy: see writes.h. */
#include "writes.h"

/* The writes policy `value` as the block holds it: 0 with *policy NULL
 * for "at-least-once" or None (redis-py's), the interned "at-most-once"
 * for that; -1 with TypeError or ValueError naming the parameter.  Runs
 * no Python code (exact str only). */
int
rbc_writes_check(rbc_extras_state *es, const char *owner, const char *name, PyObject *value,
                 PyObject **policy)
{
    *policy = NULL;
    if (value == Py_None) {
        return 0;
    }
    if (!PyUnicode_CheckExact(value)) {
        PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be a str or None, not %.200s",
                     owner, name, Py_TYPE(value)->tp_name);
        return -1;
    }
    if (PyUnicode_Compare(value, es->str_at_most_once) == 0) {
        *policy = es->str_at_most_once;
        return 0;
    }
    if (PyUnicode_Compare(value, es->str_at_least_once) == 0) {
        return 0;
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    PyErr_Format(PyExc_ValueError,
                 "%s() argument '%s' must be 'at-least-once' or 'at-most-once', not %R", owner,
                 name, value);
    return -1;
}

int
rbc_extras_may_have_run(rbc_extras_state *es, rbc_retry_extras *const *extras,
                        rbc_call_extras *call, PyObject *error)
{
    rbc_retry_extras *block = *extras;
    if (!call->counted || block == NULL || block->writes == NULL) {
        return 0;
    }
    PyObject *judge = es->writes_judge;
    int verdict = 1; /* no judge (the package never set one): nothing is known */
    if (judge != NULL) {
        Py_INCREF(judge);
        PyObject *answer = PyObject_CallOneArg(judge, error);
        Py_DECREF(judge);
        if (answer == NULL) {
            return -1;
        }
        verdict = PyObject_IsTrue(answer);
        Py_DECREF(answer);
        if (verdict < 0) {
            return -1;
        }
    }
    if (verdict) {
        /* The judge ran Python code: the block read again. */
        rbc_extras_give_up(*extras, call, RBC_GIVE_UP_MAY_HAVE_RUN);
    }
    return verdict;
}
