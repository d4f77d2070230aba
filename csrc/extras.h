/* Opt-in extras of both Retry types, beyond redis-py: a deadline per
 * call_with_retry, a shared retry budget (RetryBudget, gRFC A6 retry
 * throttling), shared counters (RetryStats), the writes policy, and the
 * hooks on_retry and on_give_up (called with a RetryEvent).
 *
 * A Retry holds them in one block (its `extras` field), NULL when none
 * is set: the plain Retry tests one pointer and behaves, compares and
 * hashes exactly as redis-py's.  The hooks below are the only places
 * call_with_retry (sync and asyncio) touches the extras; retry_core.h
 * lists where each one goes in the loop.  Budget and stats are changed
 * only while the GIL is held and without calling Python code in between
 * (the module declares Py_MOD_GIL_USED); a free-threaded build would
 * take their mutex (RBC_EXTRAS_LOCK).
 */
#ifndef RBC_EXTRAS_H
#define RBC_EXTRAS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "state.h"

/* ---- the types ------------------------------------------------------- */

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

typedef struct {
    PyObject_HEAD
    unsigned long long counts[RBC_STAT_COUNT];
    double slept; /* seconds of backoff slept (the delays, as computed) */
#ifdef Py_GIL_DISABLED
    PyMutex mutex;
#endif
} rbc_stats_object;

#ifdef Py_GIL_DISABLED
#define RBC_EXTRAS_LOCK(obj) PyMutex_Lock(&(obj)->mutex)
#define RBC_EXTRAS_UNLOCK(obj) PyMutex_Unlock(&(obj)->mutex)
#else
/* The GIL serialises every update: none calls Python code. */
#define RBC_EXTRAS_LOCK(obj) ((void)0)
#define RBC_EXTRAS_UNLOCK(obj) ((void)0)
#endif

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

int rbc_extras_init(rbc_state *st, PyObject *module);
int rbc_extras_traverse(rbc_extras_state *es, visitproc visit, void *arg);
void rbc_extras_clear(rbc_extras_state *es);

/* ---- a Retry's block ------------------------------------------------- */

/* The extras by attribute, in the block's order. */
enum { RBC_EXTRA_DEADLINE,
       RBC_EXTRA_BUDGET,
       RBC_EXTRA_STATS,
       RBC_EXTRA_WRITES,
       RBC_EXTRA_ON_RETRY,
       RBC_EXTRA_ON_GIVE_UP,
       RBC_EXTRA_COUNT };

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

void rbc_extras_begin_slow(rbc_retry_extras *extras, rbc_call_extras *call);
void rbc_extras_failed_slow(rbc_retry_extras *extras, int caught);
int rbc_extras_refuse_retry_slow(rbc_retry_extras *extras, rbc_call_extras *call, int exhausted);
void rbc_extras_aborted_slow(rbc_retry_extras *extras);

/* A call's deadline_at as a float object (a new reference, or NULL with
 * MemoryError), for the coroutine design, which carries it in a local.
 * The start is read from the coarse clock, which moves once a tick (a few
 * ms): calls in a row mostly share their deadline, so the float made last
 * is kept in the block and handed out again while its value is the same,
 * an allocation saved per call.  Runs no Python code. */
PyObject *rbc_extras_deadline_float(rbc_retry_extras *extras, double deadline_at);

/* Once, when the call starts (after reset()): counts the call and fixes
 * its deadline. */
static inline void
rbc_extras_call_begin(rbc_retry_extras *extras, rbc_call_extras *call)
{
    call->deadline_at = 0.0;
    call->counted = extras != NULL;
    call->gave_up = RBC_GIVE_UP_NONE;
    if (extras != NULL) {
        rbc_extras_begin_slow(extras, call);
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

/* Around a backoff sleep: slept_seconds adds the time it actually took
 * (a cancelled one too), measured only when stats are set (started 0). */
double rbc_extras_sleep_started(const rbc_retry_extras *extras);
void rbc_extras_sleep_ended(const rbc_retry_extras *extras, double started);
/* slept_seconds adds `seconds` (a sleep measured by the caller; negative
 * counts 0). */
void rbc_extras_add_slept(const rbc_retry_extras *extras, double seconds);

/* After fail(), for a caught error that the checkers let through: under
 * writes="at-most-once", redis_backoff_c.writes' judge (module state) is
 * asked whether the failed attempt may have run on the server; it marks
 * the error when so.  1 to give up (counted as give_ups_may_have_run), 0
 * to go on, -1 when the judge raised.  Nothing for a call not counted or a
 * Retry at redis-py's at-least-once.  `extras` is the address of the
 * Retry's field, read again after the judge, which runs Python code. */
int rbc_extras_may_have_run(rbc_extras_state *es, rbc_retry_extras *const *extras,
                            rbc_call_extras *call, PyObject *error);

/* Before sleeping `delay` (> 0): 1 to sleep, 0 to give up because the
 * sleep would reach the call's deadline, -1 when delay is no real
 * number.  Nothing for a call not counted.
 * `extras` is the address of the Retry's field, read again after the
 * delay's __float__, which may change it. */
int rbc_extras_before_sleep(rbc_retry_extras *const *extras, rbc_call_extras *call,
                            PyObject *delay);

/* Before each attempt after the first (after the sleep, if any): 1 to
 * call do() again (counted as a retry), 0 to give up because the deadline
 * has passed. */
int rbc_extras_before_retry(rbc_retry_extras *extras, rbc_call_extras *call);

/* 1 when the call's deadline has passed (the give-up counted), else 0. */
int rbc_extras_deadline_passed(rbc_retry_extras *extras, rbc_call_extras *call);

/* The hooks (redis_backoff_c.hooks).  Both read the Retry's field at
 * `extras` (the Python code run before them may have changed or freed the
 * block) and, when the call is counted and the hook set, call it with a
 * RetryEvent; `attempt` is the call's failed attempts, this one included.
 * An Exception the hook raises goes to the module's reporter
 * (redis_backoff_c.hooks._hook_failed) and is swallowed: 0, as when it
 * returns.  Any other (KeyboardInterrupt, SystemExit) is left set, with
 * `error` as its context when it has none (chained as CPython chains: no
 * loop, if it was on error's own chain): -1.  The caller makes `error` the
 * handled exception around them.  No exception may be set on entry. */

/* on_retry(RetryEvent(attempt, error, delay, None)): the retry is decided,
 * just before its backoff sleep (if any). */
int rbc_extras_retrying(rbc_extras_state *es, rbc_retry_extras *const *extras,
                        const rbc_call_extras *call, PyObject *error, long long attempt,
                        PyObject *delay);
/* on_give_up(RetryEvent(attempt, error, None, reason)) when the call gave
 * up (call->gave_up), just before the error is raised; nothing otherwise.
 * `failures` is the loop's count, which a not_retryable error never
 * entered: its attempt is one more. */
int rbc_extras_gave_up(rbc_extras_state *es, rbc_retry_extras *const *extras,
                       const rbc_call_extras *call, PyObject *error, long long failures);

#endif
