/* The native-coroutine design's C half: see async_coro.h. */
#include "state.h"
#include "async_call.h"
#include "async_coro.h"
#include "retry_core.h"

/* The asyncio Retry (or a subclass) in args[0], or NULL with TypeError. */
static rbc_retry_object *
async_retry_arg(rbc_state *st, PyObject *retry, const char *func)
{
    PyTypeObject *type = st->async.flavor.type;
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
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "_async_begin() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    rbc_state *st = rbc_get_state(module);
    rbc_retry_object *retry = async_retry_arg(st, args[0], "_async_begin");
    if (retry == NULL || rbc_retry_check_callable(args[1], "do") < 0
        || rbc_retry_check_callable(args[2], "fail") < 0) {
        return NULL;
    }
    if (retry->extras != NULL) {
        /* Deadline, budget or stats: the whole call is the C awaitable's,
         * which keeps their accounting (extras.h); its first step resets
         * the backoff, as this one would have. */
        return rbc_async_call_new(st, args[0], args[1], args[2], args[3], args[4]);
    }
    /* The usual case (an unmodified C strategy) costs one type compare. */
    if (rbc_retry_reset_backoff(st, retry) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyObject *
rbc_async_caught(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "_async_caught() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    rbc_state *st = rbc_get_state(module);
    if (async_retry_arg(st, args[0], "_async_caught") == NULL) {
        return NULL;
    }
    if (!PyExceptionInstance_Check(args[1])) {
        PyErr_Format(PyExc_TypeError, "_async_caught() argument 'error' must be an exception, not %.200s",
                     Py_TYPE(args[1])->tp_name);
        return NULL;
    }
    return rbc_async_call_new_caught(st, args[0], args[1], args[2], args[3], args[4], args[5]);
}
