/* The part of Retry that the sync and asyncio types share: see retry_core.h. */
#include "retry_core.h"
#include "args.h"
#include "extras.h"
#include "slots.h"
#include "strategies.h"

#include <stddef.h>

/* ---------------------------------------------------------------------- */
/* Module state                                                            */

int
rbc_retry_core_init(rbc_retry_core_state *cs)
{
    cs->str_retries = PyUnicode_InternFromString("_retries");
    cs->str_supported_errors = PyUnicode_InternFromString("_supported_errors");
    cs->str_is_retryable = PyUnicode_InternFromString("_is_retryable");
    cs->checker_not_none = 0; /* until redis_backoff_c._impl hands the rules over */
    return cs->str_retries && cs->str_supported_errors && cs->str_is_retryable ? 0 : -1;
}

static int
flavor_traverse(rbc_retry_flavor *fl, visitproc visit, void *arg)
{
    Py_VISIT(fl->type);
    Py_VISIT(fl->family);
    Py_VISIT(fl->default_errors);
    Py_VISIT(fl->default_errors_set);
    return 0;
}

int
rbc_retry_core_traverse(rbc_retry_core_state *cs, visitproc visit, void *arg)
{
    for (int i = 0; i < RBC_FLAVOR_COUNT; i++) {
        int err = flavor_traverse(&cs->flavors[i], visit, arg);
        if (err) {
            return err;
        }
    }
    return 0;
}

void
rbc_retry_core_clear(rbc_retry_core_state *cs)
{
    for (int i = 0; i < RBC_FLAVOR_COUNT; i++) {
        rbc_retry_flavor *fl = &cs->flavors[i];
        Py_CLEAR(fl->type);
        Py_CLEAR(fl->family);
        Py_CLEAR(fl->default_errors);
        Py_CLEAR(fl->default_errors_set);
    }
    Py_CLEAR(cs->str_retries);
    Py_CLEAR(cs->str_supported_errors);
    Py_CLEAR(cs->str_is_retryable);
}

int
rbc_retry_flavor_init(rbc_retry_flavor *fl, const char *module_name,
                      const rbc_retry_default_error *default_errors)
{
    fl->family = rbc_import_attr(module_name, "Retry");
    if (fl->family == NULL) {
        return -1;
    }
    Py_ssize_t count = 0;
    while (default_errors[count].module != NULL) {
        count++;
    }
    fl->default_errors = PyTuple_New(count);
    if (fl->default_errors == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *cls = rbc_import_attr(default_errors[i].module, default_errors[i].name);
        if (cls == NULL) {
            return -1;
        }
        PyTuple_SET_ITEM(fl->default_errors, i, cls);
    }
    fl->default_errors_set = PyFrozenSet_New(fl->default_errors);
    return fl->default_errors_set == NULL ? -1 : 0;
}

/* ---------------------------------------------------------------------- */
/* Parameters                                                              */

static inline rbc_retry_core_state *
core_of(rbc_state *st)
{
    return &st->core;
}

/* retries must have __index__ (int, bool, numpy ints...): its value,
 * clamped to long long (no failure count reaches the clamp). */
static int
check_retries(const char *owner, const char *name, PyObject *retries, long long *value)
{
    if (!PyIndex_Check(retries)) {
        PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be an int, not %.200s",
                     owner, name, Py_TYPE(retries)->tp_name);
        return -1;
    }
    PyObject *index = PyNumber_Index(retries);
    if (index == NULL) {
        return -1;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    *value = overflow > 0 ? LLONG_MAX : overflow < 0 ? LLONG_MIN
                                                     : v;
    return 0;
}

/* supported_errors as a tuple of exception classes: a tuple is kept as it
 * is, any other iterable becomes one.  Returns a new reference. */
static PyObject *
checked_errors(const char *owner, const char *name, PyObject *errors)
{
    PyObject *tuple;
    if (PyTuple_CheckExact(errors)) {
        tuple = Py_NewRef(errors);
    }
    else {
        tuple = PySequence_Tuple(errors);
        if (tuple == NULL) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Format(PyExc_TypeError,
                             "%s() argument '%s' must be a tuple of exception classes, not %.200s",
                             owner, name, Py_TYPE(errors)->tp_name);
            }
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (!PyExceptionClass_Check(item)) {
            PyErr_Format(PyExc_TypeError,
                         "%s() argument '%s' must hold exception classes, not %.200R",
                         owner, name, item);
            Py_DECREF(tuple);
            return NULL;
        }
    }
    return tuple;
}

/* is_retryable must be callable or None: checked when it is given, where
 * redis-py would only fail at the first error it is asked about. */
static int
check_checker(const char *owner, const char *name, PyObject *checker)
{
    if (checker == Py_None || Py_TYPE(checker)->tp_call != NULL) {
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be callable or None, not %.200s",
                 owner, name, Py_TYPE(checker)->tp_name);
    return -1;
}

/* The field holds NULL for None: call_with_retry tests one pointer. */
static void
set_checker(rbc_retry_object *self, PyObject *checker)
{
    Py_XSETREF(self->is_retryable, checker == Py_None ? NULL : Py_NewRef(checker));
}

/* _retries and its C value, both written before the old object goes: its
 * __del__ may set _retries again, and the loop must read what
 * get_retries() says. */
static void
store_retries_value(rbc_retry_object *self, PyObject *retries, long long value)
{
    PyObject *old = self->retries;
    self->retries = Py_NewRef(retries);
    self->retries_value = value;
    Py_XDECREF(old);
}

static void
set_errors(rbc_retry_object *self, PyObject *tuple)
{
    PyObject *old_errors = self->supported_errors, *old_set = self->errors_set;
    self->supported_errors = tuple;
    self->errors_set = NULL;
    Py_XDECREF(old_errors);
    Py_XDECREF(old_set);
}

int
rbc_retry_set_parameters(const rbc_retry_flavor *fl, rbc_retry_object *self,
                         PyObject *backoff, PyObject *retries, PyObject *supported_errors,
                         PyObject *is_retryable)
{
    long long value;
    if (check_retries(fl->name, "retries", retries, &value) < 0
        || check_checker(fl->name, "is_retryable", is_retryable) < 0) {
        return -1;
    }
    PyObject *errors;
    if (supported_errors == NULL || supported_errors == fl->default_errors) {
        errors = Py_NewRef(fl->default_errors);
    }
    else if ((errors = checked_errors(fl->name, "supported_errors", supported_errors)) == NULL) {
        return -1;
    }
    /* Assigned one by one in redis-py's order, each old value released
     * after its field is written, as `self._backoff = backoff` and so on
     * would: a __del__ of one finds the fields before it set and may
     * assign those after it, which this then overwrites. */
    Py_XSETREF(self->backoff, Py_NewRef(backoff));
    store_retries_value(self, retries, value);
    set_errors(self, errors);
    set_checker(self, is_retryable);
    return 0;
}

PyObject *
rbc_retry_new(const rbc_retry_flavor *fl, PyTypeObject *type)
{
    rbc_retry_object *self = (rbc_retry_object *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->backoff = Py_NewRef(Py_None);
    self->retries = PyLong_FromLong(0);
    self->retries_value = 0;
    self->supported_errors = Py_NewRef(fl->default_errors);
    self->errors_set = NULL;
    self->is_retryable = NULL;
    if (self->retries == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* Retry(backoff, retries) of the exact type with a small int `retries`
 * (redis-py's own calls): the object built with its fields in place,
 * without the generic allocation, the placeholder fields of tp_new and the
 * generic __index__ conversion.  tp_free is PyObject_GC_Del. */
static PyObject *
retry_new_exact(const rbc_retry_flavor *fl, PyObject *type, PyObject *backoff, PyObject *retries,
                long long value)
{
    rbc_retry_object *self = PyObject_GC_New(rbc_retry_object, (PyTypeObject *)type);
    if (self == NULL) {
        return NULL;
    }
    self->backoff = Py_NewRef(backoff);
    self->retries = Py_NewRef(retries);
    self->retries_value = value;
    self->supported_errors = Py_NewRef(fl->default_errors);
    self->errors_set = NULL;
    self->is_retryable = NULL;
    self->weakreflist = NULL;
    self->extras = NULL;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* The four of redis-py (is_retryable: 8.2's, accepted whatever redis-py
 * is installed), then the keyword-only extras. */
static const char *const retry_parameters[] = {
    "backoff", "retries", "supported_errors", "is_retryable", "deadline",
    "budget", "stats", "writes", "on_retry", "on_give_up"};
#define RETRY_PARAMETERS (4 + RBC_EXTRA_COUNT)
/* Its text form is RBC_RETRY_TEXT_SIGNATURE (retry_core.h). */
static const rbc_signature retry_signature = {"Retry", retry_parameters, RETRY_PARAMETERS, 4};

/* The parameters' defaults for flavor `fl`, into values[RETRY_PARAMETERS]. */
static void
retry_defaults(const rbc_retry_flavor *fl, PyObject **values)
{
    values[0] = NULL;
    values[1] = NULL;
    values[2] = fl->default_errors;
    for (int i = 3; i < RETRY_PARAMETERS; i++) {
        values[i] = Py_None;
    }
}

/* The extras given (not None), extras[RBC_EXTRA_*]: set them, after the
 * parameters. */
static int
set_given_extras(const rbc_retry_flavor *fl, PyObject *self, PyObject *const *extras)
{
    int given = 0;
    for (int i = 0; i < RBC_EXTRA_COUNT; i++) {
        given |= extras[i] != Py_None;
    }
    if (!given) {
        return 0;
    }
    rbc_state *st = rbc_state_of(self);
    return st == NULL ? -1
                      : rbc_retry_extras_set(&st->extras, fl->name, &RETRY(self)->extras, extras);
}

/* Retry(...) of the exact type of flavor `fl`. */
static PyObject *
retry_vectorcall(const rbc_retry_flavor *fl, PyObject *type, PyObject *const *args,
                 size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    long long small;
    if (nargs == 2 && kwnames == NULL && PyLong_CheckExact(args[1])
        && rbc_small_int_value(args[1], &small)) {
        return retry_new_exact(fl, type, args[0], args[1], small);
    }
    PyObject *values[RETRY_PARAMETERS];
    retry_defaults(fl, values);
    if (rbc_bind(&retry_signature, args, nargs, kwnames, values) < 0) {
        return NULL;
    }
    PyObject *self = rbc_retry_new(fl, (PyTypeObject *)type);
    if (self == NULL) {
        return NULL;
    }
    if (rbc_retry_set_parameters(fl, RETRY(self), values[0], values[1], values[2], values[3]) < 0
        || set_given_extras(fl, self, values + 4) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return self;
}

/* type(*args, **kwnames) through tp_new and tp_init, for a subclass of
 * either flavor, whose __init__ may differ from ours. */
static PyObject *
type_call_slots(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *tuple = PyTuple_New(nargs);
    if (tuple == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
    }
    PyObject *kwargs = NULL;
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        kwargs = PyDict_New();
        for (Py_ssize_t k = 0; kwargs != NULL && k < PyTuple_GET_SIZE(kwnames); k++) {
            if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, k), args[nargs + k]) < 0) {
                Py_CLEAR(kwargs);
            }
        }
        if (kwargs == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
    }
    PyObject *result = PyType_Type.tp_call(type, tuple, kwargs);
    Py_DECREF(tuple);
    Py_XDECREF(kwargs);
    return result;
}

PyObject *
rbc_retry_type_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf,
                          PyObject *kwnames)
{
    PyObject *module = ((PyHeapTypeObject *)type)->ht_module;
    if (module != NULL && PyModule_GetDef(module) == &rbc_module_def) {
        rbc_retry_core_state *cs = core_of(rbc_get_state(module));
        for (int i = 0; i < RBC_FLAVOR_COUNT; i++) {
            if ((PyTypeObject *)type == cs->flavors[i].type) {
                return retry_vectorcall(&cs->flavors[i], type, args, nargsf, kwnames);
            }
        }
    }
    return type_call_slots(type, args, nargsf, kwnames);
}

PyTypeObject *
rbc_retry_flavor_type_new(rbc_retry_flavor *fl, PyObject *module, PyType_Spec *spec)
{
    PyTypeObject *type = (PyTypeObject *)PyType_FromModuleAndSpec(module, spec, NULL);
    if (type == NULL) {
        return NULL;
    }
    type->tp_vectorcall = rbc_retry_type_vectorcall;
    fl->type = type;
    return type;
}

int
rbc_retry_init_args(const rbc_retry_flavor *fl, PyObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *values[RETRY_PARAMETERS];
    retry_defaults(fl, values);
    if (rbc_bind_tuple(&retry_signature, args, kwds, values) < 0) {
        return -1;
    }
    PyObject *backoff = values[0], *retries = values[1], *errors = values[2];
    PyObject *checker = values[3];
    /* __init__ again on an object: the checker is the one given now, as
     * redis-py's __init__ sets _is_retryable (None when not given). */
    if (rbc_retry_set_parameters(fl, RETRY(self), backoff, retries, errors, checker) < 0) {
        return -1;
    }
    /* __init__ again on an object: the extras are the ones given now. */
    rbc_retry_extras_clear(&RETRY(self)->extras);
    return set_given_extras(fl, self, values + 4);
}

/* ---------------------------------------------------------------------- */
/* GC                                                                      */

int
rbc_retry_obj_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(RETRY(self)->backoff);
    Py_VISIT(RETRY(self)->retries);
    Py_VISIT(RETRY(self)->supported_errors);
    Py_VISIT(RETRY(self)->errors_set);
    Py_VISIT(RETRY(self)->is_retryable);
    return rbc_retry_extras_traverse(RETRY(self)->extras, visit, arg);
}

int
rbc_retry_obj_clear(PyObject *self)
{
    Py_CLEAR(RETRY(self)->backoff);
    Py_CLEAR(RETRY(self)->retries);
    Py_CLEAR(RETRY(self)->supported_errors);
    Py_CLEAR(RETRY(self)->errors_set);
    Py_CLEAR(RETRY(self)->is_retryable);
    rbc_retry_extras_clear(&RETRY(self)->extras);
    return 0;
}

void
rbc_retry_obj_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (RETRY(self)->weakreflist != NULL) {
        PyObject_ClearWeakRefs(self);
    }
    (void)rbc_retry_obj_clear(self);
    type->tp_free(self);
    Py_DECREF(type);
}

/* ---------------------------------------------------------------------- */
/* Attributes and methods                                                  */

/* A field read after tp_clear (a cycle being collected) is None, not NULL. */
static inline PyObject *
field_or_none(PyObject *field)
{
    return Py_NewRef(field != NULL ? field : Py_None);
}

static PyObject *
backoff_get(PyObject *self, void *closure)
{
    return field_or_none(RETRY(self)->backoff);
}

static int
backoff_set(PyObject *self, PyObject *value, void *closure)
{
    if (rbc_refuse_delete(value, "_backoff") < 0) {
        return -1;
    }
    Py_XSETREF(RETRY(self)->backoff, Py_NewRef(value));
    return 0;
}

static PyObject *
retries_get(PyObject *self, void *closure)
{
    return field_or_none(RETRY(self)->retries);
}

static int
store_retries(PyObject *self, PyObject *value, const char *owner, const char *name)
{
    long long v;
    if (check_retries(owner, name, value, &v) < 0) {
        return -1;
    }
    store_retries_value(RETRY(self), value, v);
    return 0;
}

static int
retries_set(PyObject *self, PyObject *value, void *closure)
{
    if (rbc_refuse_delete(value, "_retries") < 0) {
        return -1;
    }
    return store_retries(self, value, "Retry._retries", "value");
}

static PyObject *
errors_get(PyObject *self, void *closure)
{
    return field_or_none(RETRY(self)->supported_errors);
}

static int
errors_set(PyObject *self, PyObject *value, void *closure)
{
    if (rbc_refuse_delete(value, "_supported_errors") < 0) {
        return -1;
    }
    PyObject *tuple = checked_errors("Retry._supported_errors", "value", value);
    if (tuple == NULL) {
        return -1;
    }
    set_errors(RETRY(self), tuple);
    return 0;
}

/* _is_retryable and is_retryable: redis-py 8.2's property over its
 * attribute, one field here. */
static PyObject *
checker_get(PyObject *self, void *closure)
{
    PyObject *checker = RETRY(self)->is_retryable;
    return Py_NewRef(checker != NULL ? checker : Py_None);
}

static int
store_checker(PyObject *self, PyObject *value, const char *attribute, const char *owner)
{
    if (rbc_refuse_delete(value, attribute) < 0 || check_checker(owner, "value", value) < 0) {
        return -1;
    }
    set_checker(RETRY(self), value);
    return 0;
}

static int
checker_attribute_set(PyObject *self, PyObject *value, void *closure)
{
    return store_checker(self, value, "_is_retryable", "Retry._is_retryable");
}

static int
checker_property_set(PyObject *self, PyObject *value, void *closure)
{
    return store_checker(self, value, "is_retryable", "Retry.is_retryable");
}

/* deadline, budget, stats, writes, on_retry and on_give_up (extras.h):
 * the closure is the RBC_EXTRA_* index. */
static PyObject *
extra_get(PyObject *self, void *closure)
{
    rbc_state *st = rbc_state_of(self);
    if (st == NULL) {
        return NULL;
    }
    return rbc_retry_extras_get(&st->extras, RETRY(self)->extras, (int)(intptr_t)closure);
}

static int
extra_set(PyObject *self, PyObject *value, void *closure)
{
    rbc_state *st = rbc_state_of(self);
    if (st == NULL) {
        return -1;
    }
    return rbc_retry_extras_store(&st->extras, &RETRY(self)->extras, (int)(intptr_t)closure,
                                  value);
}

PyMemberDef rbc_retry_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(rbc_retry_object, weakreflist), READONLY, NULL},
    {NULL},
};

PyGetSetDef rbc_retry_getset[] = {
    {"_backoff", backoff_get, backoff_set, "the backoff strategy", NULL},
    {"_retries", retries_get, retries_set, "retries after the first failure; < 0: forever", NULL},
    {"_supported_errors", errors_get, errors_set, "the exception classes that are retried", NULL},
    {"_is_retryable", checker_get, checker_attribute_set, "the checker of is_retryable, or None",
     NULL},
    {"is_retryable", checker_get, checker_property_set,
     "Optional checker: a supported error is retried only if it returns true\n"
     "(when false, fail() is called and the error raised). None: no checker.",
     NULL},
    {"deadline", extra_get, extra_set,
     "seconds one call_with_retry may last (monotonic clock), or None",
     (void *)(intptr_t)RBC_EXTRA_DEADLINE},
    {"budget", extra_get, extra_set,
     "the RetryBudget that throttles retries (shared by copies), or None",
     (void *)(intptr_t)RBC_EXTRA_BUDGET},
    {"stats", extra_get, extra_set, "the RetryStats that count calls (shared by copies), or None",
     (void *)(intptr_t)RBC_EXTRA_STATS},
    {"writes", extra_get, extra_set,
     "'at-least-once' (redis-py's: every supported error is retried) or 'at-most-once'\n"
     "(a failed attempt that may have run on the server is not retried)",
     (void *)(intptr_t)RBC_EXTRA_WRITES},
    {"on_retry", extra_get, extra_set,
     "called with a RetryEvent just before each retry's backoff sleep, or None\n"
     "(redis_backoff_c.hooks)",
     (void *)(intptr_t)RBC_EXTRA_ON_RETRY},
    {"on_give_up", extra_get, extra_set,
     "called with a RetryEvent when a call gives up, just before the error is\n"
     "raised, or None (redis_backoff_c.hooks)",
     (void *)(intptr_t)RBC_EXTRA_ON_GIVE_UP},
    {NULL},
};

PyObject *
rbc_retry_get_retries(PyObject *self, PyObject *unused)
{
    return field_or_none(RETRY(self)->retries);
}

static const char *const call_with_retry_parameters[] = {"do", "fail", "is_retryable",
                                                         "with_failure_count"};
const rbc_signature rbc_call_with_retry_signature = {"call_with_retry",
                                                     call_with_retry_parameters, 4, 4};

static const char *const update_retries_parameters[] = {"value"};
static const rbc_signature update_retries_signature = {"update_retries",
                                                       update_retries_parameters, 1, 1};

PyObject *
rbc_retry_update_retries(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames)
{
    PyObject *value = NULL;
    if (rbc_bind(&update_retries_signature, args, nargs, kwnames, &value) < 0) {
        return NULL;
    }
    if (store_retries(self, value, "update_retries", "value") < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* tuple(set(self._supported_errors + tuple(specified_errors))): the same
 * insertions into a set, so the same order as redis-py's. */
static const char *const update_supported_errors_parameters[] = {"specified_errors"};
static const rbc_signature update_supported_errors_signature = {
    "update_supported_errors", update_supported_errors_parameters, 1, 1};

PyObject *
rbc_retry_update_supported_errors(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    PyObject *specified = NULL;
    if (rbc_bind(&update_supported_errors_signature, args, nargs, kwnames, &specified) < 0) {
        return NULL;
    }
    /* Read first, as redis-py's expression does: iterating the argument
     * may assign _supported_errors. */
    PyObject *current = field_or_none(RETRY(self)->supported_errors);
    PyObject *added = checked_errors("update_supported_errors", "specified_errors", specified);
    if (added == NULL) {
        Py_DECREF(current);
        return NULL;
    }
    PyObject *joined = PySequence_Concat(current, added);
    Py_DECREF(current);
    Py_DECREF(added);
    if (joined == NULL) {
        return NULL;
    }
    PyObject *set = PySet_New(joined);
    Py_DECREF(joined);
    if (set == NULL) {
        return NULL;
    }
    PyObject *tuple = PySequence_Tuple(set);
    Py_DECREF(set);
    if (tuple == NULL) {
        return NULL;
    }
    set_errors(RETRY(self), tuple);
    Py_RETURN_NONE;
}

/* The flavor of which `self` is an instance (sync or asyncio), or NULL. */
static const rbc_retry_flavor *
flavor_of(rbc_state *st, PyObject *self)
{
    rbc_retry_core_state *cs = core_of(st);
    for (int i = 0; i < RBC_FLAVOR_COUNT; i++) {
        if (cs->flavors[i].type != NULL && PyObject_TypeCheck(self, cs->flavors[i].type)) {
            return &cs->flavors[i];
        }
    }
    return NULL;
}

/* ---- copy and pickle ---- */

/* What a Python subclass adds to a copy: its __slots__ values and its
 * instance __dict__, shared (memo NULL) or deep-copied.  Consumes `copy`;
 * returns it, or NULL with an exception. */
static PyObject *
copy_subclass_state(PyObject *self, PyObject *copy, rbc_state *st, PyObject *memo)
{
    if (rbc_slots_copy(st, self, copy, memo) < 0) {
        goto error;
    }
    if (Py_TYPE(self)->tp_dictoffset == 0) {
        return copy;
    }
    PyObject *dict;
    if (rbc_get_optional_attr(self, st->common.str_dict, &dict) < 0) {
        goto error;
    }
    if (dict == NULL) {
        return copy;
    }
    PyObject *state = memo == NULL
                          ? PyDict_Copy(dict)
                          : PyObject_CallFunctionObjArgs(st->common.copy_deepcopy, dict, memo, NULL);
    Py_DECREF(dict);
    if (state == NULL) {
        goto error;
    }
    PyObject *target;
    int status = rbc_get_optional_attr(copy, st->common.str_dict, &target);
    if (status > 0) {
        status = PyDict_Check(target) ? PyDict_Update(target, state) : -1;
        if (status < 0 && !PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "__dict__ is not a dict");
        }
        Py_DECREF(target);
    }
    Py_DECREF(state);
    if (status < 0) {
        goto error;
    }
    return copy;
error:
    Py_DECREF(copy);
    return NULL;
}

/* A new object of self's type sharing self's fields. */
static PyObject *
shallow_copy(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    rbc_retry_object *copy = (rbc_retry_object *)type->tp_alloc(type, 0);
    if (copy == NULL) {
        return NULL;
    }
    rbc_retry_object *me = RETRY(self);
    copy->backoff = field_or_none(me->backoff);
    copy->retries = me->retries != NULL ? Py_NewRef(me->retries) : PyLong_FromLong(0);
    copy->retries_value = me->retries_value;
    copy->supported_errors = field_or_none(me->supported_errors);
    copy->errors_set = Py_XNewRef(me->errors_set);
    copy->is_retryable = Py_XNewRef(me->is_retryable);
    if (copy->retries == NULL || rbc_retry_extras_copy(&copy->extras, me->extras) < 0) {
        Py_DECREF(copy);
        return NULL;
    }
    return (PyObject *)copy;
}

PyObject *
rbc_retry_copy(PyObject *self, PyObject *unused)
{
    rbc_state *st = rbc_state_of(self);
    if (st == NULL) {
        return NULL;
    }
    PyObject *copy = shallow_copy(self);
    return copy == NULL ? NULL : copy_subclass_state(self, copy, st, NULL);
}

/* memo[id(original)] -> copy, as copy.deepcopy keeps it, so that objects
 * shared inside one deepcopy stay shared in the copy. */
static int
memo_lookup(PyObject *memo, PyObject *original, PyObject **found)
{
    *found = NULL;
    if (memo == NULL) {
        return 0;
    }
    PyObject *key = PyLong_FromVoidPtr(original);
    if (key == NULL) {
        return -1;
    }
    *found = PyDict_GetItemWithError(memo, key);
    Py_DECREF(key);
    if (*found == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_INCREF(*found);
    return 1;
}

/* memo[id(original)] = copy, and original kept alive in the memo, as
 * copy.deepcopy does (its _keep_alive list at memo[id(memo)]). */
static int
memo_store(PyObject *memo, PyObject *original, PyObject *copy)
{
    if (memo == NULL) {
        return 0;
    }
    PyObject *key = PyLong_FromVoidPtr(original);
    if (key == NULL) {
        return -1;
    }
    int status = PyDict_SetItem(memo, key, copy);
    Py_DECREF(key);
    if (status < 0) {
        return -1;
    }
    PyObject *keep_key = PyLong_FromVoidPtr(memo);
    if (keep_key == NULL) {
        return -1;
    }
    /* Owned, not borrowed from the memo: storing into it may run a key's
     * __eq__, which may replace or remove the entry. */
    PyObject *keep = Py_XNewRef(PyDict_GetItemWithError(memo, keep_key));
    if (keep == NULL && !PyErr_Occurred()) {
        keep = PyList_New(0);
        status = keep == NULL ? -1 : PyDict_SetItem(memo, keep_key, keep);
    }
    else {
        status = keep == NULL ? -1 : 0;
    }
    Py_DECREF(keep_key);
    if (status == 0 && PyList_Check(keep)) {
        status = PyList_Append(keep, original);
    }
    Py_XDECREF(keep);
    return status;
}

/* Functions, builtin functions and classes: copy.deepcopy returns them as
 * they are (its atomic types), once the memo has not mapped them to
 * something else.  The usual is_retryable checker is one. */
static int
is_atomic_callable(PyObject *obj)
{
    return PyFunction_Check(obj) || PyCFunction_CheckExact(obj) || PyType_Check(obj);
}

/* copy.deepcopy(obj, memo), without the Python call for what deepcopy
 * returns as it is and for exact C strategies.  `obj` is owned by the
 * caller: a field of the copy, which a memo key's __eq__ may replace. */
static PyObject *
deepcopy_owned_field(rbc_state *st, PyObject *obj, PyObject *memo)
{
    if (obj == Py_None || PyLong_CheckExact(obj) || PyBool_Check(obj)
        || PyFloat_CheckExact(obj)) {
        return Py_NewRef(obj);
    }
    PyObject *found;
    int status = memo_lookup(memo, obj, &found);
    if (status != 0) {
        return found;
    }
    if (is_atomic_callable(obj)) {
        return Py_NewRef(obj);
    }
    int kind = rbc_exact_strategy_kind(&st->strategies, obj);
    if (kind >= 0) {
        PyObject *copy = rbc_strategy_atomic_copy(st, obj, kind);
        if (copy != NULL) {
            if (memo_store(memo, obj, copy) < 0) {
                Py_DECREF(copy);
                return NULL;
            }
            return copy;
        }
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    PyObject *memo_arg = memo != NULL ? memo : Py_None;
    return PyObject_CallFunctionObjArgs(st->common.copy_deepcopy, obj, memo_arg, NULL);
}

/* deepcopy_owned_field of a field read now: the field is held for the
 * whole copy, whatever the code it runs assigns. */
static PyObject *
deepcopy_field(rbc_state *st, PyObject *field, PyObject *memo)
{
    PyObject *obj = field_or_none(field);
    PyObject *copy = deepcopy_owned_field(st, obj, memo);
    Py_DECREF(obj);
    return copy;
}

/* A tuple of classes deep-copies to itself; so does the None that a
 * cleared object (tp_clear) holds instead of its tuple. */
static int
all_classes(PyObject *tuple)
{
    if (!PyTuple_Check(tuple)) {
        return 1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); i++) {
        if (!PyType_Check(PyTuple_GET_ITEM(tuple, i))) {
            return 0;
        }
    }
    return 1;
}

PyObject *
rbc_retry_deepcopy(PyObject *self, PyObject *memo)
{
    rbc_state *st = rbc_state_of(self);
    if (st == NULL) {
        return NULL;
    }
    if (memo == Py_None) {
        memo = NULL;
    }
    else if (!PyDict_Check(memo)) {
        PyErr_Format(PyExc_TypeError, "__deepcopy__() argument must be a dict, not %.200s",
                     Py_TYPE(memo)->tp_name);
        return NULL;
    }
    PyObject *copy = shallow_copy(self);
    if (copy == NULL) {
        return NULL;
    }
    /* Recorded first, as copy._reconstruct does, for cycles through the
     * backoff or a subclass's __dict__ or slots back to this Retry; not needed when
     * only a C strategy and plain values are copied. */
    rbc_retry_object *c = RETRY(copy);
    const rbc_retry_flavor *fl = flavor_of(st, self);
    int subclass = fl == NULL || Py_TYPE(self) != fl->type;
    int may_cycle = subclass || rbc_exact_strategy_kind(&st->strategies, c->backoff) < 0
                    || (!PyLong_CheckExact(c->retries) && !PyBool_Check(c->retries))
                    || (c->is_retryable != NULL && !is_atomic_callable(c->is_retryable));
    if (memo != NULL && may_cycle) {
        PyObject *key = PyLong_FromVoidPtr(self);
        int status = key == NULL ? -1 : PyDict_SetItem(memo, key, copy);
        Py_XDECREF(key);
        if (status < 0) {
            goto error;
        }
    }
    PyObject *backoff = deepcopy_field(st, c->backoff, memo);
    if (backoff == NULL) {
        goto error;
    }
    Py_SETREF(c->backoff, backoff);
    if (!PyLong_CheckExact(c->retries) && !PyBool_Check(c->retries)) {
        /* The copy's own value, which its __deepcopy__ chose. */
        PyObject *retries = deepcopy_field(st, c->retries, memo);
        long long value;
        if (retries == NULL || check_retries("__deepcopy__", "_retries", retries, &value) < 0) {
            Py_XDECREF(retries);
            goto error;
        }
        store_retries_value(c, retries, value);
        Py_DECREF(retries);
    }
    if (!all_classes(c->supported_errors)) {
        PyObject *errors = deepcopy_field(st, c->supported_errors, memo);
        if (errors == NULL) {
            goto error;
        }
        set_errors(c, errors);
    }
    if (c->is_retryable != NULL) {
        /* As redis-py's __dict__ is deep-copied: a function stays itself,
         * a bound method or callable object is copied. */
        PyObject *checker = deepcopy_field(st, c->is_retryable, memo);
        if (checker == NULL) {
            goto error;
        }
        Py_SETREF(c->is_retryable, checker);
    }
    /* copy_subclass_state consumes copy, on error too. */
    return copy_subclass_state(self, copy, st, memo != NULL ? memo : Py_None);
error:
    Py_DECREF(copy);
    return NULL;
}

static int
is_default_errors(rbc_state *st, PyObject *self)
{
    const rbc_retry_flavor *fl = flavor_of(st, self);
    return fl != NULL && RETRY(self)->supported_errors == fl->default_errors;
}

/* (copyreg.__newobj__, (type,), state): __new__ then __setstate__, so a
 * subclass with another __init__ signature pickles too.  The default
 * supported_errors, which __new__ gives, are left out of the state: pickle
 * protocols 0-2 would store socket.timeout (builtins.TimeoutError) as
 * OSError, for Python 2. */
/* _backoff, _retries, _supported_errors, _is_retryable and the extras. */
#define REDUCE_ITEMS (4 + RBC_EXTRA_COUNT)

PyObject *
rbc_retry_reduce(PyObject *self, PyObject *unused)
{
    rbc_state *st = rbc_state_of(self);
    if (st == NULL) {
        return NULL;
    }
    rbc_retry_core_state *cs = core_of(st);
    PyObject *state = PyDict_New();
    if (state == NULL) {
        return NULL;
    }
    PyObject *dict = NULL;
    if (Py_TYPE(self)->tp_dictoffset != 0
        && rbc_get_optional_attr(self, st->common.str_dict, &dict) < 0) {
        goto error;
    }
    if (dict != NULL) {
        int status = PyDict_Update(state, dict);
        Py_DECREF(dict);
        if (status < 0) {
            goto error;
        }
    }
    if (rbc_slots_to_state(&st->slots, self, state) < 0) {
        goto error;
    }
    /* Every field taken (owned) before any is stored: storing into a dict
     * that holds a subclass's keys may run their __eq__, which may assign
     * the fields or free the extras block. */
    rbc_retry_object *me = RETRY(self);
    PyObject *keys[REDUCE_ITEMS], *values[REDUCE_ITEMS];
    int count = 0;
    keys[count] = st->common.str_backoff;
    values[count++] = field_or_none(me->backoff);
    keys[count] = cs->str_retries;
    values[count++] = Py_NewRef(me->retries != NULL ? me->retries : st->common.int_zero);
    if (me->supported_errors != NULL && !is_default_errors(st, self)) {
        keys[count] = cs->str_supported_errors;
        values[count++] = Py_NewRef(me->supported_errors);
    }
    if (me->is_retryable != NULL) {
        keys[count] = cs->str_is_retryable;
        values[count++] = Py_NewRef(me->is_retryable);
    }
    count += rbc_retry_extras_items(&st->extras, me->extras, keys + count, values + count);
    int status = 0;
    for (int i = 0; i < count && status == 0; i++) {
        status = PyDict_SetItem(state, keys[i], values[i]);
    }
    for (int i = 0; i < count; i++) {
        Py_DECREF(values[i]);
    }
    if (status < 0) {
        goto error;
    }
    return Py_BuildValue("O(O)N", st->common.copyreg_newobj, (PyObject *)Py_TYPE(self), state);
error:
    Py_DECREF(state);
    return NULL;
}

PyObject *
rbc_retry_setstate(PyObject *self, PyObject *state)
{
    if (!PyDict_Check(state)) {
        PyErr_Format(PyExc_TypeError, "__setstate__() argument must be a dict, not %.200s",
                     Py_TYPE(state)->tp_name);
        return NULL;
    }
    PyObject *items = PyDict_Items(state); /* setattr may run code that mutates it */
    if (items == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (PyObject_SetAttr(self, PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1)) < 0) {
            Py_DECREF(items);
            return NULL;
        }
    }
    Py_DECREF(items);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------- */
/* ==, hash, repr                                                          */

/* frozenset(self._supported_errors), built once per tuple. */
static PyObject *
errors_set_of(const rbc_retry_flavor *fl, rbc_retry_object *self)
{
    if (self->errors_set != NULL) {
        return Py_NewRef(self->errors_set);
    }
    if (self->supported_errors == NULL) {
        return PyFrozenSet_New(NULL);
    }
    if (self->supported_errors == fl->default_errors) {
        self->errors_set = Py_NewRef(fl->default_errors_set);
        return Py_NewRef(self->errors_set);
    }
    /* Hashing the classes may run a metaclass's __hash__, which may assign
     * _supported_errors or compute this very set: the result is cached only
     * if it still describes the tuple and nothing cached one meanwhile. */
    PyObject *errors = Py_NewRef(self->supported_errors);
    PyObject *set = PyFrozenSet_New(errors);
    if (set != NULL && self->errors_set == NULL && self->supported_errors == errors) {
        self->errors_set = Py_NewRef(set);
    }
    Py_DECREF(errors);
    return set;
}

#define EQ_FIELDS 4

/* Field `i` of `other` (_backoff, _retries, _supported_errors,
 * _is_retryable), read when redis-py's `and` reaches it: direct for our
 * objects, getattr for redis-py's, whose Retry has no _is_retryable before
 * 8.2: None then.  A new reference, or NULL. */
static PyObject *
other_field(rbc_state *st, const rbc_retry_flavor *fl, PyObject *other, int i)
{
    if (Py_IS_TYPE(other, fl->type)) {
        rbc_retry_object *them = RETRY(other);
        PyObject *fields[EQ_FIELDS] = {them->backoff, them->retries, them->supported_errors,
                                       them->is_retryable};
        return field_or_none(fields[i]);
    }
    rbc_retry_core_state *cs = core_of(st);
    PyObject *names[EQ_FIELDS] = {st->common.str_backoff, cs->str_retries,
                                  cs->str_supported_errors, cs->str_is_retryable};
    if (i < EQ_FIELDS - 1) {
        return PyObject_GetAttr(other, names[i]);
    }
    PyObject *value;
    if (rbc_get_optional_attr(other, names[i], &value) < 0) {
        return NULL;
    }
    return value != NULL ? value : Py_NewRef(Py_None);
}

/* set(mine) == set(theirs). */
static PyObject *
same_error_sets(const rbc_retry_flavor *fl, rbc_retry_object *self, PyObject *theirs)
{
    if (self->supported_errors == theirs) {
        Py_RETURN_TRUE; /* hashable classes: set(t) == set(t) */
    }
    PyObject *mine = errors_set_of(fl, self);
    if (mine == NULL) {
        return NULL;
    }
    PyObject *their_set = PySet_New(theirs);
    if (their_set == NULL) {
        Py_DECREF(mine);
        return NULL;
    }
    PyObject *result = PyObject_RichCompare(mine, their_set, Py_EQ);
    Py_DECREF(mine);
    Py_DECREF(their_set);
    return result;
}

/* `result and <the extras of self and other are equal>` (other NULL: a
 * redis-py Retry, which has none).  Steals result; returns a new
 * reference, or NULL. */
static PyObject *
and_same_extras(PyObject *result, rbc_retry_object *self, rbc_retry_object *other)
{
    int truth = PyObject_IsTrue(result);
    if (truth == 0) {
        return result; /* falsy: `and` stops at it */
    }
    Py_DECREF(result);
    if (truth < 0) {
        return NULL;
    }
    /* Read now: the truth test may have run code that changed them. */
    int same = rbc_retry_extras_equal(self->extras, other != NULL ? other->extras : NULL);
    return same < 0 ? NULL : PyBool_FromLong(same);
}

/* redis-py: `a._backoff == b._backoff and a._retries == b._retries and
 * set(a._supported_errors) == set(b._supported_errors) and
 * a._is_retryable == b._is_retryable` (8.2; 8.0 and 8.1 have no checker:
 * theirs is None), with `and`'s value. */
static PyObject *
retry_equal(rbc_state *st, const rbc_retry_flavor *fl, rbc_retry_object *self, PyObject *other)
{
    PyObject *result = NULL;
    /* Each pair read just before it is compared, as redis-py's `and`
     * does: comparing one pair may assign the fields of the next. */
    for (int i = 0; i < EQ_FIELDS; i++) {
        PyObject *theirs = other_field(st, fl, other, i);
        if (theirs == NULL) {
            return NULL;
        }
        if (i == 2) {
            result = same_error_sets(fl, self, theirs);
        }
        else {
            PyObject *own[EQ_FIELDS] = {self->backoff, self->retries, NULL, self->is_retryable};
            PyObject *mine = field_or_none(own[i]);
            /* Two Nones (no checkers): equal, without a call. */
            result = mine == Py_None && theirs == Py_None
                         ? Py_NewRef(Py_True)
                         : PyObject_RichCompare(mine, theirs, Py_EQ);
            Py_DECREF(mine);
        }
        Py_DECREF(theirs);
        if (result == NULL || i == EQ_FIELDS - 1) {
            break;
        }
        int truth = PyObject_IsTrue(result);
        if (truth <= 0) {
            if (truth < 0) {
                Py_CLEAR(result);
            }
            return result; /* falsy: `and` stops at it */
        }
        Py_DECREF(result);
    }
    rbc_retry_object *ours = PyObject_TypeCheck(other, fl->type) ? RETRY(other) : NULL;
    if (result != NULL && (self->extras != NULL || (ours != NULL && ours->extras != NULL))) {
        /* The extras too, when either side has some (redis-py's Retry has
         * none); without, the value of redis-py's `and` stays. */
        result = and_same_extras(result, self, ours);
    }
    return result;
}

PyObject *
rbc_retry_richcompare(const rbc_retry_flavor *fl, PyObject *self, PyObject *other, int op)
{
    if (op != Py_EQ && op != Py_NE) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    rbc_state *st = rbc_state_of(self);
    if (st == NULL) {
        return NULL;
    }
    int family = PyObject_TypeCheck(other, fl->type) ? 1 : PyObject_IsInstance(other, fl->family);
    if (family < 0) {
        return NULL;
    }
    if (!family) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *result = retry_equal(st, fl, RETRY(self), other);
    if (result == NULL || op == Py_EQ) {
        return result;
    }
    /* object.__ne__: the negation of __eq__. */
    int truth = PyObject_IsTrue(result);
    Py_DECREF(result);
    return truth < 0 ? NULL : PyBool_FromLong(!truth);
}

Py_hash_t
rbc_retry_hash(const rbc_retry_flavor *fl, PyObject *self)
{
    rbc_retry_object *me = RETRY(self);
    PyObject *backoff = field_or_none(me->backoff);
    PyObject *retries = field_or_none(me->retries);
    Py_hash_t lanes[3];
    lanes[0] = PyObject_Hash(backoff);
    lanes[1] = lanes[0] == -1 ? -1 : PyObject_Hash(retries);
    Py_DECREF(backoff);
    Py_DECREF(retries);
    if (lanes[1] == -1) {
        return -1;
    }
    PyObject *errors = errors_set_of(fl, me);
    if (errors == NULL) {
        return -1;
    }
    lanes[2] = PyObject_Hash(errors);
    Py_DECREF(errors);
    if (lanes[2] == -1) {
        return -1;
    }
    return rbc_combine_hashes(lanes, 3);
}

/* ", is_retryable=<its repr>" when a checker is set, else "". */
static PyObject *
checker_repr(rbc_retry_object *self)
{
    if (self->is_retryable == NULL) {
        return PyUnicode_FromString("");
    }
    PyObject *checker = Py_NewRef(self->is_retryable); /* its __repr__ may reset it */
    PyObject *text = PyUnicode_FromFormat(", is_retryable=%R", checker);
    Py_DECREF(checker);
    return text;
}

PyObject *
rbc_retry_repr(PyObject *self)
{
    const char *name = strrchr(Py_TYPE(self)->tp_name, '.');
    name = name != NULL ? name + 1 : Py_TYPE(self)->tp_name;
    rbc_retry_object *me = RETRY(self);
    PyObject *fields[3] = {field_or_none(me->backoff), field_or_none(me->retries),
                           field_or_none(me->supported_errors)};
    PyObject *checker = checker_repr(me);
    PyObject *extras = checker == NULL ? NULL : rbc_retry_extras_repr(me->extras);
    PyObject *repr = extras == NULL ? NULL
                                    : PyUnicode_FromFormat("%s(%R, %R, supported_errors=%R%U%U)",
                                                           name, fields[0], fields[1],
                                                           fields[2], checker, extras);
    Py_XDECREF(checker);
    Py_XDECREF(extras);
    for (int i = 0; i < 3; i++) {
        Py_DECREF(fields[i]);
    }
    return repr;
}

/* ---------------------------------------------------------------------- */
/* call_with_retry steps                                                   */

int
rbc_retry_reset_backoff_slow(rbc_state *st, rbc_retry_object *self)
{
    /* A C strategy's reset runs no Python code: the field can be borrowed,
     * and only DecorrelatedJitterBackoff has state to reset. */
    PyObject *backoff = self->backoff != NULL ? self->backoff : Py_None;
    int kind = rbc_unpatched_strategy_kind(&st->strategies, backoff);
    if (kind >= 0) {
        if (kind == RBC_DECORRELATED_JITTER) {
            rbc_strategy_reset(st, backoff, kind);
        }
        return 0;
    }
    Py_INCREF(backoff);
    PyObject *result = PyObject_CallMethodNoArgs(backoff, st->strategies.str_reset);
    Py_DECREF(backoff);
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

int
rbc_retry_catches(rbc_retry_object *self, const rbc_call_extras *call, PyObject *error)
{
    PyObject *errors = self->supported_errors;
    int caught = errors != NULL && PyErr_GivenExceptionMatches(error, errors);
    rbc_extras_attempt_failed(rbc_retry_call_extras(self, call), caught);
    return caught;
}

int
rbc_retry_own_checker_allows(rbc_retry_object *self, PyObject *error)
{
    PyObject *checker = self->is_retryable;
    if (checker == NULL) {
        return 1;
    }
    Py_INCREF(checker); /* it may replace itself */
    PyObject *verdict = PyObject_CallOneArg(checker, error);
    Py_DECREF(checker);
    if (verdict == NULL) {
        return -1;
    }
    int truth = PyObject_IsTrue(verdict);
    Py_DECREF(verdict);
    return truth;
}

int
rbc_retry_call_checker_allows(rbc_state *st, rbc_retry_object *self, rbc_call_extras *call,
                              PyObject *is_retryable, PyObject *error)
{
    if (is_retryable == NULL || is_retryable == Py_None) {
        return 1;
    }
    if (!core_of(st)->checker_not_none) {
        int present = PyObject_IsTrue(is_retryable); /* redis-py 8.0, 8.1 */
        if (present <= 0) {
            return present < 0 ? -1 : 1;
        }
    }
    PyObject *verdict = PyObject_CallOneArg(is_retryable, error);
    if (verdict == NULL) {
        return -1;
    }
    int truth = PyObject_IsTrue(verdict);
    Py_DECREF(verdict);
    if (truth == 0) {
        rbc_extras_gave_up_not_retryable(rbc_retry_call_extras(self, call), call);
    }
    return truth;
}

PyObject *
rbc_retry_call_fail(PyObject *fail, PyObject *error, PyObject *failures,
                    PyObject *with_failure_count)
{
    int counted = with_failure_count == NULL ? 0 : PyObject_IsTrue(with_failure_count);
    /* Checked here too: the coroutine design meets fail first here, as
     * redis-py's coroutine does (the other paths checked it at the call). */
    if (counted < 0 || rbc_retry_check_callable(fail, "fail") < 0) {
        return NULL;
    }
    PyObject *args[2] = {error, failures};
    return PyObject_Vectorcall(fail, args, counted ? 2 : 1, NULL);
}

int
rbc_retry_exhausted(rbc_retry_object *self, rbc_call_extras *call, long long failures)
{
    return rbc_extras_refuse_retry(rbc_retry_call_extras(self, call), call,
                                   self->retries_value >= 0 && failures > self->retries_value);
}

/* `delay > 0`, without the Python comparison for floats and ints. */
static int
positive(rbc_state *st, PyObject *delay)
{
    if (PyFloat_CheckExact(delay)) {
        return PyFloat_AS_DOUBLE(delay) > 0.0;
    }
    long long small;
    if (PyLong_CheckExact(delay) && rbc_small_int_value(delay, &small)) {
        return small > 0;
    }
    return PyObject_RichCompareBool(delay, st->common.int_zero, Py_GT);
}

PyObject *
rbc_retry_next_delay(rbc_state *st, rbc_retry_object *self, PyObject *failures,
                     int *should_sleep)
{
    PyObject *backoff = field_or_none(self->backoff);
    int kind = rbc_unpatched_strategy_kind(&st->strategies, backoff);
    PyObject *delay = kind >= 0
                          ? rbc_strategy_compute(st, backoff, kind, failures)
                          : PyObject_CallMethodOneArg(backoff, st->strategies.str_compute, failures);
    Py_DECREF(backoff);
    if (delay == NULL) {
        return NULL;
    }
    *should_sleep = positive(st, delay);
    if (*should_sleep < 0) {
        Py_DECREF(delay);
        return NULL;
    }
    return delay;
}
