/* What a Retry holds of the extras, data only: its block (the `extras`
 * field of a Retry, NULL when none is set, so that a plain Retry tests one
 * pointer), a call's record of them (rbc_call_extras), the block's fields
 * by attribute, and the give-up every step of a call records.  Read by the
 * units of the extras (deadline.c, writes.c, hooks.c) and by extras.c,
 * which makes, copies and frees the block. */
#ifndef RBC_BLOCK_H
#define RBC_BLOCK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "budget.h"
#include "state.h"
#include "stats.h"

/* What a Retry holds (owned references, NULL when not set). */
struct rbc_retry_extras {
    PyObject *deadline;      /* the positive real given */
    double deadline_seconds; /* its value */
    rbc_budget_object *budget;
    rbc_stats_object *stats;
    PyObject *writes;   /* the interned "at-most-once", or NULL: at-least-once */
    PyObject *on_retry; /* callables (redis_backoff_c.hooks) */
    PyObject *on_give_up;
    PyObject *last_deadline_at; /* the float rbc_extras_deadline_float made last, or NULL */
};
typedef struct rbc_retry_extras rbc_retry_extras;

/* Per call of call_with_retry: when it must end (monotonic seconds), or 0
 * when the Retry had no deadline when the call started; and whether the
 * Retry had any extras then.  A call that starts without them is plain to
 * its end, whatever is set on the Retry during it (every design's success
 * path decides so, once, at the start), so that each call is counted in
 * full or not at all; one that starts with them uses the ones the Retry
 * holds at each step. */
typedef struct {
    double deadline_at;
    int counted;
    int gave_up; /* why the call gave up (an rbc_give_up), once it has */
} rbc_call_extras;

/* The extras by attribute, in the block's order. */
enum { RBC_EXTRA_DEADLINE,
       RBC_EXTRA_BUDGET,
       RBC_EXTRA_STATS,
       RBC_EXTRA_WRITES,
       RBC_EXTRA_ON_RETRY,
       RBC_EXTRA_ON_GIVE_UP,
       RBC_EXTRA_COUNT };

/* The block's fields by RBC_EXTRA_* index. */
static inline PyObject **
rbc_retry_extras_field_of(rbc_retry_extras *extras, int which)
{
    switch (which) {
    case RBC_EXTRA_DEADLINE:
        return &extras->deadline;
    case RBC_EXTRA_BUDGET:
        return (PyObject **)&extras->budget;
    case RBC_EXTRA_WRITES:
        return &extras->writes;
    case RBC_EXTRA_ON_RETRY:
        return &extras->on_retry;
    case RBC_EXTRA_ON_GIVE_UP:
        return &extras->on_give_up;
    default:
        return (PyObject **)&extras->stats;
    }
}

static inline PyObject *
rbc_retry_extras_field(const rbc_retry_extras *extras, int which)
{
    return *rbc_retry_extras_field_of((rbc_retry_extras *)extras, which);
}

/* Counts the give-up `reason` in the stats, and records it in the call
 * for on_give_up (rbc_extras_gave_up). */
static inline void
rbc_extras_give_up(rbc_retry_extras *extras, rbc_call_extras *call, rbc_give_up reason)
{
    static const rbc_stat stat_of[RBC_GIVE_UP_COUNT] = {
        RBC_STAT_COUNT, /* none: never counted */
        RBC_STAT_GIVE_UPS_EXHAUSTED,
        RBC_STAT_GIVE_UPS_NOT_RETRYABLE,
        RBC_STAT_GIVE_UPS_DEADLINE,
        RBC_STAT_GIVE_UPS_BUDGET,
        RBC_STAT_GIVE_UPS_MAY_HAVE_RUN,
    };
    call->gave_up = reason;
    rbc_stats_object *stats = extras != NULL ? extras->stats : NULL;
    if (stats != NULL && reason != RBC_GIVE_UP_NONE) {
        RBC_EXTRAS_LOCK(stats);
        stats->counts[stat_of[reason]]++;
        RBC_EXTRAS_UNLOCK(stats);
    }
}

#endif
