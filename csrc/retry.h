/* redis_backoff_c.retry.Retry: the synchronous Retry and call_with_retry. */
#ifndef RBC_RETRY_H
#define RBC_RETRY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "state.h"

#include "retry_core.h"

int rbc_retry_init(rbc_state *st, PyObject *module);
void rbc_retry_clear(rbc_retry_state *rs);

#endif
