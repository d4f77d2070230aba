/* redis_backoff_c.asyncio.retry.Retry: the asyncio Retry type.  Its
 * object, attributes and methods are retry_core's, shared with the sync
 * Retry; its call_with_retry returns the C awaitable of async_call.c. */
#include "async_retry.h"
#include "args.h"
#include "async_call.h"
#include "async_method.h"
#include "retry_core.h"

/* redis.asyncio.retry.Retry's default supported_errors. */
static const rbc_retry_default_error default_errors[] = {
    {"redis.exceptions", "ConnectionError"},
    {"redis.exceptions", "TimeoutError"},
    {NULL, NULL},
};

static inline const rbc_retry_flavor *
async_flavor_of(PyObject *self)
{
    rbc_state *st = rbc_state_of(self);
    return st == NULL ? NULL : &st->core.flavors[RBC_FLAVOR_ASYNC];
}

/* ---------------------------------------------------------------------- */
/* call_with_retry                                                         */

/* Binds the arguments and returns the awaitable; nothing runs before it
 * is awaited, as with redis-py's coroutine.  `context` is the module state
 * (see install_call_with_retry); `self` is an asyncio Retry, which the
 * descriptor has checked. */
static PyObject *
call_with_retry(void *context, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    rbc_state *st = (rbc_state *)context;
    if (kwnames == NULL && nargs == 2) { /* call_with_retry(do, fail), the usual call */
        if (rbc_retry_check_callable(args[0], "do") < 0
            || rbc_retry_check_callable(args[1], "fail") < 0) {
            return NULL;
        }
        return rbc_async_call_new(st, self, args[0], args[1], Py_None, Py_False);
    }
    PyObject *values[4];
    if (rbc_retry_bind_call(args, nargs, kwnames, values) < 0) {
        return NULL;
    }
    return rbc_async_call_new(st, self, values[0], values[1], values[2], values[3]);
}

/* call_with_retry's __doc__ until redis_backoff_c.asyncio.retry gives it
 * its async def (then that one's). */
PyDoc_STRVAR(call_with_retry_doc,
             "Return an awaitable of do()'s awaited result; on an error in\n"
             "_supported_errors, await fail(error) (or fail(error, failures)), await\n"
             "redis_backoff_c.asyncio.retry.sleep(_backoff.compute(failures)) and\n"
             "await do() again, up to _retries times (forever when < 0); then raise\n"
             "the error. When the Retry's own checker (self.is_retryable) is set and\n"
             "returns false for the error, fail() is awaited (failures + 1 as its\n"
             "count) and the error raised; then a false is_retryable(error) raises it\n"
             "at once (the argument is combined with the Retry's checker by AND).");

/* call_with_retry is an async_method (async_method.h), not a
 * method_descriptor: called the same way, but redis-py 8.2's
 * _to_async_retry, which keeps a retry only if inspect calls its
 * call_with_retry a coroutine function, keeps ours. */
static int
install_call_with_retry(rbc_state *st, PyTypeObject *type)
{
    /* The state lives while the type holds its module (ht_module), which
     * the descriptor checks before each call. */
    PyObject *method = rbc_async_method_new(st->async.AsyncMethod_type, type, "call_with_retry",
                                            call_with_retry, st, call_with_retry_doc);
    if (method == NULL) {
        return -1;
    }
    int status = PyObject_SetAttrString((PyObject *)type, "call_with_retry", method);
    Py_DECREF(method);
    return status;
}

/* ---------------------------------------------------------------------- */
/* The type                                                                */

static PyObject *
async_retry_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    rbc_state *st = rbc_state_from_type(type);
    return st == NULL ? NULL : rbc_retry_new(&st->core.flavors[RBC_FLAVOR_ASYNC], type);
}

static int
async_retry_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    const rbc_retry_flavor *fl = async_flavor_of(self);
    return fl == NULL ? -1 : rbc_retry_init_args(fl, self, args, kwds);
}

static PyObject *
async_retry_richcompare(PyObject *self, PyObject *other, int op)
{
    const rbc_retry_flavor *fl = async_flavor_of(self);
    return fl == NULL ? NULL : rbc_retry_richcompare(fl, self, other, op);
}

static Py_hash_t
async_retry_hash(PyObject *self)
{
    const rbc_retry_flavor *fl = async_flavor_of(self);
    return fl == NULL ? -1 : rbc_retry_hash(fl, self);
}

/* clang-format off */
static PyMethodDef async_retry_methods[] = {
    /* call_with_retry is not here: see install_call_with_retry(). */
    RBC_RETRY_COMMON_METHODS,
    {NULL, NULL, 0, NULL},
};

static PyType_Slot async_retry_slots[] = {
    {Py_tp_doc, (void *)RBC_RETRY_TEXT_SIGNATURE
                        "Retry an awaited operation up to `retries` times (forever when < 0)\n"
                        "after an error in `supported_errors` (default: redis ConnectionError\n"
                        "and TimeoutError), awaiting asyncio.sleep(backoff.compute(failures))\n"
                        "between tries.  `is_retryable` (redis-py 8.2's): a checker that must\n"
                        "also return true for an error to be retried.  Opt-in: `deadline`\n"
                        "bounds one call (seconds), `budget` (RetryBudget) throttles retries,\n"
                        "`stats` (RetryStats) counts."},
    {Py_tp_new, async_retry_new},
    {Py_tp_init, async_retry_init},
    {Py_tp_hash, async_retry_hash},
    {Py_tp_richcompare, async_retry_richcompare},
    {Py_tp_methods, async_retry_methods},
    RBC_RETRY_COMMON_SLOTS,
    {0, NULL},
};
/* clang-format on */

/* Called through rbc_retry_type_vectorcall (retry_core.h). */
static PyType_Spec async_retry_spec = RBC_RETRY_SPEC("redis_backoff_c.asyncio.retry.Retry",
                                                     async_retry_slots);

/* ---------------------------------------------------------------------- */
/* Module state                                                            */

int
rbc_async_init(rbc_state *st, PyObject *module)
{
    rbc_async_state *as = &st->async;
    rbc_retry_flavor *fl = &st->core.flavors[RBC_FLAVOR_ASYNC];
    fl->name = "Retry";
    as->sleep_module_name = PyUnicode_InternFromString("redis_backoff_c.asyncio.retry");
    as->str_sleep = PyUnicode_InternFromString("sleep");
    as->str_throw = PyUnicode_InternFromString("throw");
    as->str_close = PyUnicode_InternFromString("close");
    if (as->sleep_module_name == NULL || as->str_sleep == NULL || as->str_throw == NULL
        || as->str_close == NULL
        || rbc_retry_flavor_init(fl, "redis.asyncio.retry", default_errors) < 0
        || rbc_async_call_init(st, module) < 0) {
        return -1;
    }
    /* Until redis_backoff_c._impl hands over what the interpreter does. */
    as->stop_chains_result = 1;
    as->stop_chains_none = 1;
#if RBC_STOP_ARGS_CACHE
    as->stop_args = PyTuple_Pack(1, Py_None);
    if (as->stop_args == NULL) {
        return -1;
    }
#endif
    as->AsyncMethod_type = rbc_async_method_type_new(module);
    if (as->AsyncMethod_type == NULL) {
        return -1;
    }
    PyTypeObject *type = rbc_retry_flavor_type_new(fl, module, &async_retry_spec);
    if (type == NULL || install_call_with_retry(st, type) < 0) {
        return -1;
    }
    /* The sync Retry is "Retry" here; the asyncio module re-exports this
     * one under its own name, which is also the type's __name__. */
    return PyModule_AddObjectRef(module, "AsyncRetry", (PyObject *)type);
}

int
rbc_async_traverse(rbc_async_state *as, visitproc visit, void *arg)
{
    Py_VISIT(as->Call_type);
    Py_VISIT(as->AsyncMethod_type);
    Py_VISIT(as->await_error);
    return 0;
}

void
rbc_async_clear(rbc_async_state *as)
{
    rbc_async_call_free_list_clear(as);
    Py_CLEAR(as->Call_type);
    Py_CLEAR(as->AsyncMethod_type);
    Py_CLEAR(as->sleep_module_name);
    Py_CLEAR(as->str_sleep);
    Py_CLEAR(as->str_throw);
    Py_CLEAR(as->str_close);
    Py_CLEAR(as->stop_args);
    Py_CLEAR(as->await_error);
}
