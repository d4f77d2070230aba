/* The deadline of a call_with_retry, and the clock: when a call that
 * starts must end (fixed once, from the Retry's `deadline`), the checks
 * before each sleep and each retry that give up rather than pass it, and
 * the time each backoff sleep took (RetryStats' slept_seconds).  Reads a
 * Retry's block (block.h); runs no Python code but a delay's __float__. */
#ifndef RBC_DEADLINE_H
#define RBC_DEADLINE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "block.h"

/* Monotonic seconds: CLOCK_MONOTONIC, the clock of time.monotonic(). */
double rbc_monotonic_now(void);

/* Once per call with extras, when it starts (rbc_extras_call_begin,
 * extras.h): counts the call and fixes its deadline: its start plus the
 * Retry's deadline, or the deadline of the command running in the context
 * (the extras state's call_deadline, while patch() sets it) when earlier.
 * Runs no Python code. */
void rbc_extras_begin_slow(const rbc_state *st, rbc_retry_extras *extras, rbc_call_extras *call);

/* A call's deadline_at as a float object (a new reference, or NULL with
 * MemoryError), for the coroutine design, which carries it in a local.
 * The start is read from the coarse clock, which moves once a tick (a few
 * ms): calls in a row mostly share their deadline, so the float made last
 * is kept in the block and handed out again while its value is the same,
 * an allocation saved per call.  Runs no Python code. */
PyObject *rbc_extras_deadline_float(rbc_retry_extras *extras, double deadline_at);

/* Around a backoff sleep: slept_seconds adds the time it actually took
 * (a cancelled one too), measured only when stats are set (started 0). */
double rbc_extras_sleep_started(const rbc_retry_extras *extras);
void rbc_extras_sleep_ended(const rbc_retry_extras *extras, double started);
/* slept_seconds adds `seconds` (a sleep measured by the caller; negative
 * counts 0). */
void rbc_extras_add_slept(const rbc_retry_extras *extras, double seconds);

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

#endif
