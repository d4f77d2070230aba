/* The extras in redis-py's cluster command loop (redis-py 8.2 and later).
 *
 * RedisCluster.execute_command (sync and asyncio) retries a command in a
 * loop of its own, not through call_with_retry: it reads the cluster
 * Retry's get_retries() and, after each failure it retries, asks
 * `_retry_backoff_delay(retry, failures)` for the backoff to sleep.
 * redis_backoff_c/_cluster.py wraps both points while patch() is active and
 * calls these module functions, which run extras.h's hooks on the C Retry
 * the cluster holds (either flavor), in call_with_retry's order:
 *
 *     _cluster_begin(retry)                the command starts
 *     _cluster_failed(retry, error)        an attempt failed, a retry is due:
 *                                          counted, writes="at-most-once"
 *                                          and the budget asked
 *     (the loop's own hook computes the delay)
 *     _cluster_delay(retry, deadline_at, delay)
 *                                          the deadline asked
 *     _cluster_retried(retry, slept)       that retry's attempt was made
 *     _cluster_ended(retry, outcome)       the command ended (how: below)
 *
 * A cluster command is one call: its attempts, retries and one outcome are
 * counted as call_with_retry counts them, the budget is asked before each
 * retry, and the deadline bounds the command from its first attempt. */
#ifndef RBC_CLUSTER_H
#define RBC_CLUSTER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "state.h"

/* How a cluster command ended: _cluster_ended's `outcome`. */
enum { RBC_CLUSTER_SUCCEEDED,     /* the last attempt returned */
       RBC_CLUSTER_EXHAUSTED,     /* it failed with a retried error, no retry left */
       RBC_CLUSTER_UNHANDLED,     /* it failed with an error the loop does not retry */
       RBC_CLUSTER_NOT_RETRYABLE, /* the loop gave up between attempts (no node reached) */
       RBC_CLUSTER_ABORTED,       /* ended between attempts otherwise (cancelled in the sleep) */
       RBC_CLUSTER_OUTCOMES };

/* What _cluster_failed answers. */
enum { RBC_CLUSTER_GO_ON,               /* retry */
       RBC_CLUSTER_GIVE_UP_BUDGET,      /* the budget refuses: raise what the loop raises */
       RBC_CLUSTER_GIVE_UP_MAY_HAVE_RUN /* writes="at-most-once": raise the error itself */
};

/* _cluster_begin(retry): None when `retry` is no C Retry or has no extras
 * (nothing to count); else the command counted as a call, and its deadline
 * (monotonic seconds; 0.0 for none). */
PyObject *rbc_cluster_begin(PyObject *module, PyObject *retry);
/* _cluster_failed(retry, error): an attempt failed with `error`, which the
 * loop retries (counted, one token taken); then, as in call_with_retry
 * before the backoff is computed, writes="at-most-once" and the budget are
 * asked: an RBC_CLUSTER_GO_ON / _GIVE_UP_* (the give-up counted). */
PyObject *rbc_cluster_failed(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
/* _cluster_delay(retry, deadline_at, delay): the loop will sleep `delay`
 * (None: it will not sleep) before the next attempt.  None when that
 * attempt would start at or past the deadline (the give-up counted); else
 * the seconds to sleep (0.0 for None). */
PyObject *rbc_cluster_delay(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
/* _cluster_retried(retry, slept): the retry's attempt started, after
 * `slept` seconds of backoff. */
PyObject *rbc_cluster_retried(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
/* _cluster_ended(retry, outcome): counts the outcome (RBC_CLUSTER_*), with
 * the last attempt's own count for the first three. */
PyObject *rbc_cluster_ended(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* redis_backoff_c._speedups._ClusterCommand(original, counting): what
 * patch() puts in RedisCluster.execute_command (sync and asyncio).  A
 * method descriptor whose call reads self.retry and calls `counting` (the
 * Python wrapper of redis_backoff_c/_cluster.py, which runs the hooks
 * above) when it is a C Retry with extras, else `original` (redis-py's
 * function) directly, with the same arguments: a cluster whose Retry has
 * no extras pays one attribute read, no Python frame. */
int rbc_cluster_init(rbc_state *st, PyObject *module);
int rbc_cluster_traverse(rbc_cluster_state *cs, visitproc visit, void *arg);
void rbc_cluster_clear(rbc_cluster_state *cs);

/* clang-format off */
#define RBC_CLUSTER_METHODS                                                         \
    {"_cluster_begin", rbc_cluster_begin, METH_O,                                   \
     "_cluster_begin(retry, /)\n--\n\n"                                             \
     "A cluster command starts: None without extras, else its deadline (0.0: none)."}, \
    {"_cluster_failed", (PyCFunction)(void (*)(void))rbc_cluster_failed, METH_FASTCALL, \
     "_cluster_failed(retry, error, /)\n--\n\n"                                     \
     "An attempt failed and a retry is due: 0 to retry, 1 when the budget\n"        \
     "refuses it, 2 when it may have run (writes='at-most-once')."},                \
    {"_cluster_delay", (PyCFunction)(void (*)(void))rbc_cluster_delay, METH_FASTCALL, \
     "_cluster_delay(retry, deadline_at, delay, /)\n--\n\n"                         \
     "The seconds to sleep before the retry (delay None: 0.0), or None when the\n"  \
     "deadline refuses it."},                                                       \
    {"_cluster_retried", (PyCFunction)(void (*)(void))rbc_cluster_retried, METH_FASTCALL, \
     "_cluster_retried(retry, slept, /)\n--\n\n"                                    \
     "The retry's attempt started after `slept` seconds of backoff."},              \
    {"_cluster_ended", (PyCFunction)(void (*)(void))rbc_cluster_ended, METH_FASTCALL, \
     "_cluster_ended(retry, outcome, /)\n--\n\n"                                    \
     "The command ended: count its outcome."}
/* clang-format on */

#endif
