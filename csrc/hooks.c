/* on_retry, on_give_up and RetryEvent: see hooks.h. */
#include "hooks.h"
#include "args.h"

/* on_retry or on_give_up: None, or a callable; TypeError naming the
 * parameter otherwise. */
int
rbc_hooks_check(const char *owner, const char *name, PyObject *value)
{
    if (value == Py_None || PyCallable_Check(value)) {
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be callable or None, not %.200s",
                 owner, name, Py_TYPE(value)->tp_name);
    return -1;
}

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
    return Py_XNewRef(rbc_retry_extras_field(block, which));
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

int
rbc_hooks_init(rbc_extras_state *es, PyObject *module)
{
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
    return 0;
}

void
rbc_hooks_clear(rbc_extras_state *es)
{
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
    for (int i = 0; i < RBC_GIVE_UP_COUNT; i++) {
        Py_CLEAR(es->give_up_reasons[i]);
    }
}
