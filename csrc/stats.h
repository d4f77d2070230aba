/* RetryStats: the type, its object (counters shared by reference by the
 * copies of a Retry), their names, and its creation at start-up.  A
 * Retry's block (block.h) points to one; the steps of call_with_retry
 * count into it with rbc_stats_count, under RBC_EXTRAS_LOCK (compat.h),
 * without calling Python code in between. */
#ifndef RBC_STATS_H
#define RBC_STATS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "compat.h"
#include "state.h"

typedef struct {
    PyObject_HEAD
    unsigned long long counts[RBC_STAT_COUNT];
    double slept; /* seconds of backoff slept (the delays, as computed) */
#ifdef Py_GIL_DISABLED
    PyMutex mutex;
#endif
} rbc_stats_object;

/* One more of `which`, when there are stats. */
static inline void
rbc_stats_count(rbc_stats_object *stats, rbc_stat which)
{
    if (stats != NULL) {
        RBC_EXTRAS_LOCK(stats);
        stats->counts[which]++;
        RBC_EXTRAS_UNLOCK(stats);
    }
}

/* The counters' names (es->stat_names) and the type (es->Stats_type),
 * added to the module as RetryStats. */
int rbc_stats_init(rbc_extras_state *es, PyObject *module);

#endif
