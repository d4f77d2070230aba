/* RetryBudget (gRFC A6 retry throttling): the type, its object (a bucket
 * of tokens shared by reference by the copies of a Retry: one budget per
 * client) and its creation at start-up.  A Retry's block (block.h) points
 * to one; the steps of call_with_retry (extras.h) take and give its
 * tokens, under RBC_EXTRAS_LOCK (compat.h), without calling Python code in
 * between. */
#ifndef RBC_BUDGET_H
#define RBC_BUDGET_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "compat.h"
#include "state.h"

typedef struct {
    PyObject_HEAD
    PyObject *max_tokens_obj; /* the objects given, for the attributes */
    PyObject *token_ratio_obj;
    double max_tokens;  /* > 0, finite */
    double token_ratio; /* > 0, finite */
    double tokens;      /* in [0, max_tokens] */
    double threshold;   /* max_tokens / 2: retries need tokens above it */
#ifdef Py_GIL_DISABLED
    PyMutex mutex;
#endif
} rbc_budget_object;

/* The tokens left, read under the lock. */
double rbc_budget_tokens(rbc_budget_object *self);

/* The type (es->Budget_type), added to the module as RetryBudget. */
int rbc_budget_init(rbc_extras_state *es, PyObject *module);

#endif
