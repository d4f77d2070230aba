/* The deadline and the clock: see deadline.h. */
#include "deadline.h"

#include <time.h>
#ifdef _WIN32
#include <windows.h>
#endif

double
rbc_monotonic_now(void)
{
#ifdef _WIN32
    static LARGE_INTEGER frequency;
    LARGE_INTEGER counter;
    if (frequency.QuadPart == 0) {
        QueryPerformanceFrequency(&frequency);
    }
    QueryPerformanceCounter(&counter);
    return (double)counter.QuadPart / (double)frequency.QuadPart;
#else
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
#endif
}

/* The call's start, read once per call with a deadline.  Where Linux has
 * it, the coarse clock: it costs half as much, and it is never ahead of
 * CLOCK_MONOTONIC (it lags by at most one tick, a few ms), so the elapsed
 * time measured against rbc_monotonic_now() is never under-estimated: a
 * deadline can only be applied up to one tick early, never late. */
static double
monotonic_start(void)
{
#if defined(CLOCK_MONOTONIC_COARSE) && !defined(_WIN32)
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
#else
    return rbc_monotonic_now();
#endif
}

/* The earlier of `deadline_at` and the command's, when a command with a
 * deadline is running in this context (the ContextVar `var` holds a float
 * then).  The variable's lookup cannot run Python code; when it fails (no
 * memory), the call keeps its own deadline. */
static double
command_deadline(PyObject *var, double deadline_at)
{
    PyObject *value = NULL;
    if (PyContextVar_Get(var, NULL, &value) < 0) {
        PyErr_Clear();
        return deadline_at;
    }
    if (value != NULL && PyFloat_CheckExact(value) && PyFloat_AS_DOUBLE(value) < deadline_at) {
        deadline_at = PyFloat_AS_DOUBLE(value);
    }
    Py_XDECREF(value); /* a float or None: runs no code */
    return deadline_at;
}

void
rbc_extras_begin_slow(const rbc_state *st, rbc_retry_extras *extras, rbc_call_extras *call)
{
    rbc_stats_count(extras->stats, RBC_STAT_CALLS);
    if (extras->deadline != NULL) {
        call->deadline_at = monotonic_start() + extras->deadline_seconds;
        if (st->extras.call_deadline != NULL) {
            call->deadline_at = command_deadline(st->extras.call_deadline, call->deadline_at);
        }
    }
}

PyObject *
rbc_extras_deadline_float(rbc_retry_extras *extras, double deadline_at)
{
#ifdef Py_GIL_DISABLED
    /* Without the GIL the shared float would be a race: one per call. */
    (void)extras;
    return PyFloat_FromDouble(deadline_at);
#else
    PyObject *last = extras->last_deadline_at;
    if (last != NULL && PyFloat_AS_DOUBLE(last) == deadline_at) {
        return Py_NewRef(last);
    }
    PyObject *made = PyFloat_FromDouble(deadline_at);
    if (made != NULL) {
        /* The old float's dealloc runs no Python code. */
        Py_XSETREF(extras->last_deadline_at, Py_NewRef(made));
    }
    return made;
#endif
}

int
rbc_extras_before_sleep(rbc_retry_extras *const *extras, rbc_call_extras *call,
                        PyObject *delay)
{
    rbc_retry_extras *block = *extras;
    if (!call->counted || block == NULL || (call->deadline_at == 0.0 && block->stats == NULL)) {
        return 1;
    }
    double seconds = PyFloat_AsDouble(delay);
    if (seconds == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    /* The delay's __float__ may have run Python code that changed the
     * Retry's extras: read them again. */
    if (call->deadline_at != 0.0 && rbc_monotonic_now() + seconds >= call->deadline_at) {
        rbc_extras_give_up(*extras, call, RBC_GIVE_UP_DEADLINE);
        return 0;
    }
    return 1;
}

double
rbc_extras_sleep_started(const rbc_retry_extras *extras)
{
    return extras != NULL && extras->stats != NULL ? rbc_monotonic_now() : 0.0;
}

void
rbc_extras_add_slept(const rbc_retry_extras *extras, double seconds)
{
    rbc_stats_object *stats = extras != NULL ? extras->stats : NULL;
    if (stats == NULL) {
        return;
    }
    RBC_EXTRAS_LOCK(stats);
    stats->slept += seconds > 0.0 ? seconds : 0.0;
    RBC_EXTRAS_UNLOCK(stats);
}

void
rbc_extras_sleep_ended(const rbc_retry_extras *extras, double started)
{
    if (started != 0.0) {
        rbc_extras_add_slept(extras, rbc_monotonic_now() - started);
    }
}

int
rbc_extras_deadline_passed(rbc_retry_extras *extras, rbc_call_extras *call)
{
    if (call->deadline_at != 0.0 && rbc_monotonic_now() >= call->deadline_at) {
        rbc_extras_give_up(extras, call, RBC_GIVE_UP_DEADLINE);
        return 1;
    }
    return 0;
}

int
rbc_extras_before_retry(rbc_retry_extras *extras, rbc_call_extras *call)
{
    if (rbc_extras_deadline_passed(extras, call)) {
        return 0;
    }
    if (call->counted && extras != NULL) {
        rbc_stats_count(extras->stats, RBC_STAT_RETRIES);
    }
    return 1;
}
