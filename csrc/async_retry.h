/* redis_backoff_c.asyncio.retry.Retry and its call_with_retry awaitable. */
#ifndef RBC_ASYNC_RETRY_H
#define RBC_ASYNC_RETRY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "retry_core.h"

/* The one-item tuple reused as the args of the StopIteration that
 * delivers a singleton result (see async_call.c): 3.12 and 3.13, where the
 * interpreter iterates our awaitable and the tuple has no cached hash, and
 * not where the refcount does not say who else holds it (free-threading). */
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define RBC_STOP_ARGS_CACHE 1
#else
#define RBC_STOP_ARGS_CACHE 0
#endif

/* How many finished awaitables' memory blocks are kept for reuse. */
#define RBC_CALL_FREE_LIST_SIZE 16

typedef struct {
    rbc_retry_flavor flavor;        /* the asyncio type, redis.asyncio.retry.Retry's family, defaults */
    PyTypeObject *Call_type;        /* the awaitable call_with_retry returns */
    PyTypeObject *AsyncMethod_type; /* call_with_retry's descriptor type (async_method.h) */
    PyObject *sleep_module_name;    /* "redis_backoff_c.asyncio.retry" */
    PyObject *str_sleep;            /* "sleep" */
    PyObject *str_throw;            /* "throw" */
    PyObject *str_close;            /* "close" */
    /* Memory of finished awaitables (untracked, holding no references),
     * reused by the next call_with_retry: see async_call.c. */
    PyObject *free_calls[RBC_CALL_FREE_LIST_SIZE];
    int free_calls_count;
    PyObject *stop_args; /* (singleton,) when RBC_STOP_ARGS_CACHE, else NULL */
} rbc_async_state;

struct rbc_state;

int rbc_async_init(struct rbc_state *st, PyObject *module);
int rbc_async_traverse(rbc_async_state *as, visitproc visit, void *arg);
void rbc_async_clear(rbc_async_state *as);

#endif
