/* The native-coroutine design's C half: see async_coro.h. */
#include "async_coro.h"
#include "async_call.h"
#include "extras.h"
#include "retry_core.h"

/* The `expected` positional arguments of `func`, the first an asyncio
 * Retry (or a subclass): the Retry, with *st set, or NULL with TypeError. */
static rbc_retry_object *
async_retry_args(PyObject *module, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t expected,
                 const char *func, rbc_state **st)
{
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", func, expected,
                     nargs);
        return NULL;
    }
    PyObject *retry = args[0];
    *st = rbc_get_state(module);
    PyTypeObject *type = (*st)->core.flavors[RBC_FLAVOR_ASYNC].type;
    if (type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "redis_backoff_c was cleared");
        return NULL;
    }
    if (!PyObject_TypeCheck(retry, type)) {
        PyErr_Format(PyExc_TypeError, "%s() argument 'retry' must be an asyncio Retry, not %.200s",
                     func, Py_TYPE(retry)->tp_name);
        return NULL;
    }
    return (rbc_retry_object *)retry;
}

PyObject *
rbc_async_begin(PyObject *module, PyObject *arg)
{
    rbc_state *st;
    rbc_retry_object *retry = async_retry_args(module, &arg, 1, 1, "_async_begin", &st);
    if (retry == NULL) {
        return NULL;
    }
    /* The usual case (an unpatched C strategy) costs one type compare. */
    if (rbc_retry_reset_backoff(st, retry) < 0) {
        return NULL;
    }
    /* Read after reset(), which may have set them, as the other design
     * and the sync loop read them. */
    if (retry->extras == NULL) {
        Py_RETURN_NONE;
    }
    /* Deadline, budget or stats: the call is counted and its deadline
     * fixed now; the coroutine reports its success or its unhandled error,
     * and hands the deadline to the failure loop. */
    rbc_call_extras call;
    rbc_extras_call_begin(st, retry->extras, &call);
    if (call.deadline_at == 0.0) {
        Py_RETURN_TRUE;
    }
    return rbc_extras_deadline_float(retry->extras, call.deadline_at);
}

/* The call as _async_begin started it: None, not counted; True, counted
 * with no deadline; a float, its deadline. */
static int
started_call(PyObject *started, rbc_call_extras *call)
{
    call->deadline_at = 0.0;
    call->counted = started != Py_None;
    call->gave_up = RBC_GIVE_UP_NONE;
    if (started == Py_None || started == Py_True) {
        return 0;
    }
    if (!PyFloat_CheckExact(started)) {
        PyErr_Format(PyExc_TypeError,
                     "_async_caught() argument 'started' must be what _async_begin() returned, "
                     "not %.200s",
                     Py_TYPE(started)->tp_name);
        return -1;
    }
    call->deadline_at = PyFloat_AS_DOUBLE(started);
    return 0;
}

PyObject *
rbc_async_caught(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    rbc_state *st;
    rbc_call_extras call;
    if (async_retry_args(module, args, nargs, 7, "_async_caught", &st) == NULL
        || started_call(args[6], &call) < 0) {
        return NULL;
    }
    if (!PyExceptionInstance_Check(args[1])) {
        PyErr_Format(PyExc_TypeError, "_async_caught() argument 'error' must be an exception, not %.200s",
                     Py_TYPE(args[1])->tp_name);
        return NULL;
    }
    return rbc_async_call_new_caught(st, args[0], args[1], args[2], args[3], args[4], args[5],
                                     &call);
}

PyObject *
rbc_async_check_do(PyObject *module, PyObject *do_)
{
    if (rbc_retry_check_callable(do_, "do") < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The asyncio Retry in `arg`, or NULL with TypeError. */
static rbc_retry_object *
async_retry_only(PyObject *module, PyObject *arg, const char *func)
{
    rbc_state *st;
    return async_retry_args(module, &arg, 1, 1, func, &st);
}

PyObject *
rbc_async_closed_context(PyObject *module, PyObject *call)
{
    return rbc_async_close_context(rbc_get_state(module), call);
}

PyObject *
rbc_async_succeeded(PyObject *module, PyObject *retry)
{
    rbc_retry_object *self = async_retry_only(module, retry, "_async_succeeded");
    if (self == NULL) {
        return NULL;
    }
    rbc_extras_call_succeeded(self->extras);
    Py_RETURN_NONE;
}

PyObject *
rbc_async_unhandled(PyObject *module, PyObject *retry)
{
    rbc_retry_object *self = async_retry_only(module, retry, "_async_unhandled");
    if (self == NULL) {
        return NULL;
    }
    rbc_extras_attempt_failed(self->extras, 0);
    Py_RETURN_NONE;
}
