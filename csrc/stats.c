/* RetryStats: see stats.h. */
#include "stats.h"
#include "args.h"

#define STATS(op) ((rbc_stats_object *)(op))

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
    int status = item == NULL ? 0 : rbc_real_value("RetryStats.__setstate__", "slept_seconds", item, &slept);
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

int
rbc_stats_init(rbc_extras_state *es, PyObject *module)
{
    for (int i = 0; i < RBC_STAT_COUNT; i++) {
        es->stat_names[i] = PyUnicode_InternFromString(stat_names[i]);
        if (es->stat_names[i] == NULL) {
            return -1;
        }
    }
    es->str_slept_seconds = PyUnicode_InternFromString("slept_seconds");
    if (es->str_slept_seconds == NULL) {
        return -1;
    }
    es->Stats_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &stats_spec, NULL);
    if (es->Stats_type == NULL) {
        return -1;
    }
    return PyModule_AddObjectRef(module, "RetryStats", (PyObject *)es->Stats_type);
}
