/* The native-coroutine design's C half: see async_coro.h. */
#include "async_coro.h"
#include "async_call.h"
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
rbc_async_begin(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    rbc_state *st;
    rbc_retry_object *retry = async_retry_args(module, args, nargs, 5, "_async_begin", &st);
    if (retry == NULL || rbc_retry_check_callable(args[1], "do") < 0
        || rbc_retry_check_callable(args[2], "fail") < 0) {
        return NULL;
    }
    /* The usual case (an unpatched C strategy) costs one type compare. */
    if (rbc_retry_reset_backoff(st, retry) < 0) {
        return NULL;
    }
    /* Read after reset(), which may have set them, as the other design
     * and the sync loop read them. */
    if (retry->extras != NULL) {
        /* Deadline, budget or stats: the rest of the call is the C
         * awaitable's, which keeps their accounting (extras.h). */
        return rbc_async_call_new_reset(st, args[0], args[1], args[2], args[3], args[4]);
    }
    Py_RETURN_NONE;
}

PyObject *
rbc_async_caught(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    rbc_state *st;
    if (async_retry_args(module, args, nargs, 6, "_async_caught", &st) == NULL) {
        return NULL;
    }
    if (!PyExceptionInstance_Check(args[1])) {
        PyErr_Format(PyExc_TypeError, "_async_caught() argument 'error' must be an exception, not %.200s",
                     Py_TYPE(args[1])->tp_name);
        return NULL;
    }
    return rbc_async_call_new_caught(st, args[0], args[1], args[2], args[3], args[4], args[5]);
}
