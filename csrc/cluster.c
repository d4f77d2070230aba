/* The extras in redis-py's cluster command loop: see cluster.h. */
#include "cluster.h"
#include "extras.h"
#include "retry_core.h"

/* `retry` as a C Retry of either flavor, or NULL (no exception set). */
static rbc_retry_object *
c_retry(rbc_state *st, PyObject *retry)
{
    for (int flavor = 0; flavor < RBC_FLAVOR_COUNT; flavor++) {
        PyTypeObject *type = st->core.flavors[flavor].type;
        if (type != NULL && PyObject_TypeCheck(retry, type)) {
            return RETRY(retry);
        }
    }
    return NULL;
}

/* The `expected` positional arguments of `func`, the first a C Retry: the
 * Retry, or NULL with TypeError. */
static rbc_retry_object *
cluster_args(PyObject *module, Py_ssize_t nargs, Py_ssize_t expected, PyObject *retry,
             const char *func)
{
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", func, expected,
                     nargs);
        return NULL;
    }
    rbc_retry_object *self = c_retry(rbc_get_state(module), retry);
    if (self == NULL) {
        PyErr_Format(PyExc_TypeError, "%s() argument 'retry' must be a C Retry, not %.200s", func,
                     Py_TYPE(retry)->tp_name);
    }
    return self;
}

/* A non-negative real number argument's value, or -1 with an exception. */
static double
seconds_arg(PyObject *value, const char *func, const char *name)
{
    if (!PyFloat_Check(value) && !PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be a float, not %.200s", func,
                     name, Py_TYPE(value)->tp_name);
        return -1.0;
    }
    return PyFloat_AsDouble(value);
}

PyObject *
rbc_cluster_begin(PyObject *module, PyObject *retry)
{
    rbc_retry_object *self = c_retry(rbc_get_state(module), retry);
    if (self == NULL || self->extras == NULL) {
        Py_RETURN_NONE;
    }
    rbc_call_extras call;
    rbc_extras_call_begin(self->extras, &call);
    return PyFloat_FromDouble(call.deadline_at);
}

PyObject *
rbc_cluster_failed(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    rbc_retry_object *self = cluster_args(module, nargs, 2, nargs > 0 ? args[0] : NULL,
                                          "_cluster_failed");
    if (self == NULL) {
        return NULL;
    }
    rbc_extras_attempt_failed(self->extras, 1);
    rbc_call_extras call = {0.0, 1}; /* counted: _cluster_begin saw extras */
    int may_have_run = rbc_extras_may_have_run(&rbc_get_state(module)->extras, &self->extras,
                                               &call, args[1]);
    if (may_have_run < 0) {
        return NULL;
    }
    if (may_have_run) {
        return PyLong_FromLong(RBC_CLUSTER_GIVE_UP_MAY_HAVE_RUN);
    }
    /* The block is read after the judge, which may have changed it. */
    int refused = rbc_extras_refuse_retry(self->extras, 0);
    return PyLong_FromLong(refused ? RBC_CLUSTER_GIVE_UP_BUDGET : RBC_CLUSTER_GO_ON);
}

PyObject *
rbc_cluster_delay(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    rbc_retry_object *self = cluster_args(module, nargs, 3, nargs > 0 ? args[0] : NULL,
                                          "_cluster_delay");
    if (self == NULL) {
        return NULL;
    }
    rbc_call_extras call = {0.0, 1}; /* counted: _cluster_begin saw extras */
    call.deadline_at = seconds_arg(args[1], "_cluster_delay", "deadline_at");
    if (call.deadline_at == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    double seconds = 0.0;
    if (args[2] != Py_None) {
        seconds = PyFloat_AsDouble(args[2]);
        if (seconds == -1.0 && PyErr_Occurred()) {
            return NULL;
        }
    }
    /* The next attempt starts `seconds` from now: too late when that is at
     * or past the deadline (call_with_retry's two checks, before its sleep
     * and before its attempt, in one).  The block is read after the
     * conversions, which may run Python code that changes it. */
    if (call.deadline_at != 0.0 && seconds > 0.0) {
        call.deadline_at -= seconds;
    }
    if (rbc_extras_deadline_passed(self->extras, &call)) {
        Py_RETURN_NONE;
    }
    return PyFloat_FromDouble(seconds);
}

PyObject *
rbc_cluster_retried(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    rbc_retry_object *self = cluster_args(module, nargs, 2, nargs > 0 ? args[0] : NULL,
                                          "_cluster_retried");
    if (self == NULL) {
        return NULL;
    }
    double slept = seconds_arg(args[1], "_cluster_retried", "slept");
    if (slept == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    /* The deadline was checked before the sleep (_cluster_delay). */
    rbc_call_extras no_deadline = {0.0, 1};
    rbc_extras_before_retry(self->extras, &no_deadline);
    rbc_extras_add_slept(self->extras, slept);
    Py_RETURN_NONE;
}

PyObject *
rbc_cluster_ended(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    rbc_retry_object *self = cluster_args(module, nargs, 2, nargs > 0 ? args[0] : NULL,
                                          "_cluster_ended");
    if (self == NULL) {
        return NULL;
    }
    long outcome = PyLong_Check(args[1]) ? PyLong_AsLong(args[1]) : -1;
    if (outcome == -1 && PyErr_Occurred()) {
        return NULL;
    }
    switch (outcome) {
    case RBC_CLUSTER_SUCCEEDED:
        rbc_extras_call_succeeded(self->extras);
        break;
    case RBC_CLUSTER_EXHAUSTED:
        rbc_extras_attempt_failed(self->extras, 1);
        rbc_extras_refuse_retry(self->extras, 1);
        break;
    case RBC_CLUSTER_UNHANDLED:
        rbc_extras_attempt_failed(self->extras, 0);
        break;
    case RBC_CLUSTER_NOT_RETRYABLE:
        rbc_extras_gave_up_not_retryable(self->extras);
        break;
    case RBC_CLUSTER_ABORTED:
        rbc_extras_call_aborted(self->extras);
        break;
    default:
        PyErr_Format(PyExc_ValueError, "_cluster_ended() argument 'outcome' must be 0 to %d",
                     RBC_CLUSTER_OUTCOMES - 1);
        return NULL;
    }
    Py_RETURN_NONE;
}
