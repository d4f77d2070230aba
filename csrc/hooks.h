/* on_retry and on_give_up (redis_backoff_c.hooks): the value a Retry's
 * hook takes, RetryEvent (their argument: a tuple type of its own, and
 * the spare event whose memory the next call reuses), and the two steps
 * of call_with_retry that call them, with what a hook raises reported or
 * chained.  Reads a Retry's block (block.h). */
#ifndef RBC_HOOKS_H
#define RBC_HOOKS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "block.h"

/* on_retry or on_give_up: None, or a callable; TypeError naming the
 * parameter otherwise. */
int rbc_hooks_check(const char *owner, const char *name, PyObject *value);

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

/* The reasons' strings and RetryEvent (es->Event_type), added to the
 * module; and their release, with the spare event. */
int rbc_hooks_init(rbc_extras_state *es, PyObject *module);
void rbc_hooks_clear(rbc_extras_state *es);

#endif
