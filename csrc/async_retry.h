/* redis_backoff_c.asyncio.retry.Retry and its call_with_retry awaitable. */
#ifndef RBC_ASYNC_RETRY_H
#define RBC_ASYNC_RETRY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "state.h"

#include "retry_core.h"

int rbc_async_init(rbc_state *st, PyObject *module);
int rbc_async_traverse(rbc_async_state *as, visitproc visit, void *arg);
void rbc_async_clear(rbc_async_state *as);

#endif
