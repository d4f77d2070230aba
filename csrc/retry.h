/* redis_backoff_c.retry.Retry: the synchronous Retry and call_with_retry. */
#ifndef RBC_RETRY_H
#define RBC_RETRY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "retry_core.h"

typedef struct {
    rbc_retry_flavor flavor; /* the sync type, redis.retry.Retry's family and defaults */
    /* Shared with the asyncio Retry, which is initialised after this. */
    rbc_retry_core_state core;
    PyObject *sleep_module_name; /* "redis_backoff_c.retry" */
    PyObject *str_sleep;         /* "sleep" */
} rbc_retry_state;

struct rbc_state;

int rbc_retry_init(struct rbc_state *st, PyObject *module);
int rbc_retry_traverse(rbc_retry_state *rs, visitproc visit, void *arg);
void rbc_retry_clear(rbc_retry_state *rs);

#endif
