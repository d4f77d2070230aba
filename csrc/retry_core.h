/* What the synchronous and the asyncio Retry share: the object layout, its
 * attributes and methods, and the retry decisions of call_with_retry.
 * This layer sits above the strategies and the extras, and below the two
 * Retry types, which it never names: it knows them as flavors.
 *
 * Each Retry type (retry.c, async_retry.c) is a "flavor", one slot of
 * st->core.flavors: its own heap type, the redis-py class whose instances
 * its __eq__ accepts, and its default supported_errors.  The type's slots
 * are thin wrappers that pass their flavor to the rbc_retry_* functions
 * below.
 *
 * call_with_retry, in redis-py's order, is assembled from these steps
 * (`failures` starts at 0; "handling" means the error is set as the handled
 * exception, sys.exc_info(), so that an exception raised by a callback gets
 * it as __context__, as inside redis-py's `except` block):
 *
 *     rbc_retry_reset_backoff(self)                     once
 *     rbc_extras_call_begin(self->extras, &call)        once (extras.h)
 *     loop:
 *         result = do()          (async: awaited)
 *         success: rbc_extras_call_succeeded(self->extras); return it
 *         error = rbc_exc_fetch()
 *         rbc_retry_catches(self, error)                0: re-raise untouched
 *         prev = rbc_exc_begin_handling(error)
 *         rbc_retry_own_checker_allows(self, error)            0: rejected, then
 *             rbc_retry_call_fail(fail, error, failures + 1, with_failure_count)
 *                                (async: its result awaited)
 *             rbc_extras_gave_up_not_retryable(self->extras); re-raise error
 *         rbc_retry_call_checker_allows(st, is_retryable, error) 0: re-raise error
 *             (it counts the give-up in the extras first)
 *         failures += 1
 *         rbc_retry_call_fail(fail, error, failures, with_failure_count)
 *                                (async: its result awaited)
 *         rbc_extras_may_have_run(es, &self->extras, &call, error) 1: raise error
 *         rbc_retry_exhausted(self, failures)           1: raise error
 *         delay = rbc_retry_next_delay(self, failures, &sleep)
 *         if sleep: rbc_extras_before_sleep(&self->extras, &call, delay) 0: raise error
 *         rbc_extras_retrying(es, &self->extras, &call, error, failures, delay)  on_retry
 *         if sleep: sleep(delay) (async: asyncio.sleep awaited)
 *         rbc_exc_end_handling(prev)
 *         rbc_extras_before_retry(self->extras, &call)  0: raise error
 *
 * Each "raise error" above that is a give-up (a checker, the writes policy,
 * the retries limit, the budget, the deadline) records its reason in
 * call.gave_up where it is counted; the loop's one re-raise then calls
 * rbc_extras_gave_up (on_give_up) first, still handling the error.
 *
 * The opt-in extras (deadline, budget, stats, writes, the hooks: extras.h)
 * live in these steps: the two extras hooks of the success path are inline
 * and test one pointer; catches, check_retryable and exhausted count and
 * decide for them inside; before_sleep and before_retry apply the call's
 * deadline.  An implementation of the loop that leaves out a step loses
 * its extras.
 *
 * Every step that fails returns -1 or NULL with the new exception set;
 * the caller ends the handling (which restores sys.exc_info()) and
 * propagates it.  To re-raise the error, end the handling, then
 * rbc_exc_restore(error).  Every step re-reads the Retry's attributes at
 * the point where redis-py reads them, so a fail callback that changes the
 * Retry takes effect, and holds its own references across Python calls.
 *
 * An asyncio loop (async_call.c) must end the handling before each
 * suspension (await of fail's result or of asyncio.sleep) and begin it
 * again when resumed: the handled exception belongs to the running frame,
 * so that sys.exc_info() is the error inside fail and the event loop never
 * sees it.
 */
#ifndef RBC_RETRY_CORE_H
#define RBC_RETRY_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <structmember.h> /* PyMemberDef before 3.12 */

#include "state.h"
#include "strategies.h" /* rbc_unpatched_strategy_kind, for rbc_retry_reset_backoff */

#include "args.h"   /* rbc_bind, for rbc_retry_bind_call */
#include "extras.h" /* rbc_call_extras, for rbc_retry_call_extras */

/* The Retry object, for both flavors. */
typedef struct {
    PyObject_HEAD
    PyObject *backoff;          /* _backoff: any object with reset()/compute() */
    PyObject *retries;          /* _retries: the object given, int-like */
    long long retries_value;    /* its value, clamped to long long */
    PyObject *supported_errors; /* _supported_errors: tuple of exception classes */
    PyObject *errors_set;       /* frozenset(supported_errors), built on demand */
    PyObject *is_retryable;     /* _is_retryable: the own checker; NULL for None */
    PyObject *weakreflist;      /* weakref.ref(retry) works, as on redis-py's */
    rbc_retry_extras *extras;   /* deadline, budget, stats, writes: NULL when none (extras.h) */
} rbc_retry_object;

#define RETRY(op) ((rbc_retry_object *)(op))

/* The core's part of the module state (module.c calls these before the
 * flavors' init): the flavors' own fields are filled by their files. */
int rbc_retry_core_init(rbc_retry_core_state *cs);
int rbc_retry_core_traverse(rbc_retry_core_state *cs, visitproc visit, void *arg);
void rbc_retry_core_clear(rbc_retry_core_state *cs);

/* A default supported error: the class `name` of module `module`. */
typedef struct {
    const char *module;
    const char *name;
} rbc_retry_default_error;

/* Fills family (imported from `module_name`.`Retry`) and the defaults
 * (the classes named by `default_errors`, ended by {NULL, NULL}). */
int rbc_retry_flavor_init(rbc_retry_flavor *fl, const char *module_name,
                          const rbc_retry_default_error *default_errors);

/* ---- construction and attributes ------------------------------------ */

/* tp_new: every field at a valid value (backoff None, retries 0, the
 * default errors), so an object made by __new__ alone (copy, pickle) is
 * sound. */
PyObject *rbc_retry_new(const rbc_retry_flavor *fl, PyTypeObject *type);
/* Sets the four parameters after checking them (TypeError naming the
 * parameter); supported_errors may be NULL for the default, is_retryable
 * must be callable or None.  The keyword-only extras are set by
 * rbc_retry_set_extras (extras.h). */
int rbc_retry_set_parameters(const rbc_retry_flavor *fl, rbc_retry_object *self,
                             PyObject *backoff, PyObject *retries,
                             PyObject *supported_errors, PyObject *is_retryable);
/* The flavor's type, made from `spec` (RBC_RETRY_SPEC), called through
 * rbc_retry_type_vectorcall; fl->type holds it.  Returns it (borrowed),
 * or NULL. */
PyTypeObject *rbc_retry_flavor_type_new(rbc_retry_flavor *fl, PyObject *module,
                                        PyType_Spec *spec);
/* The tp_vectorcall of both types: Retry(backoff, retries,
 * supported_errors=..., is_retryable=None, *, deadline=None, budget=None,
 * stats=None, writes=None) built directly for the exact type of either flavor; a
 * subclass (whose __init__ may differ) goes through tp_new and tp_init. */
PyObject *rbc_retry_type_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames);
/* The constructor's text signature, the start of both types' docstrings;
 * its parameters are retry_signature's (retry_core.c). */
#define RBC_RETRY_TEXT_SIGNATURE                                              \
    "Retry(backoff, retries, supported_errors=..., is_retryable=None, *,\n"   \
    "      deadline=None, budget=None, stats=None, writes='at-least-once',\n" \
    "      on_retry=None, on_give_up=None)\n--\n\n"

/* tp_init: the same parameters. */
int rbc_retry_init_args(const rbc_retry_flavor *fl, PyObject *self, PyObject *args,
                        PyObject *kwds);

int rbc_retry_obj_traverse(PyObject *self, visitproc visit, void *arg);
int rbc_retry_obj_clear(PyObject *self);
void rbc_retry_obj_dealloc(PyObject *self);

/* tp_getset for _backoff, _retries, _supported_errors, _is_retryable and
 * is_retryable (both the one field, as redis-py 8.2's property over
 * _is_retryable), the extras; tp_members for __weaklistoffset__. */
extern PyGetSetDef rbc_retry_getset[];
extern PyMemberDef rbc_retry_members[];
/* Methods shared by both flavors; RBC_RETRY_COMMON_METHODS lists them as
 * PyMethodDef entries for the type's method table. */
PyObject *rbc_retry_get_retries(PyObject *self, PyObject *unused);
PyObject *rbc_retry_update_retries(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames);
/* tuple(set(self._supported_errors + tuple(specified_errors))) */
PyObject *rbc_retry_update_supported_errors(PyObject *self, PyObject *const *args,
                                            Py_ssize_t nargs, PyObject *kwnames);
/* copy.copy: shares the fields.  copy.deepcopy: the copy gets its own
 * backoff (a direct C copy for exact C strategies), memo honoured. */
PyObject *rbc_retry_copy(PyObject *self, PyObject *unused);
PyObject *rbc_retry_deepcopy(PyObject *self, PyObject *memo);
/* (copyreg.__newobj__, (type,), state dict) and its __setstate__. */
PyObject *rbc_retry_reduce(PyObject *self, PyObject *unused);
PyObject *rbc_retry_setstate(PyObject *self, PyObject *state);

/* clang-format off */
#define RBC_RETRY_COMMON_METHODS                                                  \
    {"get_retries", rbc_retry_get_retries, METH_NOARGS,                           \
     "get_retries($self, /)\n--\n\nThe number of retries (< 0: forever)."},      \
    {"update_retries", (PyCFunction)(void (*)(void))rbc_retry_update_retries,     \
     METH_FASTCALL | METH_KEYWORDS,                                               \
     "update_retries($self, value)\n--\n\nSet the number of retries."},        \
    {"update_supported_errors",                                                   \
     (PyCFunction)(void (*)(void))rbc_retry_update_supported_errors,              \
     METH_FASTCALL | METH_KEYWORDS,                                               \
     "update_supported_errors($self, specified_errors)\n--\n\n"                \
     "Add exception classes to those retried (the union, kept a tuple)."},        \
    {"__copy__", rbc_retry_copy, METH_NOARGS,                                 \
     "__copy__($self, /)\n--\n\nA Retry sharing this one's backoff."},          \
    {"__deepcopy__", rbc_retry_deepcopy, METH_O,                              \
     "__deepcopy__($self, memo, /)\n--\n\nA Retry with its own copy of the backoff."}, \
    {"__reduce__", rbc_retry_reduce, METH_NOARGS, NULL},                          \
    {"__setstate__", rbc_retry_setstate, METH_O, NULL}
/* clang-format on */

/* The type slots both flavors share, for the end of each type's slot
 * table (before {0, NULL}); the flavor adds its doc, tp_new, tp_init,
 * tp_hash, tp_richcompare and tp_methods.  RBC_RETRY_SPEC is the type's
 * spec. */
/* clang-format off */
#define RBC_RETRY_COMMON_SLOTS                                                    \
    {Py_tp_repr, rbc_retry_repr},                                                 \
    {Py_tp_getset, rbc_retry_getset},                                             \
    {Py_tp_members, rbc_retry_members},                                           \
    {Py_tp_traverse, rbc_retry_obj_traverse},                                     \
    {Py_tp_clear, rbc_retry_obj_clear},                                           \
    {Py_tp_dealloc, rbc_retry_obj_dealloc}

#define RBC_RETRY_SPEC(qualified_name, slot_table)                                \
    {                                                                             \
        .name = (qualified_name),                                                 \
        .basicsize = sizeof(rbc_retry_object),                                    \
        .itemsize = 0,                                                            \
        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,   \
        .slots = (slot_table),                                                    \
    }
/* clang-format on */

/* ---- call_with_retry's arguments ------------------------------------- */

/* `do` and `fail` must be callable (PyCallable_Check, inline: on every
 * call's path): 0, or -1 with TypeError. */
static inline int
rbc_retry_check_callable(PyObject *obj, const char *name)
{
    if (Py_TYPE(obj)->tp_call != NULL) {
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "call_with_retry() argument '%s' must be callable, not %.200s",
                 name, Py_TYPE(obj)->tp_name);
    return -1;
}

/* call_with_retry(do, fail, is_retryable=None, with_failure_count=False):
 * values[0..3] get borrowed references to the arguments (the defaults for
 * those not given), do and fail checked callable.  0, or -1 with
 * TypeError.  Inline: every call_with_retry, sync and asyncio, binds here. */
extern const rbc_signature rbc_call_with_retry_signature;

static inline int
rbc_retry_bind_call(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                    PyObject *values[4])
{
    values[0] = NULL;
    values[1] = NULL;
    values[2] = Py_None;
    values[3] = Py_False;
    if (rbc_bind(&rbc_call_with_retry_signature, args, nargs, kwnames, values) < 0) {
        return -1;
    }
    return rbc_retry_check_callable(values[0], "do") < 0
                   || rbc_retry_check_callable(values[1], "fail") < 0
               ? -1
               : 0;
}

/* ---- ==, hash, repr -------------------------------------------------- */

PyObject *rbc_retry_richcompare(const rbc_retry_flavor *fl, PyObject *self,
                                PyObject *other, int op);
/* hash((backoff, retries, frozenset(supported_errors))) */
Py_hash_t rbc_retry_hash(const rbc_retry_flavor *fl, PyObject *self);
PyObject *rbc_retry_repr(PyObject *self);

/* ---- call_with_retry steps (see the top of this file) ---------------- */

/* self._backoff.reset() when rbc_retry_reset_backoff below has not
 * settled it: a direct C call for an unpatched C strategy, else the
 * method. */
int rbc_retry_reset_backoff_slow(rbc_state *st, rbc_retry_object *self);

/* self._backoff.reset(), call_with_retry's first step (retry.c and both
 * asyncio designs): nothing to do for an unpatched C strategy other than
 * DecorrelatedJitterBackoff, the usual case, decided here with one type
 * compare, inline on the hot path; rbc_retry_reset_backoff_slow does the
 * rest. */
static inline int
rbc_retry_reset_backoff(rbc_state *st, rbc_retry_object *self)
{
    if (self->backoff != NULL) {
        int kind = rbc_unpatched_strategy_kind(&st->strategies, self->backoff);
        if (kind >= 0 && kind != RBC_DECORRELATED_JITTER) {
            return 0;
        }
    }
    return rbc_retry_reset_backoff_slow(st, self);
}

/* The extras a step of the call counts in: the ones the Retry holds now,
 * or none for a call that started without any (see rbc_call_extras). */
static inline rbc_retry_extras *
rbc_retry_call_extras(rbc_retry_object *self, const rbc_call_extras *call)
{
    return call->counted ? self->extras : NULL;
}

/* Does `except self._supported_errors` catch `error`?  1 or 0 (reads
 * _supported_errors now; matches subclasses, never calls Python code). */
int rbc_retry_catches(rbc_retry_object *self, const rbc_call_extras *call, PyObject *error);

/* redis-py 8.2's `self._is_retryable is not None and not
 * self._is_retryable(error)` negated, with the checker the Retry holds
 * now: 1 to go on (none set, or it says retryable), 0 when it rejects the
 * error, -1 on exception.  On 0 the caller calls fail(error) (or
 * fail(error, failures + 1)), awaits its result in asyncio, counts the
 * give-up (rbc_extras_gave_up_not_retryable) and re-raises the error. */
int rbc_retry_own_checker_allows(rbc_retry_object *self, PyObject *error);

/* The call's is_retryable argument: `is_retryable and not
 * is_retryable(error)` (redis-py 8.0, 8.1) or `is_retryable is not None
 * and not is_retryable(error)` (8.2: checker_not_none), negated: 1 to go
 * on, 0 to re-raise the error (a give-up counted in self's stats), -1 on
 * exception. */
int rbc_retry_call_checker_allows(rbc_state *st, rbc_retry_object *self,
                                  rbc_call_extras *call, PyObject *is_retryable,
                                  PyObject *error);

/* fail(error, failures) when with_failure_count is true, else fail(error),
 * after checking that fail is callable (TypeError naming it).  Returns
 * fail's result (a new reference; the async Retry awaits it). */
PyObject *rbc_retry_call_fail(PyObject *fail, PyObject *error, PyObject *failures,
                              PyObject *with_failure_count);

/* `self._retries >= 0 and failures > self._retries`: 1 when the error must
 * be raised now, else 0.  With a budget, also 1 when it refuses the retry. */
int rbc_retry_exhausted(rbc_retry_object *self, rbc_call_extras *call, long long failures);

/* self._backoff.compute(failures), read now, and `delay > 0` into
 * *should_sleep.  Returns the delay (new reference) or NULL. */
PyObject *rbc_retry_next_delay(rbc_state *st, rbc_retry_object *self,
                               PyObject *failures, int *should_sleep);

#endif /* RBC_RETRY_CORE_H */
