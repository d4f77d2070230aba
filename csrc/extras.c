/* The extras tied to a Retry: its block, the steps that only count, the
 * module state.  See extras.h; each extra is a unit of its own. */
#include "extras.h"
#include "args.h"

#include <string.h>

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
        if (rbc_retry_extras_field(block, i) != NULL) {
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

/* After a deadline was stored: the first in this interpreter runs the
 * package's hook, once (see the extras state).  Called last, with nothing
 * held: the hook runs Python code. */
static int
saw_deadline(rbc_extras_state *es)
{
    if (es->deadline_seen) {
        return 0;
    }
    es->deadline_seen = 1;
    PyObject *hook = es->deadline_hook; /* owned here from now on */
    es->deadline_hook = NULL;
    if (hook == NULL) {
        return 0;
    }
    PyObject *result = PyObject_CallNoArgs(hook);
    Py_DECREF(hook);
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
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

/* The checked budget, stats or hook `value` (None: unset) into the block. */
static int
store_shared(rbc_retry_extras **extras, int which, PyObject *value)
{
    if (value == Py_None) {
        if (*extras != NULL) {
            Py_CLEAR(*rbc_retry_extras_field_of(*extras, which));
            drop_if_empty(extras);
        }
        return 0;
    }
    rbc_retry_extras *block = block_of(extras);
    if (block == NULL) {
        return -1;
    }
    Py_XSETREF(*rbc_retry_extras_field_of(block, which), Py_NewRef(value));
    return 0;
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
    if ((deadline != Py_None && rbc_positive_value(owner, "deadline", deadline, 1, &seconds) < 0)
        || check_shared(owner, "budget", values[RBC_EXTRA_BUDGET], es->Budget_type) < 0
        || check_shared(owner, "stats", values[RBC_EXTRA_STATS], es->Stats_type) < 0
        || rbc_writes_check(es, owner, "writes", values[RBC_EXTRA_WRITES], &policy) < 0
        || rbc_hooks_check(owner, "on_retry", values[RBC_EXTRA_ON_RETRY]) < 0
        || rbc_hooks_check(owner, "on_give_up", values[RBC_EXTRA_ON_GIVE_UP]) < 0) {
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
    return deadline != Py_None ? saw_deadline(es) : 0;
}

PyObject *
rbc_retry_extras_get(rbc_extras_state *es, const rbc_retry_extras *extras, int which)
{
    PyObject *value = extras == NULL ? NULL : rbc_retry_extras_field(extras, which);
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
        return rbc_writes_check(es, owners[which], "value", value, &policy) < 0
                   ? -1
                   : store_writes(extras, policy);
    }
    if (which == RBC_EXTRA_DEADLINE) {
        double seconds = 0.0;
        if (value != Py_None && rbc_positive_value(owners[which], "value", value, 1, &seconds) < 0) {
            return -1;
        }
        if (store_deadline(extras, value, seconds) < 0) {
            return -1;
        }
        return value != Py_None ? saw_deadline(es) : 0;
    }
    if (which == RBC_EXTRA_ON_RETRY || which == RBC_EXTRA_ON_GIVE_UP) {
        return rbc_hooks_check(owners[which], "value", value) < 0
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
            && (a != NULL ? rbc_retry_extras_field(a, i) : NULL) != (b != NULL ? rbc_retry_extras_field(b, i) : NULL)) {
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
        parts[i] = Py_XNewRef(rbc_retry_extras_field(extras, i));
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
        PyObject *value = rbc_retry_extras_field(extras, i);
        if (value != NULL) {
            keys[count] = names[i];
            values[count] = Py_NewRef(value);
            count++;
        }
    }
    return count;
}

/* ---------------------------------------------------------------------- */
/* The steps of call_with_retry that only count                            */

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
    if (budget != NULL && !(rbc_budget_tokens(budget) > budget->threshold)) {
        rbc_extras_give_up(extras, call, RBC_GIVE_UP_BUDGET);
        return 1;
    }
    return 0;
}

void
rbc_extras_aborted_slow(rbc_retry_extras *extras)
{
    rbc_stats_count(extras->stats, RBC_STAT_ABORTED);
}

/* ---------------------------------------------------------------------- */
/* Module state                                                            */

int
rbc_extras_init(rbc_state *st, PyObject *module)
{
    rbc_extras_state *es = &st->extras;
    es->str_deadline = PyUnicode_InternFromString("deadline");
    es->str_budget = PyUnicode_InternFromString("budget");
    es->str_stats = PyUnicode_InternFromString("stats");
    es->str_writes = PyUnicode_InternFromString("writes");
    es->str_at_least_once = PyUnicode_InternFromString("at-least-once");
    es->str_at_most_once = PyUnicode_InternFromString("at-most-once");
    es->str_on_retry = PyUnicode_InternFromString("on_retry");
    es->str_on_give_up = PyUnicode_InternFromString("on_give_up");
    if (es->str_deadline == NULL || es->str_budget == NULL
        || es->str_stats == NULL || es->str_writes == NULL || es->str_at_least_once == NULL
        || es->str_at_most_once == NULL || es->str_on_retry == NULL
        || es->str_on_give_up == NULL) {
        return -1;
    }
    if (rbc_hooks_init(es, module) < 0 || rbc_budget_init(es, module) < 0
        || rbc_stats_init(es, module) < 0) {
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
    Py_VISIT(es->call_deadline);
    Py_VISIT(es->enter_cluster_command);
    Py_VISIT(es->deadline_hook);
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
    Py_CLEAR(es->call_deadline);
    Py_CLEAR(es->enter_cluster_command);
    Py_CLEAR(es->deadline_hook);
    rbc_hooks_clear(es);
    Py_CLEAR(es->str_on_retry);
    Py_CLEAR(es->str_on_give_up);
}
