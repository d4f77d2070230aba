/* Opt-in extras of both Retry types, beyond redis-py: a deadline per
 * call_with_retry, a shared retry budget (RetryBudget, gRFC A6 retry
 * throttling), shared counters (RetryStats), the writes policy, and the
 * hooks on_retry and on_give_up (called with a RetryEvent).
 *
 * This unit ties them to a Retry: it makes, sets, copies, compares,
 * pickles and frees a Retry's block (block.h), runs the steps of
 * call_with_retry that only count (the success path inline, the failed
 * attempt, the retries limit and the budget, an aborted call), and starts
 * the extras' module state.  Each extra is a unit of its own: budget.c,
 * stats.c, deadline.c, writes.c, hooks.c; this header includes theirs, so
 * that the retry core and the Retry types include this one alone.
 *
 * A Retry holds them in one block (its `extras` field), NULL when none
 * is set: the plain Retry tests one pointer and behaves, compares and
 * hashes exactly as redis-py's.  The steps below and in the units' headers
 * are the only places call_with_retry (sync and asyncio) touches the
 * extras; retry_core.h lists where each one goes in the loop.  Budget and
 * stats are changed only while the GIL is held and without calling Python
 * code in between (the module declares Py_MOD_GIL_USED); a free-threaded
 * build would take their mutex (RBC_EXTRAS_LOCK).
 */
#ifndef RBC_EXTRAS_H
#define RBC_EXTRAS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "block.h"
#include "budget.h"
#include "deadline.h"
#include "hooks.h"
#include "state.h"
#include "stats.h"
#include "writes.h"

int rbc_extras_init(rbc_state *st, PyObject *module);
int rbc_extras_traverse(rbc_extras_state *es, visitproc visit, void *arg);
void rbc_extras_clear(rbc_extras_state *es);

/* ---- a Retry's block ------------------------------------------------- */

/* Retry(..., *, deadline=None, budget=None, stats=None, writes=None,
 * on_retry=None, on_give_up=None): checks the values given (values[i] for
 * RBC_EXTRA_i: None, or a positive real / a RetryBudget / a RetryStats /
 * "at-least-once" or "at-most-once" / a callable, twice; TypeError or
 * ValueError naming the parameter), all before any is set, and sets them
 * into the Retry's block, *extras (made when needed, freed when it holds
 * nothing). */
int rbc_retry_extras_set(rbc_extras_state *es, const char *owner, rbc_retry_extras **extras,
                         PyObject *const values[RBC_EXTRA_COUNT]);
/* The attribute `which` (an RBC_EXTRA_*): its value, or None
 * ("at-least-once" for writes). */
PyObject *rbc_retry_extras_get(rbc_extras_state *es, const rbc_retry_extras *extras, int which);
/* retry.<attribute> = value: None unsets it; deleting is refused. */
int rbc_retry_extras_store(rbc_extras_state *es, rbc_retry_extras **extras, int which,
                           PyObject *value);
/* A new block sharing `from`'s objects (copy.copy and copy.deepcopy of a
 * Retry keep the same budget and stats) into *to; 0, or -1 on
 * MemoryError. */
int rbc_retry_extras_copy(rbc_retry_extras **to, const rbc_retry_extras *from);
int rbc_retry_extras_traverse(const rbc_retry_extras *extras, visitproc visit, void *arg);
/* Frees the block, detached from the Retry (*extras = NULL) first. */
void rbc_retry_extras_clear(rbc_retry_extras **extras);
/* == of two blocks: deadline by value, the others by identity; a
 * missing block (NULL: none set, or redis-py's Retry) has none.  1, 0,
 * -1. */
int rbc_retry_extras_equal(const rbc_retry_extras *a, const rbc_retry_extras *b);
/* ", deadline=..., budget=..., stats=..., writes=..., on_retry=...,
 * on_give_up=..." for the extras that are set. */
PyObject *rbc_retry_extras_repr(const rbc_retry_extras *extras);
/* The pickle state's entries for the extras that are set: writes up to
 * RBC_EXTRA_COUNT keys (the attributes' names, borrowed
 * from module state) and values (new references) and returns how many.  Taken before any is
 * stored, since storing into a dict with a subclass's keys may run code
 * that frees the block. */
int rbc_retry_extras_items(rbc_extras_state *es, const rbc_retry_extras *extras, PyObject **keys,
                           PyObject **values);

/* ---- the hooks of call_with_retry -------------------------------------- */

void rbc_extras_failed_slow(rbc_retry_extras *extras, int caught);
int rbc_extras_refuse_retry_slow(rbc_retry_extras *extras, rbc_call_extras *call, int exhausted);
void rbc_extras_aborted_slow(rbc_retry_extras *extras);

/* Once, when the call starts (after reset()): counts the call and fixes
 * its deadline. */
static inline void
rbc_extras_call_begin(const rbc_state *st, rbc_retry_extras *extras, rbc_call_extras *call)
{
    call->deadline_at = 0.0;
    call->counted = extras != NULL;
    call->gave_up = RBC_GIVE_UP_NONE;
    if (extras != NULL) {
        rbc_extras_begin_slow(st, extras, call);
    }
}

/* do() returned: counts the attempt and the success, and gives the budget
 * its token_ratio back. */
static inline void
rbc_extras_call_succeeded(rbc_retry_extras *extras)
{
    if (extras == NULL) {
        return;
    }
    rbc_stats_object *stats = extras->stats;
    if (stats != NULL) {
        RBC_EXTRAS_LOCK(stats);
        stats->counts[RBC_STAT_ATTEMPTS]++;
        stats->counts[RBC_STAT_SUCCESSES]++;
        RBC_EXTRAS_UNLOCK(stats);
    }
    rbc_budget_object *budget = extras->budget;
    if (budget != NULL) {
        RBC_EXTRAS_LOCK(budget);
        double tokens = budget->tokens + budget->token_ratio;
        budget->tokens = tokens < budget->max_tokens ? tokens : budget->max_tokens;
        RBC_EXTRAS_UNLOCK(budget);
    }
}

/* Called by rbc_retry_catches for every error do() raised: an attempt,
 * failed with a supported error (caught: one token taken) or passed
 * through unhandled. */
static inline void
rbc_extras_attempt_failed(rbc_retry_extras *extras, int caught)
{
    if (extras != NULL) {
        rbc_extras_failed_slow(extras, caught);
    }
}

/* Called when a checker gave up on the error: rbc_retry_call_checker_allows
 * when the call's is_retryable said no; the loops, after fail(), when the
 * Retry's own checker (rbc_retry_own_checker_allows) said no. */
static inline void
rbc_extras_gave_up_not_retryable(rbc_retry_extras *extras, rbc_call_extras *call)
{
    rbc_extras_give_up(extras, call, RBC_GIVE_UP_NOT_RETRYABLE);
}

/* Called by rbc_retry_exhausted after fail(): 1 when the retry is refused
 * (retries exhausted, or the budget at or below half), counted by reason;
 * `exhausted` is redis-py's verdict. */
static inline int
rbc_extras_refuse_retry(rbc_retry_extras *extras, rbc_call_extras *call, int exhausted)
{
    if (extras == NULL) {
        call->gave_up = exhausted ? RBC_GIVE_UP_EXHAUSTED : RBC_GIVE_UP_NONE;
        return exhausted;
    }
    return rbc_extras_refuse_retry_slow(extras, call, exhausted);
}

/* The call ended with an exception that is none of the outcomes above: one
 * raised by fail(), a checker, compute() or the sleep, or thrown in
 * (cancellation, close()) while fail() or the sleep was awaited.  With
 * it, every call that ends lands in exactly one outcome counter. */
static inline void
rbc_extras_call_aborted(rbc_retry_extras *extras)
{
    if (extras != NULL) {
        rbc_extras_aborted_slow(extras);
    }
}

#endif
