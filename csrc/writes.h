/* The writes policy (writes="at-most-once"): the value a Retry's
 * `writes` takes, and the step after fail() that asks redis_backoff_c.
 * writes' judge (module state, set by the package) whether a failed
 * attempt may have run on the server, so that it is raised rather than
 * retried.  Reads a Retry's block (block.h). */
#ifndef RBC_WRITES_H
#define RBC_WRITES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "block.h"

/* The writes policy `value` as the block holds it: 0 with *policy NULL
 * for "at-least-once" or None (redis-py's), the interned "at-most-once"
 * for that; -1 with TypeError or ValueError naming the parameter.  Runs
 * no Python code (exact str only). */
int rbc_writes_check(rbc_extras_state *es, const char *owner, const char *name, PyObject *value,
                     PyObject **policy);

/* After fail(), for a caught error that the checkers let through: under
 * writes="at-most-once", redis_backoff_c.writes' judge (module state) is
 * asked whether the failed attempt may have run on the server; it marks
 * the error when so.  1 to give up (counted as give_ups_may_have_run), 0
 * to go on, -1 when the judge raised.  Nothing for a call not counted or a
 * Retry at redis-py's at-least-once.  `extras` is the address of the
 * Retry's field, read again after the judge, which runs Python code. */
int rbc_extras_may_have_run(rbc_extras_state *es, rbc_retry_extras *const *extras,
                            rbc_call_extras *call, PyObject *error);

#endif
