/* redis_backoff_c.retry.Retry: the synchronous Retry and call_with_retry. */
#ifndef RBC_RETRY_H
#define RBC_RETRY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    PyTypeObject *Retry_type;
} rbc_retry_state;

struct rbc_state;

int rbc_retry_init(struct rbc_state *st, PyObject *module);
int rbc_retry_traverse(rbc_retry_state *rs, visitproc visit, void *arg);
void rbc_retry_clear(rbc_retry_state *rs);

#endif
