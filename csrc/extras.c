/* The opt-in extras of Retry: RetryBudget, RetryStats, the deadline, the
 * writes policy, on_retry and on_give_up (and RetryEvent, their argument),
 * and the hooks call_with_retry runs for them.  See extras.h. */
#include "extras.h"
#include "args.h"

#include <math.h>
#include <stddef.h>
#include <string.h>
#include <time.h>
#ifdef _WIN32
#include <windows.h>
#endif

#define BUDGET(op) ((rbc_budget_object *)(op))
#define STATS(op) ((rbc_stats_object *)(op))

/* ---------------------------------------------------------------------- */
/* The clock                                                               */

/* Monotonic seconds: CLOCK_MONOTONIC, the clock of time.monotonic(). */
static double
monotonic_now(void)
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
 * time measured against monotonic_now() is never under-estimated: a
 * deadline can only be applied up to one tick early, never late. */
static double
monotonic_start(void)
{
#if defined(CLOCK_MONOTONIC_COARSE) && !defined(_WIN32)
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
#else
    return monotonic_now();
#endif
}

/* ---------------------------------------------------------------------- */
/* Checking numbers                                                        */

/* A real number's value as a double, or -1 with TypeError naming it. */
static int
real_value(const char *owner, const char *name, PyObject *value, double *out)
{
    if (rbc_check_real(owner, name, value) < 0) {
        return -1;
    }
    double v = PyFloat_AsDouble(value);
    if (v == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    *out = v;
    return 0;
}

/* A real number > 0 (and finite unless allow_infinite): ValueError naming
 * it otherwise. */
static int
positive_value(const char *owner, const char *name, PyObject *value, int allow_infinite,
               double *out)
{
    if (real_value(owner, name, value, out) < 0) {
        return -1;
    }
    if (!(*out > 0.0) || (!allow_infinite && isinf(*out))) {
        PyErr_Format(PyExc_ValueError, "%s() argument '%s' must be a %spositive number, not %R",
                     owner, name, allow_infinite ? "" : "finite ", value);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* RetryBudget                                                             */

static const char *const budget_parameters[] = {"max_tokens", "token_ratio"};
static const rbc_signature budget_signature = {"RetryBudget", budget_parameters, 2, 2};

static PyObject *
budget_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *values[2] = {NULL, NULL};
    if (rbc_bind(&budget_signature, args, PyVectorcall_NARGS(nargsf), kwnames, values) < 0) {
        return NULL;
    }
    double max_tokens, token_ratio;
    if (positive_value("RetryBudget", "max_tokens", values[0], 0, &max_tokens) < 0
        || positive_value("RetryBudget", "token_ratio", values[1], 0, &token_ratio) < 0) {
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)type;
    rbc_budget_object *self = (rbc_budget_object *)tp->tp_alloc(tp, 0);
    if (self == NULL) {
        return NULL;
    }
    self->max_tokens_obj = Py_NewRef(values[0]);
    self->token_ratio_obj = Py_NewRef(values[1]);
    self->max_tokens = max_tokens;
    self->token_ratio = token_ratio;
    self->tokens = max_tokens; /* gRFC A6: the bucket starts full */
    self->threshold = max_tokens / 2.0;
    return (PyObject *)self;
}

/* For the type's tp_new: RetryBudget(*args, **kwargs) without vectorcall. */
static PyObject *
budget_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *kwnames = NULL;
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    Py_ssize_t nkw = kwds == NULL ? 0 : PyDict_GET_SIZE(kwds);
    PyObject **stack = PyMem_New(PyObject *, nargs + nkw + 1);
    if (stack == NULL) {
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        stack[i] = PyTuple_GET_ITEM(args, i);
    }
    PyObject *result = NULL;
    if (nkw > 0) {
        kwnames = PyTuple_New(nkw);
        if (kwnames == NULL) {
            goto done;
        }
        Py_ssize_t pos = 0, k = 0;
        PyObject *key, *value;
        while (PyDict_Next(kwds, &pos, &key, &value)) {
            PyTuple_SET_ITEM(kwnames, k, Py_NewRef(key));
            stack[nargs + k] = value;
            k++;
        }
    }
    result = budget_vectorcall((PyObject *)type, stack, (size_t)nargs, kwnames);
done:
    Py_XDECREF(kwnames);
    PyMem_Free(stack);
    return result;
}

static int
budget_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(BUDGET(self)->max_tokens_obj);
    Py_VISIT(BUDGET(self)->token_ratio_obj);
    return 0;
}

static int
budget_clear(PyObject *self)
{
    Py_CLEAR(BUDGET(self)->max_tokens_obj);
    Py_CLEAR(BUDGET(self)->token_ratio_obj);
    return 0;
}

static void
budget_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    (void)budget_clear(self);
    type->tp_free(self);
    Py_DECREF(type);
}

static double
budget_tokens(rbc_budget_object *self)
{
    RBC_EXTRAS_LOCK(self);
    double tokens = self->tokens;
    RBC_EXTRAS_UNLOCK(self);
    return tokens;
}

static PyObject *
budget_get_tokens(PyObject *self, void *closure)
{
    return PyFloat_FromDouble(budget_tokens(BUDGET(self)));
}

static PyObject *
budget_get_max_tokens(PyObject *self, void *closure)
{
    PyObject *value = BUDGET(self)->max_tokens_obj;
    return value != NULL ? Py_NewRef(value) : PyFloat_FromDouble(BUDGET(self)->max_tokens);
}

static PyObject *
budget_get_token_ratio(PyObject *self, void *closure)
{
    PyObject *value = BUDGET(self)->token_ratio_obj;
    return value != NULL ? Py_NewRef(value) : PyFloat_FromDouble(BUDGET(self)->token_ratio);
}

static PyObject *
budget_get_retry_allowed(PyObject *self, void *closure)
{
    return PyBool_FromLong(budget_tokens(BUDGET(self)) > BUDGET(self)->threshold);
}

static PyObject *
budget_repr(PyObject *self)
{
    PyObject *max_tokens = budget_get_max_tokens(self, NULL);
    PyObject *ratio = budget_get_token_ratio(self, NULL);
    PyObject *tokens = budget_get_tokens(self, NULL);
    PyObject *repr = NULL;
    if (max_tokens != NULL && ratio != NULL && tokens != NULL) {
        repr = PyUnicode_FromFormat("RetryBudget(max_tokens=%R, token_ratio=%R, tokens=%R)",
                                    max_tokens, ratio, tokens);
    }
    Py_XDECREF(max_tokens);
    Py_XDECREF(ratio);
    Py_XDECREF(tokens);
    return repr;
}

/* Pickled by value: (RetryBudget, (max_tokens, token_ratio), tokens). */
static PyObject *
budget_reduce(PyObject *self, PyObject *unused)
{
    PyObject *max_tokens = budget_get_max_tokens(self, NULL);
    PyObject *ratio = budget_get_token_ratio(self, NULL);
    PyObject *result = NULL;
    if (max_tokens != NULL && ratio != NULL) {
        result = Py_BuildValue("O(OO)d", (PyObject *)Py_TYPE(self), max_tokens, ratio,
                               budget_tokens(BUDGET(self)));
    }
    Py_XDECREF(max_tokens);
    Py_XDECREF(ratio);
    return result;
}

/* The token count of a pickle, kept in [0, max_tokens]. */
static PyObject *
budget_setstate(PyObject *self, PyObject *state)
{
    double tokens;
    if (real_value("RetryBudget.__setstate__", "state", state, &tokens) < 0) {
        return NULL;
    }
    rbc_budget_object *me = BUDGET(self);
    if (!(tokens >= 0.0 && tokens <= me->max_tokens)) {
        PyErr_Format(PyExc_ValueError,
                     "RetryBudget.__setstate__() argument 'state' must be a token count "
                     "in [0, max_tokens], not %R",
                     state);
        return NULL;
    }
    RBC_EXTRAS_LOCK(me);
    me->tokens = tokens;
    RBC_EXTRAS_UNLOCK(me);
    Py_RETURN_NONE;
}

/* clang-format off */
static PyGetSetDef budget_getset[] = {
    {"max_tokens", budget_get_max_tokens, NULL, "the size of the bucket (read-only)", NULL},
    {"token_ratio", budget_get_token_ratio, NULL,
     "tokens a successful call_with_retry puts back (read-only)", NULL},
    {"tokens", budget_get_tokens, NULL, "the tokens in the bucket now, in [0, max_tokens]", NULL},
    {"retry_allowed", budget_get_retry_allowed, NULL,
     "whether a retry would be allowed now: tokens > max_tokens / 2", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef budget_methods[] = {
    {"__reduce__", budget_reduce, METH_NOARGS, NULL},
    {"__setstate__", budget_setstate, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot budget_slots[] = {
    {Py_tp_doc, (void *)"RetryBudget(max_tokens, token_ratio)\n--\n\n"
                        "Retry throttling as gRPC's (gRFC A6), shared by every Retry that holds\n"
                        "it: the bucket starts with max_tokens tokens; each attempt that fails\n"
                        "with a supported error takes one (never below 0); each call_with_retry\n"
                        "that succeeds puts token_ratio back (never above max_tokens). A retry\n"
                        "is allowed only while more than max_tokens / 2 tokens are left; a\n"
                        "call's first attempt is never refused."},
    {Py_tp_new, budget_new},
    {Py_tp_repr, budget_repr},
    {Py_tp_getset, budget_getset},
    {Py_tp_methods, budget_methods},
    {Py_tp_traverse, budget_traverse},
    {Py_tp_clear, budget_clear},
    {Py_tp_dealloc, budget_dealloc},
    {0, NULL},
};
/* clang-format on */

static PyType_Spec budget_spec = {
    .name = "redis_backoff_c.RetryBudget",
    .basicsize = sizeof(rbc_budget_object),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = budget_slots,
};

/* ---------------------------------------------------------------------- */
/* RetryStats                                                              */

static const char *const stat_names[RBC_STAT_COUNT] = {
    "calls",
    "attempts",
    "successes",
    "failed_attempts",
    "retries",
    "give_ups_exhausted",
    "give_ups_not_retryable",
    "give_ups_deadline",
    "give_ups_budget",
    "give_ups_may_have_run",
    "unhandled_errors",
    "aborted",
};

static inline rbc_extras_state *
extras_state_of_type(PyTypeObject *type)
{
    rbc_state *st = rbc_state_from_type(type);
    return st == NULL ? NULL : &st->extras;
}

static PyObject *
stats_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "RetryStats() takes no arguments");
        return NULL;
    }
    return type->tp_alloc(type, 0); /* every counter at 0 */
}

static void
stats_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    type->tp_free(self);
    Py_DECREF(type);
}

/* A consistent copy of the counters. */
static void
stats_read(rbc_stats_object *self, unsigned long long *counts, double *slept)
{
    RBC_EXTRAS_LOCK(self);
    memcpy(counts, self->counts, sizeof(self->counts));
    *slept = self->slept;
    RBC_EXTRAS_UNLOCK(self);
}

static PyObject *
stats_snapshot(PyObject *self, PyObject *unused)
{
    rbc_extras_state *es = extras_state_of_type(Py_TYPE(self));
    if (es == NULL) {
        return NULL;
    }
    unsigned long long counts[RBC_STAT_COUNT];
    double slept;
    stats_read(STATS(self), counts, &slept);
    PyObject *value = NULL;
    PyObject *dict = PyDict_New();
    if (dict == NULL) {
        return NULL;
    }
    for (int i = 0; i < RBC_STAT_COUNT; i++) {
        value = PyLong_FromUnsignedLongLong(counts[i]);
        if (value == NULL || PyDict_SetItem(dict, es->stat_names[i], value) < 0) {
            goto error;
        }
        Py_CLEAR(value);
    }
    value = PyFloat_FromDouble(slept);
    if (value == NULL || PyDict_SetItem(dict, es->str_slept_seconds, value) < 0) {
        goto error;
    }
    Py_DECREF(value);
    return dict;
error:
    Py_XDECREF(value);
    Py_DECREF(dict);
    return NULL;
}

static PyObject *
stats_reset(PyObject *self, PyObject *unused)
{
    rbc_stats_object *me = STATS(self);
    RBC_EXTRAS_LOCK(me);
    memset(me->counts, 0, sizeof(me->counts));
    me->slept = 0.0;
    RBC_EXTRAS_UNLOCK(me);
    Py_RETURN_NONE;
}

/* The counters as attributes: closure is the index. */
static PyObject *
stats_get_counter(PyObject *self, void *closure)
{
    rbc_stats_object *me = STATS(self);
    RBC_EXTRAS_LOCK(me);
    unsigned long long value = me->counts[(Py_ssize_t)closure];
    RBC_EXTRAS_UNLOCK(me);
    return PyLong_FromUnsignedLongLong(value);
}

static PyObject *
stats_get_slept(PyObject *self, void *closure)
{
    rbc_stats_object *me = STATS(self);
    RBC_EXTRAS_LOCK(me);
    double slept = me->slept;
    RBC_EXTRAS_UNLOCK(me);
    return PyFloat_FromDouble(slept);
}

static PyObject *
stats_repr(PyObject *self)
{
    unsigned long long c[RBC_STAT_COUNT];
    double slept;
    stats_read(STATS(self), c, &slept);
    PyObject *seconds = PyFloat_FromDouble(slept);
    if (seconds == NULL) {
        return NULL;
    }
    PyObject *repr = PyUnicode_FromFormat(
        "RetryStats(calls=%llu, attempts=%llu, successes=%llu, failed_attempts=%llu, "
        "retries=%llu, give_ups_exhausted=%llu, give_ups_not_retryable=%llu, "
        "give_ups_deadline=%llu, give_ups_budget=%llu, give_ups_may_have_run=%llu, "
        "unhandled_errors=%llu, aborted=%llu, slept_seconds=%R)",
        c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], seconds);
    Py_DECREF(seconds);
    return repr;
}

/* Pickled by value: (RetryStats, (), snapshot()). */
static PyObject *
stats_reduce(PyObject *self, PyObject *unused)
{
    PyObject *snapshot = stats_snapshot(self, NULL);
    return snapshot == NULL ? NULL : Py_BuildValue("O()N", (PyObject *)Py_TYPE(self), snapshot);
}

/* One counter of a pickle's dict: a non-negative int (0 when absent). */
static int
state_counter(PyObject *state, PyObject *key, unsigned long long *value)
{
    PyObject *item = PyDict_GetItemWithError(state, key);
    if (item == NULL) {
        *value = 0;
        return PyErr_Occurred() ? -1 : 0;
    }
    if (!PyLong_Check(item)) {
        PyErr_Format(PyExc_TypeError, "RetryStats state '%U' must be an int, not %.200s", key,
                     Py_TYPE(item)->tp_name);
        return -1;
    }
    *value = PyLong_AsUnsignedLongLong(item);
    return *value == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *
stats_setstate(PyObject *self, PyObject *state)
{
    rbc_extras_state *es = extras_state_of_type(Py_TYPE(self));
    if (es == NULL) {
        return NULL;
    }
    if (!PyDict_Check(state)) {
        PyErr_Format(PyExc_TypeError, "RetryStats.__setstate__() argument must be a dict, not %.200s",
                     Py_TYPE(state)->tp_name);
        return NULL;
    }
    unsigned long long counts[RBC_STAT_COUNT];
    for (int i = 0; i < RBC_STAT_COUNT; i++) {
        if (state_counter(state, es->stat_names[i], &counts[i]) < 0) {
            return NULL;
        }
    }
    double slept = 0.0;
    /* Owned: its __float__ may empty the dict that holds it. */
    PyObject *item = Py_XNewRef(PyDict_GetItemWithError(state, es->str_slept_seconds));
    if (item == NULL && PyErr_Occurred()) {
        return NULL;
    }
    int status = item == NULL ? 0 : real_value("RetryStats.__setstate__", "slept_seconds", item, &slept);
    Py_XDECREF(item);
    if (status < 0) {
        return NULL;
    }
    rbc_stats_object *me = STATS(self);
    RBC_EXTRAS_LOCK(me);
    memcpy(me->counts, counts, sizeof(counts));
    me->slept = slept;
    RBC_EXTRAS_UNLOCK(me);
    Py_RETURN_NONE;
}

/* clang-format off */
static PyGetSetDef stats_getset[] = {
    {"calls", stats_get_counter, NULL, "call_with_retry calls started",
     (void *)(Py_ssize_t)RBC_STAT_CALLS},
    {"attempts", stats_get_counter, NULL, "do() attempts that ended (returned or raised)",
     (void *)(Py_ssize_t)RBC_STAT_ATTEMPTS},
    {"successes", stats_get_counter, NULL, "calls whose do() returned",
     (void *)(Py_ssize_t)RBC_STAT_SUCCESSES},
    {"failed_attempts", stats_get_counter, NULL, "attempts that raised a supported error",
     (void *)(Py_ssize_t)RBC_STAT_FAILED_ATTEMPTS},
    {"retries", stats_get_counter, NULL, "attempts after a call's first",
     (void *)(Py_ssize_t)RBC_STAT_RETRIES},
    {"give_ups_exhausted", stats_get_counter, NULL, "calls that raised: retries exhausted",
     (void *)(Py_ssize_t)RBC_STAT_GIVE_UPS_EXHAUSTED},
    {"give_ups_not_retryable", stats_get_counter, NULL,
     "calls that raised: is_retryable(error) was false",
     (void *)(Py_ssize_t)RBC_STAT_GIVE_UPS_NOT_RETRYABLE},
    {"give_ups_deadline", stats_get_counter, NULL, "calls that raised: the deadline",
     (void *)(Py_ssize_t)RBC_STAT_GIVE_UPS_DEADLINE},
    {"give_ups_budget", stats_get_counter, NULL, "calls that raised: the budget refused",
     (void *)(Py_ssize_t)RBC_STAT_GIVE_UPS_BUDGET},
    {"give_ups_may_have_run", stats_get_counter, NULL,
     "calls that raised: writes=\"at-most-once\" and the attempt may have run",
     (void *)(Py_ssize_t)RBC_STAT_GIVE_UPS_MAY_HAVE_RUN},
    {"unhandled_errors", stats_get_counter, NULL,
     "errors of do() passed through unhandled (not supported errors)",
     (void *)(Py_ssize_t)RBC_STAT_UNHANDLED},
    {"aborted", stats_get_counter, NULL,
     "calls ended by an exception from fail(), a checker, compute() or the sleep, or "
     "cancelled or closed while fail() or the sleep was awaited",
     (void *)(Py_ssize_t)RBC_STAT_ABORTED},
    {"slept_seconds", stats_get_slept, NULL, "seconds of backoff actually slept", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef stats_methods[] = {
    {"snapshot", stats_snapshot, METH_NOARGS,
     "snapshot($self, /)\n--\n\nThe counters now, as a dict (one consistent reading)."},
    {"reset", stats_reset, METH_NOARGS, "reset($self, /)\n--\n\nSet every counter to 0."},
    {"__reduce__", stats_reduce, METH_NOARGS, NULL},
    {"__setstate__", stats_setstate, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot stats_slots[] = {
    {Py_tp_doc, (void *)"RetryStats()\n--\n\n"
                        "Counters of call_with_retry, shared by every Retry that holds them:\n"
                        "calls, attempts, successes, failed attempts, retries, give-ups by\n"
                        "reason, errors passed through, and seconds of backoff slept."},
    {Py_tp_new, stats_new},
    {Py_tp_repr, stats_repr},
    {Py_tp_getset, stats_getset},
    {Py_tp_methods, stats_methods},
    {Py_tp_dealloc, stats_dealloc},
    {0, NULL},
};
/* clang-format on */

static PyType_Spec stats_spec = {
    .name = "redis_backoff_c.RetryStats",
    .basicsize = sizeof(rbc_stats_object),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = stats_slots,
};

/* ---------------------------------------------------------------------- */
/* The extras of a Retry                                                   */

/* The block's fields by RBC_EXTRA_* index. */
static PyObject **
field_of(rbc_retry_extras *extras, int which)
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

static PyObject *
field_value(const rbc_retry_extras *extras, int which)
{
    return *field_of((rbc_retry_extras *)extras, which);
}

/* The block at *extras, made when missing. */
static rbc_retry_extras *
block_of(rbc_retry_extras **extras)
{
    if (*extras == NULL) {
        *extras = PyMem_Calloc(1, sizeof(rbc_retry_extras));
        if (*extras == NULL) {
            PyErr_NoMemory();
        }
    }
    return *extras;
}

/* Frees the block once nothing is set in it: the Retry is plain again. */
static void
drop_if_empty(rbc_retry_extras **extras)
{
    rbc_retry_extras *block = *extras;
    if (block == NULL) {
        return;
    }
    for (int i = 0; i < RBC_EXTRA_COUNT; i++) {
        if (field_value(block, i) != NULL) {
            return;
        }
    }
    *extras = NULL;
    Py_XDECREF(block->last_deadline_at); /* a float: runs no code */
    PyMem_Free(block);
}

void
rbc_retry_extras_clear(rbc_retry_extras **extras)
{
    rbc_retry_extras *block = *extras;
    if (block == NULL) {
        return;
    }
    /* Detached first: a finalizer run by a decref sees a plain Retry. */
    *extras = NULL;
    Py_XDECREF(block->deadline);
    Py_XDECREF(block->budget);
    Py_XDECREF(block->stats);
    Py_XDECREF(block->writes);
    Py_XDECREF(block->on_retry);
    Py_XDECREF(block->on_give_up);
    Py_XDECREF(block->last_deadline_at);
    PyMem_Free(block);
}

int
rbc_retry_extras_traverse(const rbc_retry_extras *extras, visitproc visit, void *arg)
{
    if (extras != NULL) {
        Py_VISIT(extras->deadline);
        Py_VISIT(extras->budget);
        Py_VISIT(extras->stats);
        Py_VISIT(extras->on_retry);
        Py_VISIT(extras->on_give_up);
    }
    return 0;
}

int
rbc_retry_extras_copy(rbc_retry_extras **to, const rbc_retry_extras *from)
{
    if (from == NULL) {
        return 0;
    }
    rbc_retry_extras *copy = block_of(to);
    if (copy == NULL) {
        return -1;
    }
    copy->deadline = Py_XNewRef(from->deadline);
    copy->deadline_seconds = from->deadline_seconds;
    copy->budget = (rbc_budget_object *)Py_XNewRef((PyObject *)from->budget);
    copy->stats = (rbc_stats_object *)Py_XNewRef((PyObject *)from->stats);
    copy->writes = Py_XNewRef(from->writes);
    copy->on_retry = Py_XNewRef(from->on_retry);
    copy->on_give_up = Py_XNewRef(from->on_give_up);
    return 0;
}

/* The checked deadline `value` (None: unset) into the block. */
static int
store_deadline(rbc_retry_extras **extras, PyObject *value, double seconds)
{
    if (value == Py_None) {
        if (*extras != NULL) {
            Py_CLEAR((*extras)->deadline);
            drop_if_empty(extras);
        }
        return 0;
    }
    rbc_retry_extras *block = block_of(extras);
    if (block == NULL) {
        return -1;
    }
    /* Both fields written before the old value goes: its __del__ may
     * change the extras, even free the block. */
    PyObject *old = block->deadline;
    block->deadline = Py_NewRef(value);
    block->deadline_seconds = seconds;
    Py_XDECREF(old);
    return 0;
}

/* budget or stats: None, or an instance of `type` (exactly: the types
 * are final); TypeError naming the parameter otherwise. */
static int
check_shared(const char *owner, const char *name, PyObject *value, PyTypeObject *type)
{
    if (value == Py_None || Py_IS_TYPE(value, type)) {
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be a %s or None, not %.200s", owner,
                 name, strrchr(type->tp_name, '.') + 1, Py_TYPE(value)->tp_name);
    return -1;
}

/* on_retry or on_give_up: None, or a callable; TypeError naming the
 * parameter otherwise. */
static int
check_hook(const char *owner, const char *name, PyObject *value)
{
    if (value == Py_None || PyCallable_Check(value)) {
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be callable or None, not %.200s",
                 owner, name, Py_TYPE(value)->tp_name);
    return -1;
}

/* The checked budget, stats or hook `value` (None: unset) into the block. */
static int
store_shared(rbc_retry_extras **extras, int which, PyObject *value)
{
    if (value == Py_None) {
        if (*extras != NULL) {
            Py_CLEAR(*field_of(*extras, which));
            drop_if_empty(extras);
        }
        return 0;
    }
    rbc_retry_extras *block = block_of(extras);
    if (block == NULL) {
        return -1;
    }
    Py_XSETREF(*field_of(block, which), Py_NewRef(value));
    return 0;
}

/* The writes policy `value` as the block holds it: 0 with *policy NULL
 * for "at-least-once" or None (redis-py's), the interned "at-most-once"
 * for that; -1 with TypeError or ValueError naming the parameter.  Runs
 * no Python code (exact str only). */
static int
check_writes(rbc_extras_state *es, const char *owner, const char *name, PyObject *value,
             PyObject **policy)
{
    *policy = NULL;
    if (value == Py_None) {
        return 0;
    }
    if (!PyUnicode_CheckExact(value)) {
        PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be a str or None, not %.200s",
                     owner, name, Py_TYPE(value)->tp_name);
        return -1;
    }
    if (PyUnicode_Compare(value, es->str_at_most_once) == 0) {
        *policy = es->str_at_most_once;
        return 0;
    }
    if (PyUnicode_Compare(value, es->str_at_least_once) == 0) {
        return 0;
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    PyErr_Format(PyExc_ValueError,
                 "%s() argument '%s' must be 'at-least-once' or 'at-most-once', not %R", owner,
                 name, value);
    return -1;
}

/* The checked policy (NULL: at-least-once) into the block. */
static int
store_writes(rbc_retry_extras **extras, PyObject *policy)
{
    if (policy == NULL) {
        if (*extras != NULL) {
            Py_CLEAR((*extras)->writes); /* an interned str: runs no code */
            drop_if_empty(extras);
        }
        return 0;
    }
    rbc_retry_extras *block = block_of(extras);
    if (block == NULL) {
        return -1;
    }
    Py_XSETREF(block->writes, Py_NewRef(policy));
    return 0;
}

int
rbc_retry_extras_set(rbc_extras_state *es, const char *owner, rbc_retry_extras **extras,
                     PyObject *const values[RBC_EXTRA_COUNT])
{
    double seconds = 0.0;
    PyObject *policy = NULL;
    PyObject *deadline = values[RBC_EXTRA_DEADLINE];
    /* All checked before any is set; the deadline converted once. */
    if ((deadline != Py_None && positive_value(owner, "deadline", deadline, 1, &seconds) < 0)
        || check_shared(owner, "budget", values[RBC_EXTRA_BUDGET], es->Budget_type) < 0
        || check_shared(owner, "stats", values[RBC_EXTRA_STATS], es->Stats_type) < 0
        || check_writes(es, owner, "writes", values[RBC_EXTRA_WRITES], &policy) < 0
        || check_hook(owner, "on_retry", values[RBC_EXTRA_ON_RETRY]) < 0
        || check_hook(owner, "on_give_up", values[RBC_EXTRA_ON_GIVE_UP]) < 0) {
        return -1;
    }
    if (store_deadline(extras, deadline, seconds) < 0
        || store_shared(extras, RBC_EXTRA_BUDGET, values[RBC_EXTRA_BUDGET]) < 0
        || store_shared(extras, RBC_EXTRA_STATS, values[RBC_EXTRA_STATS]) < 0
        || store_writes(extras, policy) < 0
        || store_shared(extras, RBC_EXTRA_ON_RETRY, values[RBC_EXTRA_ON_RETRY]) < 0
        || store_shared(extras, RBC_EXTRA_ON_GIVE_UP, values[RBC_EXTRA_ON_GIVE_UP]) < 0) {
        return -1;
    }
    return 0;
}

PyObject *
rbc_retry_extras_get(rbc_extras_state *es, const rbc_retry_extras *extras, int which)
{
    PyObject *value = extras == NULL ? NULL : field_value(extras, which);
    if (value == NULL && which == RBC_EXTRA_WRITES) {
        value = es->str_at_least_once; /* redis-py's behaviour, by its name */
    }
    return Py_NewRef(value != NULL ? value : Py_None);
}

int
rbc_retry_extras_store(rbc_extras_state *es, rbc_retry_extras **extras, int which,
                       PyObject *value)
{
    static const char *const owners[RBC_EXTRA_COUNT] = {
        "Retry.deadline", "Retry.budget", "Retry.stats",
        "Retry.writes", "Retry.on_retry", "Retry.on_give_up"};
    static const char *const names[RBC_EXTRA_COUNT] = {"deadline", "budget", "stats",
                                                       "writes", "on_retry", "on_give_up"};
    if (rbc_refuse_delete(value, names[which]) < 0) {
        return -1;
    }
    if (which == RBC_EXTRA_WRITES) {
        PyObject *policy;
        return check_writes(es, owners[which], "value", value, &policy) < 0
                   ? -1
                   : store_writes(extras, policy);
    }
    if (which == RBC_EXTRA_DEADLINE) {
        double seconds = 0.0;
        if (value != Py_None && positive_value(owners[which], "value", value, 1, &seconds) < 0) {
            return -1;
        }
        return store_deadline(extras, value, seconds);
    }
    if (which == RBC_EXTRA_ON_RETRY || which == RBC_EXTRA_ON_GIVE_UP) {
        return check_hook(owners[which], "value", value) < 0
                   ? -1
                   : store_shared(extras, which, value);
    }
    PyTypeObject *type = which == RBC_EXTRA_BUDGET ? es->Budget_type : es->Stats_type;
    if (check_shared(owners[which], "value", value, type) < 0) {
        return -1;
    }
    return store_shared(extras, which, value);
}

/* ---- ==, repr, pickle ---- */

int
rbc_retry_extras_equal(const rbc_retry_extras *a, const rbc_retry_extras *b)
{
    /* All but the deadline by identity (the policy is NULL or the one
     * interned str), so that no Python code runs before the deadline's ==. */
    for (int i = 0; i < RBC_EXTRA_COUNT; i++) {
        if (i != RBC_EXTRA_DEADLINE
            && (a != NULL ? field_value(a, i) : NULL) != (b != NULL ? field_value(b, i) : NULL)) {
            return 0;
        }
    }
    PyObject *a_deadline = a != NULL ? a->deadline : NULL;
    PyObject *b_deadline = b != NULL ? b->deadline : NULL;
    if (a_deadline == NULL || b_deadline == NULL) {
        return a_deadline == b_deadline;
    }
    /* Held references: comparing may run Python code. */
    Py_INCREF(a_deadline);
    Py_INCREF(b_deadline);
    int same = PyObject_RichCompareBool(a_deadline, b_deadline, Py_EQ);
    Py_DECREF(a_deadline);
    Py_DECREF(b_deadline);
    return same;
}

PyObject *
rbc_retry_extras_repr(const rbc_retry_extras *extras)
{
    if (extras == NULL) {
        return PyUnicode_FromString("");
    }
    /* Held references: a repr may run Python code that frees the block. */
    PyObject *parts[RBC_EXTRA_COUNT];
    for (int i = 0; i < RBC_EXTRA_COUNT; i++) {
        parts[i] = Py_XNewRef(field_value(extras, i));
    }
    static const char *const formats[RBC_EXTRA_COUNT] = {
        ", deadline=%R", ", budget=%R", ", stats=%R",
        ", writes=%R", ", on_retry=%R", ", on_give_up=%R"};
    PyObject *text = PyUnicode_FromString("");
    for (int i = 0; i < RBC_EXTRA_COUNT && text != NULL; i++) {
        if (parts[i] == NULL) {
            continue;
        }
        PyObject *piece = PyUnicode_FromFormat(formats[i], parts[i]);
        PyObject *joined = piece == NULL ? NULL : PyUnicode_Concat(text, piece);
        Py_XDECREF(piece);
        Py_SETREF(text, joined);
    }
    for (int i = 0; i < RBC_EXTRA_COUNT; i++) {
        Py_XDECREF(parts[i]);
    }
    return text;
}

int
rbc_retry_extras_items(rbc_extras_state *es, const rbc_retry_extras *extras, PyObject **keys,
                       PyObject **values)
{
    if (extras == NULL) {
        return 0;
    }
    PyObject *names[RBC_EXTRA_COUNT] = {es->str_deadline, es->str_budget, es->str_stats,
                                        es->str_writes, es->str_on_retry, es->str_on_give_up};
    int count = 0;
    for (int i = 0; i < RBC_EXTRA_COUNT; i++) {
        PyObject *value = field_value(extras, i);
        if (value != NULL) {
            keys[count] = names[i];
            values[count] = Py_NewRef(value);
            count++;
        }
    }
    return count;
}

/* ---------------------------------------------------------------------- */
/* The hooks of call_with_retry                                            */

static inline void
count(rbc_stats_object *stats, rbc_stat which)
{
    if (stats != NULL) {
        RBC_EXTRAS_LOCK(stats);
        stats->counts[which]++;
        RBC_EXTRAS_UNLOCK(stats);
    }
}

void
rbc_extras_begin_slow(rbc_retry_extras *extras, rbc_call_extras *call)
{
    count(extras->stats, RBC_STAT_CALLS);
    if (extras->deadline != NULL) {
        call->deadline_at = monotonic_start() + extras->deadline_seconds;
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

void
rbc_extras_failed_slow(rbc_retry_extras *extras, int caught)
{
    rbc_stats_object *stats = extras->stats;
    if (stats != NULL) {
        RBC_EXTRAS_LOCK(stats);
        stats->counts[RBC_STAT_ATTEMPTS]++;
        stats->counts[caught ? RBC_STAT_FAILED_ATTEMPTS : RBC_STAT_UNHANDLED]++;
        RBC_EXTRAS_UNLOCK(stats);
    }
    rbc_budget_object *budget = extras->budget;
    if (caught && budget != NULL) {
        RBC_EXTRAS_LOCK(budget);
        double tokens = budget->tokens - 1.0;
        budget->tokens = tokens > 0.0 ? tokens : 0.0;
        RBC_EXTRAS_UNLOCK(budget);
    }
}

int
rbc_extras_refuse_retry_slow(rbc_retry_extras *extras, rbc_call_extras *call, int exhausted)
{
    if (exhausted) {
        rbc_extras_give_up(extras, call, RBC_GIVE_UP_EXHAUSTED);
        return 1;
    }
    rbc_budget_object *budget = extras->budget;
    if (budget != NULL && !(budget_tokens(budget) > budget->threshold)) {
        rbc_extras_give_up(extras, call, RBC_GIVE_UP_BUDGET);
        return 1;
    }
    return 0;
}

int
rbc_extras_may_have_run(rbc_extras_state *es, rbc_retry_extras *const *extras,
                        rbc_call_extras *call, PyObject *error)
{
    rbc_retry_extras *block = *extras;
    if (!call->counted || block == NULL || block->writes == NULL) {
        return 0;
    }
    PyObject *judge = es->writes_judge;
    int verdict = 1; /* no judge (the package never set one): nothing is known */
    if (judge != NULL) {
        Py_INCREF(judge);
        PyObject *answer = PyObject_CallOneArg(judge, error);
        Py_DECREF(judge);
        if (answer == NULL) {
            return -1;
        }
        verdict = PyObject_IsTrue(answer);
        Py_DECREF(answer);
        if (verdict < 0) {
            return -1;
        }
    }
    if (verdict) {
        /* The judge ran Python code: the block read again. */
        rbc_extras_give_up(*extras, call, RBC_GIVE_UP_MAY_HAVE_RUN);
    }
    return verdict;
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
    if (call->deadline_at != 0.0 && monotonic_now() + seconds >= call->deadline_at) {
        rbc_extras_give_up(*extras, call, RBC_GIVE_UP_DEADLINE);
        return 0;
    }
    return 1;
}

void
rbc_extras_aborted_slow(rbc_retry_extras *extras)
{
    count(extras->stats, RBC_STAT_ABORTED);
}

double
rbc_extras_sleep_started(const rbc_retry_extras *extras)
{
    return extras != NULL && extras->stats != NULL ? monotonic_now() : 0.0;
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
        rbc_extras_add_slept(extras, monotonic_now() - started);
    }
}

int
rbc_extras_deadline_passed(rbc_retry_extras *extras, rbc_call_extras *call)
{
    if (call->deadline_at != 0.0 && monotonic_now() >= call->deadline_at) {
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
        count(extras->stats, RBC_STAT_RETRIES);
    }
    return 1;
}

/* ---------------------------------------------------------------------- */
/* on_retry and on_give_up                                                 */

/* RetryEvent: what a hook is told (redis_backoff_c.hooks.RetryEvent is the
 * twin's, a NamedTuple): a tuple of four with named fields, as that is.
 * Its own small type rather than a struct sequence, whose creation and
 * destruction each look its sizes up in the type's dict: two thirds of an
 * event's cost before the hook is called. */
enum { EVENT_FIELDS = 4 };
static const char *const event_field_names[EVENT_FIELDS] = {"attempt", "error", "delay",
                                                            "reason"};
static const rbc_signature event_signature = {"RetryEvent", event_field_names, EVENT_FIELDS,
                                              EVENT_FIELDS};

/* `event` (allocated, its items empty) holding `items` (borrowed; the
 * event takes its references). */
static PyObject *
event_fill(PyObject *event, PyObject *const *items)
{
    for (int i = 0; i < EVENT_FIELDS; i++) {
        PyTuple_SET_ITEM(event, i, Py_NewRef(items[i]));
    }
#if PY_VERSION_HEX >= 0x030E0000
    /* From 3.14 a tuple caches its hash: not computed yet. */
    ((PyTupleObject *)event)->ob_hash = -1;
#endif
    return event;
}

/* A new event holding `items`. */
static PyObject *
event_of(PyTypeObject *type, PyObject *const *items)
{
    PyObject *event = type->tp_alloc(type, EVENT_FIELDS);
    return event == NULL ? NULL : event_fill(event, items);
}

/* RetryEvent(attempt, error, delay=None, reason=None), as the twin's. */
static PyObject *
event_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *values[EVENT_FIELDS] = {NULL, NULL, Py_None, Py_None};
    if (rbc_bind(&event_signature, args, PyVectorcall_NARGS(nargsf), kwnames, values) < 0) {
        return NULL;
    }
    return event_of((PyTypeObject *)type, values);
}

static PyObject *
event_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *values[EVENT_FIELDS] = {NULL, NULL, Py_None, Py_None};
    if (rbc_bind_tuple(&event_signature, args, kwds, values) < 0) {
        return NULL;
    }
    return event_of(type, values);
}

static void
event_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    for (int i = 0; i < EVENT_FIELDS; i++) {
        Py_CLEAR(((PyTupleObject *)self)->ob_item[i]);
    }
    type->tp_free(self);
    Py_DECREF(type);
}

static int
event_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    for (int i = 0; i < EVENT_FIELDS; i++) {
        Py_VISIT(PyTuple_GET_ITEM(self, i));
    }
    return 0;
}

static PyObject *
event_field(PyObject *self, void *closure)
{
    return Py_NewRef(PyTuple_GET_ITEM(self, (Py_ssize_t)(intptr_t)closure));
}

static PyObject *
event_repr(PyObject *self)
{
    return PyUnicode_FromFormat("RetryEvent(attempt=%R, error=%R, delay=%R, reason=%R)",
                                PyTuple_GET_ITEM(self, 0), PyTuple_GET_ITEM(self, 1),
                                PyTuple_GET_ITEM(self, 2), PyTuple_GET_ITEM(self, 3));
}

/* The fields, as a NamedTuple's __getnewargs__ gives them. */
static PyObject *
event_getnewargs(PyObject *self, PyObject *unused)
{
    return PyTuple_GetSlice(self, 0, EVENT_FIELDS);
}

/* For pickle at every protocol and copy: RetryEvent(*fields).  Protocols
 * 0 and 1 cannot rebuild a tuple type with a tp_new of its own from
 * __getnewargs__ alone. */
static PyObject *
event_reduce(PyObject *self, PyObject *unused)
{
    PyObject *fields = event_getnewargs(self, NULL);
    if (fields == NULL) {
        return NULL;
    }
    PyObject *reduced = PyTuple_Pack(2, (PyObject *)Py_TYPE(self), fields);
    Py_DECREF(fields);
    return reduced;
}

static PyGetSetDef event_getset[] = {
    {"attempt", event_field, NULL, "failed attempts of the call so far, this one included",
     (void *)(intptr_t)0},
    {"error", event_field, NULL, "the error of the failed attempt", (void *)(intptr_t)1},
    {"delay", event_field, NULL, "on_retry: the delay about to be slept; None for on_give_up",
     (void *)(intptr_t)2},
    {"reason", event_field, NULL,
     "on_give_up: why (exhausted, not_retryable, deadline, budget, may_have_run); None for "
     "on_retry",
     (void *)(intptr_t)3},
    {NULL},
};

static PyMethodDef event_methods[] = {
    {"__getnewargs__", event_getnewargs, METH_NOARGS, NULL},
    {"__reduce__", event_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot event_slots[] = {
    {Py_tp_doc, "RetryEvent(attempt, error, delay=None, reason=None)\n--\n\n"
                "The argument of on_retry and on_give_up (redis_backoff_c.hooks): a tuple\n"
                "with named fields."},
    {Py_tp_new, event_new},
    {Py_tp_dealloc, event_dealloc},
    {Py_tp_traverse, event_traverse},
    {Py_tp_repr, event_repr},
    {Py_tp_getset, event_getset},
    {Py_tp_methods, event_methods},
    {0, NULL},
};

static PyType_Spec event_spec = {
    .name = "redis_backoff_c.RetryEvent",
    .basicsize = (int)(sizeof(PyTupleObject) - sizeof(PyObject *)),
    .itemsize = (int)sizeof(PyObject *),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = event_slots,
};

/* The type, a subclass of tuple, with __match_args__ and _fields (the
 * field names, as a NamedTuple has them). */
static PyTypeObject *
event_type_new(PyObject *module)
{
    PyTypeObject *type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &event_spec,
                                                                  (PyObject *)&PyTuple_Type);
    if (type == NULL) {
        return NULL;
    }
    type->tp_vectorcall = event_vectorcall;
    PyObject *names = PyTuple_New(EVENT_FIELDS);
    for (int i = 0; names != NULL && i < EVENT_FIELDS; i++) {
        PyObject *name = PyUnicode_InternFromString(event_field_names[i]);
        if (name == NULL) {
            Py_CLEAR(names);
            break;
        }
        PyTuple_SET_ITEM(names, i, name);
    }
    /* Into the dict directly: the type is immutable from Python. */
    if (names == NULL || PyDict_SetItemString(type->tp_dict, "__match_args__", names) < 0
        || PyDict_SetItemString(type->tp_dict, "_fields", names) < 0) {
        Py_XDECREF(names);
        Py_DECREF(type);
        return NULL;
    }
    Py_DECREF(names);
    PyType_Modified(type);
    return type;
}

static const char *const give_up_reason_names[RBC_GIVE_UP_COUNT] = {
    NULL,
    "exhausted",
    "not_retryable",
    "deadline",
    "budget",
    "may_have_run",
};

/* The event of a hook's call: the spare one (see drop_event) when there is
 * one, else a new one. */
static PyObject *
make_event(rbc_extras_state *es, long long attempt, PyObject *error, PyObject *delay,
           PyObject *reason)
{
    if (es->Event_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "redis_backoff_c was cleared");
        return NULL;
    }
    PyObject *number = PyLong_FromLongLong(attempt);
    if (number == NULL) {
        return NULL;
    }
    PyObject *items[EVENT_FIELDS] = {number, error, delay, reason};
    PyObject *event = es->spare_event;
    if (event == NULL) {
        event = event_of(es->Event_type, items);
    }
    else {
        es->spare_event = NULL;
        Py_INCREF(Py_TYPE(event)); /* the reference a live event holds */
        event_fill(event, items);
        PyObject_GC_Track(event);
    }
    Py_DECREF(number);
    return event;
}

/* The hook has returned: an event it did not keep becomes the spare, its
 * memory reused by the next call's (an allocation and a free saved on
 * each retry, a third of an event's cost).  Its items are dropped first,
 * which runs no Python code: the loop still holds the error and the
 * delay, the reason is interned, the attempt an int.  While it waits it
 * holds no reference, not even to its type, and is untracked (as the
 * asyncio awaitables' free list), so that no one reaches its empty items
 * through the collector and the module's cycle stays collectable.  Not
 * without the GIL, where two threads could take the same spare. */
static void
drop_event(rbc_extras_state *es, PyObject *event)
{
#ifdef Py_GIL_DISABLED
    Py_DECREF(event);
#else
    if (Py_REFCNT(event) != 1 || es->spare_event != NULL || es->Event_type == NULL
        || !Py_IS_TYPE(event, es->Event_type)) {
        Py_DECREF(event);
        return;
    }
    PyObject_GC_UnTrack(event);
    for (int i = 0; i < EVENT_FIELDS; i++) {
        Py_CLEAR(((PyTupleObject *)event)->ob_item[i]);
    }
    Py_DECREF(Py_TYPE(event)); /* the module's Event_type holds it */
    es->spare_event = event;
#endif
}

/* The hook raised `raised` (an Exception, consumed): to the reporter,
 * which logs it; if that fails with an Exception too, to
 * sys.unraisablehook.  0, or -1 when the reporter raised another
 * BaseException (KeyboardInterrupt), left set. */
static int
report_hook_error(rbc_extras_state *es, PyObject *hook, PyObject *raised)
{
    PyObject *reporter = Py_XNewRef(es->hook_reporter);
    PyObject *result = NULL;
    if (reporter != NULL) {
        PyObject *args[2] = {hook, raised};
        result = PyObject_Vectorcall(reporter, args, 2, NULL);
        Py_DECREF(reporter);
    }
    else {
        rbc_exc_restore(Py_NewRef(raised));
    }
    Py_DECREF(raised);
    if (result != NULL) {
        Py_DECREF(result);
        return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        return -1;
    }
    PyErr_WriteUnraisable(hook);
    return 0;
}

/* `error` as the context of `raised`, as CPython chains an exception
 * raised while another is handled (_PyErr_SetObject): where error's own
 * context chain reaches `raised`, it is cut first, so that no loop is
 * made; a loop already in the chain ends the walk (Floyd's, as there).
 * Runs no Python code: every exception on the chain stays referenced. */
static void
chain_to_error(PyObject *raised, PyObject *error)
{
    PyObject *link = Py_NewRef(error);
    PyObject *slow = Py_NewRef(error);
    int move_slow = 0;
    PyObject *context;
    while ((context = PyException_GetContext(link)) != NULL) {
        if (context == raised) {
            Py_DECREF(context);
            PyException_SetContext(link, NULL);
            break;
        }
        Py_SETREF(link, context);
        if (link == slow) {
            break; /* a loop already there: every link was checked */
        }
        if (move_slow) {
            Py_SETREF(slow, PyException_GetContext(slow));
        }
        move_slow = !move_slow;
    }
    Py_DECREF(link);
    Py_XDECREF(slow);
    PyException_SetContext(raised, Py_NewRef(error));
}

/* hook(event), both owned by the caller: 0, or -1 with a BaseException
 * that is no Exception set (see extras.h). */
static int
call_hook(rbc_extras_state *es, PyObject *hook, PyObject *event, PyObject *error)
{
    PyObject *result = PyObject_CallOneArg(hook, event);
    if (result != NULL) {
        Py_DECREF(result);
        return 0;
    }
    PyObject *raised = rbc_exc_fetch();
    if (raised == NULL) {
        PyErr_SetString(PyExc_SystemError, "a retry hook failed without an exception");
        return -1;
    }
    if (PyErr_GivenExceptionMatches(raised, PyExc_Exception)) {
        return report_hook_error(es, hook, raised);
    }
    /* The error is being handled, so Python's chaining in the hook gave
     * what it raised the error as context; what it raised without that
     * chaining (generator.throw) gets it here, as the twin's does. */
    PyObject *context = PyException_GetContext(raised);
    if (context == NULL && raised != error) {
        chain_to_error(raised, error);
    }
    Py_XDECREF(context);
    rbc_exc_restore(raised);
    return -1;
}

/* The hook `which` of the block at *extras for a counted call (a new
 * reference), or NULL. */
static PyObject *
hook_of(rbc_retry_extras *const *extras, const rbc_call_extras *call, int which)
{
    rbc_retry_extras *block = *extras;
    if (!call->counted || block == NULL) {
        return NULL;
    }
    return Py_XNewRef(field_value(block, which));
}

/* The event for `hook` (owned, consumed) and the call. */
static int
call_hook_with(rbc_extras_state *es, PyObject *hook, long long attempt, PyObject *error,
               PyObject *delay, PyObject *reason)
{
    PyObject *event = make_event(es, attempt, error, delay, reason);
    int status = -1;
    if (event != NULL) {
        status = call_hook(es, hook, event, error);
        drop_event(es, event);
    }
    Py_DECREF(hook);
    return status;
}

int
rbc_extras_retrying(rbc_extras_state *es, rbc_retry_extras *const *extras,
                    const rbc_call_extras *call, PyObject *error, long long attempt,
                    PyObject *delay)
{
    PyObject *hook = hook_of(extras, call, RBC_EXTRA_ON_RETRY);
    if (hook == NULL) {
        return 0;
    }
    return call_hook_with(es, hook, attempt, error, delay, Py_None);
}

int
rbc_extras_gave_up(rbc_extras_state *es, rbc_retry_extras *const *extras,
                   const rbc_call_extras *call, PyObject *error, long long failures)
{
    if (call->gave_up == RBC_GIVE_UP_NONE) {
        return 0;
    }
    PyObject *hook = hook_of(extras, call, RBC_EXTRA_ON_GIVE_UP);
    if (hook == NULL) {
        return 0;
    }
    long long attempt = call->gave_up == RBC_GIVE_UP_NOT_RETRYABLE ? failures + 1 : failures;
    return call_hook_with(es, hook, attempt, error, Py_None,
                          es->give_up_reasons[call->gave_up]);
}

/* ---------------------------------------------------------------------- */
/* Module state                                                            */

int
rbc_extras_init(rbc_state *st, PyObject *module)
{
    rbc_extras_state *es = &st->extras;
    for (int i = 0; i < RBC_STAT_COUNT; i++) {
        es->stat_names[i] = PyUnicode_InternFromString(stat_names[i]);
        if (es->stat_names[i] == NULL) {
            return -1;
        }
    }
    es->str_slept_seconds = PyUnicode_InternFromString("slept_seconds");
    es->str_deadline = PyUnicode_InternFromString("deadline");
    es->str_budget = PyUnicode_InternFromString("budget");
    es->str_stats = PyUnicode_InternFromString("stats");
    es->str_writes = PyUnicode_InternFromString("writes");
    es->str_at_least_once = PyUnicode_InternFromString("at-least-once");
    es->str_at_most_once = PyUnicode_InternFromString("at-most-once");
    es->str_on_retry = PyUnicode_InternFromString("on_retry");
    es->str_on_give_up = PyUnicode_InternFromString("on_give_up");
    if (es->str_slept_seconds == NULL || es->str_deadline == NULL || es->str_budget == NULL
        || es->str_stats == NULL || es->str_writes == NULL || es->str_at_least_once == NULL
        || es->str_at_most_once == NULL || es->str_on_retry == NULL
        || es->str_on_give_up == NULL) {
        return -1;
    }
    for (int i = 1; i < RBC_GIVE_UP_COUNT; i++) {
        es->give_up_reasons[i] = PyUnicode_InternFromString(give_up_reason_names[i]);
        if (es->give_up_reasons[i] == NULL) {
            return -1;
        }
    }
    es->Event_type = event_type_new(module);
    if (es->Event_type == NULL
        || PyModule_AddObjectRef(module, "RetryEvent", (PyObject *)es->Event_type) < 0) {
        return -1;
    }
    es->Budget_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &budget_spec, NULL);
    if (es->Budget_type == NULL) {
        return -1;
    }
    es->Budget_type->tp_vectorcall = budget_vectorcall;
    es->Stats_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &stats_spec, NULL);
    if (es->Stats_type == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "RetryBudget", (PyObject *)es->Budget_type) < 0
        || PyModule_AddObjectRef(module, "RetryStats", (PyObject *)es->Stats_type) < 0) {
        return -1;
    }
    return 0;
}

int
rbc_extras_traverse(rbc_extras_state *es, visitproc visit, void *arg)
{
    Py_VISIT(es->Budget_type);
    Py_VISIT(es->Stats_type);
    Py_VISIT(es->writes_judge);
    Py_VISIT(es->Event_type);
    Py_VISIT(es->hook_reporter);
    return 0;
}

void
rbc_extras_clear(rbc_extras_state *es)
{
    Py_CLEAR(es->Budget_type);
    Py_CLEAR(es->Stats_type);
    for (int i = 0; i < RBC_STAT_COUNT; i++) {
        Py_CLEAR(es->stat_names[i]);
    }
    Py_CLEAR(es->str_slept_seconds);
    Py_CLEAR(es->str_deadline);
    Py_CLEAR(es->str_budget);
    Py_CLEAR(es->str_stats);
    Py_CLEAR(es->str_writes);
    Py_CLEAR(es->str_at_least_once);
    Py_CLEAR(es->str_at_most_once);
    Py_CLEAR(es->writes_judge);
    PyObject *spare = es->spare_event;
    es->spare_event = NULL;
    if (spare != NULL) {
        /* Its reference to its type back (still held here), then freed as
         * any event: its dealloc runs no Python code. */
        Py_INCREF(Py_TYPE(spare));
        Py_DECREF(spare);
    }
    Py_CLEAR(es->Event_type);
    Py_CLEAR(es->hook_reporter);
    Py_CLEAR(es->str_on_retry);
    Py_CLEAR(es->str_on_give_up);
    for (int i = 0; i < RBC_GIVE_UP_COUNT; i++) {
        Py_CLEAR(es->give_up_reasons[i]);
    }
}
