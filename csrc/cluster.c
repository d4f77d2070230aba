/* The extras in redis-py's cluster command loop: see cluster.h. */
#include "cluster.h"
#include "extras.h"
#include "retry_core.h"

#include <stddef.h>       /* offsetof */
#include <structmember.h> /* PyMemberDef before 3.12 */

/* `retry` as a C Retry of either flavor, or NULL (no exception set). */
static rbc_retry_object *
c_retry(rbc_state *st, PyObject *retry)
{
    for (int flavor = 0; flavor < RBC_FLAVOR_COUNT; flavor++) {
        PyTypeObject *type = st->core.flavors[flavor].type;
        if (type != NULL && PyObject_TypeCheck(retry, type)) {
            return RETRY(retry);
        }
    }
    return NULL;
}

/* The `expected` positional arguments of `func`, the first a C Retry: the
 * Retry, or NULL with TypeError. */
static rbc_retry_object *
cluster_args(PyObject *module, Py_ssize_t nargs, Py_ssize_t expected, PyObject *retry,
             const char *func)
{
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", func, expected,
                     nargs);
        return NULL;
    }
    rbc_retry_object *self = c_retry(rbc_get_state(module), retry);
    if (self == NULL) {
        PyErr_Format(PyExc_TypeError, "%s() argument 'retry' must be a C Retry, not %.200s", func,
                     Py_TYPE(retry)->tp_name);
    }
    return self;
}

/* A non-negative real number argument's value, or -1 with an exception. */
static double
seconds_arg(PyObject *value, const char *func, const char *name)
{
    if (!PyFloat_Check(value) && !PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be a float, not %.200s", func,
                     name, Py_TYPE(value)->tp_name);
        return -1.0;
    }
    return PyFloat_AsDouble(value);
}

PyObject *
rbc_cluster_begin(PyObject *module, PyObject *retry)
{
    rbc_state *st = rbc_get_state(module);
    rbc_retry_object *self = c_retry(st, retry);
    if (self == NULL || self->extras == NULL) {
        Py_RETURN_NONE;
    }
    rbc_call_extras call;
    rbc_extras_call_begin(st, self->extras, &call);
    return PyFloat_FromDouble(call.deadline_at);
}

PyObject *
rbc_cluster_failed(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    rbc_retry_object *self = cluster_args(module, nargs, 2, nargs > 0 ? args[0] : NULL,
                                          "_cluster_failed");
    if (self == NULL) {
        return NULL;
    }
    rbc_extras_attempt_failed(self->extras, 1);
    rbc_call_extras call = {0.0, 1, RBC_GIVE_UP_NONE}; /* counted: _cluster_begin saw extras */
    int may_have_run = rbc_extras_may_have_run(&rbc_get_state(module)->extras, &self->extras,
                                               &call, args[1]);
    if (may_have_run < 0) {
        return NULL;
    }
    if (may_have_run) {
        return PyLong_FromLong(RBC_CLUSTER_GIVE_UP_MAY_HAVE_RUN);
    }
    /* The block is read after the judge, which may have changed it. */
    int refused = rbc_extras_refuse_retry(self->extras, &call, 0);
    return PyLong_FromLong(refused ? RBC_CLUSTER_GIVE_UP_BUDGET : RBC_CLUSTER_GO_ON);
}

PyObject *
rbc_cluster_delay(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    rbc_retry_object *self = cluster_args(module, nargs, 3, nargs > 0 ? args[0] : NULL,
                                          "_cluster_delay");
    if (self == NULL) {
        return NULL;
    }
    rbc_call_extras call = {0.0, 1, RBC_GIVE_UP_NONE}; /* counted: _cluster_begin saw extras */
    call.deadline_at = seconds_arg(args[1], "_cluster_delay", "deadline_at");
    if (call.deadline_at == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    double seconds = 0.0;
    if (args[2] != Py_None) {
        seconds = PyFloat_AsDouble(args[2]);
        if (seconds == -1.0 && PyErr_Occurred()) {
            return NULL;
        }
    }
    /* The next attempt starts `seconds` from now: too late when that is at
     * or past the deadline (call_with_retry's two checks, before its sleep
     * and before its attempt, in one).  The block is read after the
     * conversions, which may run Python code that changes it. */
    if (call.deadline_at != 0.0 && seconds > 0.0) {
        call.deadline_at -= seconds;
    }
    if (rbc_extras_deadline_passed(self->extras, &call)) {
        Py_RETURN_NONE;
    }
    return PyFloat_FromDouble(seconds);
}

PyObject *
rbc_cluster_retried(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    rbc_retry_object *self = cluster_args(module, nargs, 2, nargs > 0 ? args[0] : NULL,
                                          "_cluster_retried");
    if (self == NULL) {
        return NULL;
    }
    double slept = seconds_arg(args[1], "_cluster_retried", "slept");
    if (slept == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    /* The deadline was checked before the sleep (_cluster_delay). */
    rbc_call_extras no_deadline = {0.0, 1, RBC_GIVE_UP_NONE};
    rbc_extras_before_retry(self->extras, &no_deadline);
    rbc_extras_add_slept(self->extras, slept);
    Py_RETURN_NONE;
}

PyObject *
rbc_cluster_ended(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    rbc_retry_object *self = cluster_args(module, nargs, 2, nargs > 0 ? args[0] : NULL,
                                          "_cluster_ended");
    if (self == NULL) {
        return NULL;
    }
    long outcome = PyLong_Check(args[1]) ? PyLong_AsLong(args[1]) : -1;
    if (outcome == -1 && PyErr_Occurred()) {
        return NULL;
    }
    rbc_call_extras call = {0.0, 1, RBC_GIVE_UP_NONE}; /* counted: _cluster_begin saw extras */
    switch (outcome) {
    case RBC_CLUSTER_SUCCEEDED:
        rbc_extras_call_succeeded(self->extras);
        break;
    case RBC_CLUSTER_EXHAUSTED:
        rbc_extras_attempt_failed(self->extras, 1);
        rbc_extras_refuse_retry(self->extras, &call, 1);
        break;
    case RBC_CLUSTER_UNHANDLED:
        rbc_extras_attempt_failed(self->extras, 0);
        break;
    case RBC_CLUSTER_NOT_RETRYABLE:
        rbc_extras_gave_up_not_retryable(self->extras, &call);
        break;
    case RBC_CLUSTER_ABORTED:
        rbc_extras_call_aborted(self->extras);
        break;
    default:
        PyErr_Format(PyExc_ValueError, "_cluster_ended() argument 'outcome' must be 0 to %d",
                     RBC_CLUSTER_OUTCOMES - 1);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------- */
/* _ClusterCommand                                                         */

typedef struct {
    PyObject_HEAD
    PyObject *original; /* redis-py's execute_command */
    /* asyncio: the Python wrapper that runs the hooks (it awaits); NULL
     * for the sync method, which runs them itself with the two below. */
    PyObject *counting;
    PyObject *context_var; /* redis_backoff_c._cluster's command variable */
    PyObject *on_error;    /* _cluster._command_failed(client, pending, error) */
    vectorcallfunc vectorcall;
} command_object;

#define COMMAND(op) ((command_object *)(op))

/* `client`'s retry when it is a C Retry with extras (a new reference), else
 * NULL: with no exception for another retry or none (a client without a
 * `retry` attribute is left to redis-py's function, which meets it), with
 * the exception its `retry` raised otherwise. */
static PyObject *
counted_retry(rbc_state *st, PyObject *client)
{
    PyObject *retry = PyObject_GetAttr(client, st->cluster.str_retry);
    if (retry == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
        }
        return NULL;
    }
    rbc_retry_object *c = c_retry(st, retry);
    if (c == NULL || c->extras == NULL) {
        Py_DECREF(retry);
        return NULL;
    }
    return retry;
}

/* The sync command with extras, as _cluster.py's asyncio wrapper runs it:
 * the call counted, the command in the context variable (as a tuple
 * (retry, deadline_at), which the loop's hook makes a _Command of when an
 * attempt fails), redis-py's function called; a success with no failure
 * counted here, anything else handed to the Python side.  With a deadline
 * while patch() bounds the waits, the command's deadline is set for its
 * run too (enter_cluster_command), and reset whatever happens. */
static PyObject *
count_command(const rbc_state *st, command_object *me, PyObject *retry, PyObject *const *args,
              size_t nargsf, PyObject *kwnames)
{
    /* Held: the call may run code that clears this object. */
    PyObject *original = Py_NewRef(me->original);
    PyObject *var = Py_NewRef(me->context_var);
    PyObject *on_error = Py_NewRef(me->on_error);
    PyObject *pending = NULL, *token = NULL, *current = NULL, *result = NULL;
    PyObject *deadline_var = NULL, *deadline_token = NULL;
    rbc_call_extras call;
    rbc_extras_call_begin(st, RETRY(retry)->extras, &call); /* no code ran since it was read */
    if (call.deadline_at != 0.0 && st->extras.call_deadline != NULL
        && st->extras.enter_cluster_command != NULL) {
        deadline_var = Py_NewRef(st->extras.call_deadline);
        PyObject *enter = Py_NewRef(st->extras.enter_cluster_command);
        deadline_token = PyObject_Vectorcall(enter, args, PyVectorcall_NARGS(nargsf), NULL);
        Py_DECREF(enter);
        if (deadline_token == NULL) {
            goto done;
        }
    }
    PyObject *deadline_at = PyFloat_FromDouble(call.deadline_at);
    if (deadline_at == NULL) {
        goto done;
    }
    pending = PyTuple_Pack(2, retry, deadline_at);
    Py_DECREF(deadline_at);
    if (pending == NULL || (token = PyContextVar_Set(var, pending)) == NULL) {
        goto done;
    }
    result = PyObject_Vectorcall(original, args, nargsf, kwnames);
    PyObject *error = result == NULL ? rbc_exc_fetch() : NULL;
    /* Reset whatever the read gives: the variable must not outlive the
     * command in the caller's context. */
    int read = PyContextVar_Get(var, Py_None, &current);
    int reset = PyContextVar_Reset(var, token);
    if (read < 0 || reset < 0) {
        Py_CLEAR(result);
        Py_XDECREF(error);
        goto done;
    }
    if (result != NULL) {
        if (current == pending || current == Py_None || PyTuple_Check(current)) {
            /* No attempt failed (or the variable was changed under the
             * command): the success counted here, with the extras the
             * Retry has now. */
            rbc_extras_call_succeeded(RETRY(retry)->extras);
        }
        else { /* a _Command: an attempt failed, and was retried */
            PyObject *counted = PyObject_CallMethod(current, "succeeded", NULL);
            if (counted == NULL) {
                Py_CLEAR(result);
            }
            Py_XDECREF(counted);
        }
        goto done;
    }
    if (error == NULL) {
        PyErr_SetString(PyExc_SystemError, "execute_command() failed without an exception");
        goto done;
    }
    PyObject *failed[3] = {args[0], current, error};
    PyObject *to_raise = PyObject_Vectorcall(on_error, failed, 3, NULL);
    Py_DECREF(error);
    if (to_raise != NULL && !PyExceptionInstance_Check(to_raise)) {
        PyErr_Format(PyExc_TypeError, "on_error() must return an exception, not %.200s",
                     Py_TYPE(to_raise)->tp_name);
        Py_CLEAR(to_raise);
    }
    if (to_raise != NULL) {
        rbc_exc_restore(to_raise);
    }
done:
    if (deadline_token != NULL && deadline_token != Py_None) {
        /* The command's deadline must not outlive it in the caller's
         * context; the reset runs no code, and keeps the error raised. */
        PyObject *raised = rbc_exc_fetch();
        int reset = PyContextVar_Reset(deadline_var, deadline_token);
        if (raised != NULL) {
            rbc_exc_restore(raised);
        }
        else if (reset < 0) {
            Py_CLEAR(result);
        }
    }
    Py_DECREF(original);
    Py_DECREF(var);
    Py_DECREF(on_error);
    Py_XDECREF(pending);
    Py_XDECREF(token);
    Py_XDECREF(current);
    Py_XDECREF(deadline_var);
    Py_XDECREF(deadline_token);
    return result;
}

static PyObject *
command_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    command_object *me = COMMAND(callable);
    if (PyVectorcall_NARGS(nargsf) < 1) {
        PyErr_SetString(PyExc_TypeError, "execute_command() needs the client as first argument");
        return NULL;
    }
    /* NULL once the type has dropped its module, or cleared, at shutdown:
     * then redis-py's function. */
    rbc_state *st = (rbc_state *)PyType_GetModuleState(Py_TYPE(callable));
    if (st == NULL) {
        PyErr_Clear();
    }
    else if (st->cluster.str_retry == NULL) {
        st = NULL;
    }
    PyObject *retry = st != NULL ? counted_retry(st, args[0]) : NULL;
    if (retry == NULL && PyErr_Occurred()) {
        return NULL; /* the client's `retry` raised */
    }
    if (retry != NULL && me->context_var != NULL && me->original != NULL
        && me->on_error != NULL) {
        PyObject *result = count_command(st, me, retry, args, nargsf, kwnames);
        Py_DECREF(retry);
        return result;
    }
    /* Reading self.retry may have run code that cleared this object. */
    PyObject *target = retry != NULL ? me->counting : me->original;
    Py_XDECREF(retry);
    if (target == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_ClusterCommand has been cleared");
        return NULL;
    }
    Py_INCREF(target);
    PyObject *result = PyObject_Vectorcall(target, args, nargsf, kwnames);
    Py_DECREF(target);
    return result;
}

/* _ClusterCommand(original, counting, context_var, on_error): asyncio gives
 * `counting` (the others None), sync `context_var` and `on_error`. */
static PyObject *
command_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *original, *counting, *var, *on_error;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "_ClusterCommand() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "_ClusterCommand", 4, 4, &original, &counting, &var,
                           &on_error)) {
        return NULL;
    }
    int in_c = counting == Py_None;
    if (!PyCallable_Check(original) || (in_c ? !PyContextVar_CheckExact(var) || !PyCallable_Check(on_error) : !PyCallable_Check(counting) || var != Py_None || on_error != Py_None)) {
        PyErr_SetString(PyExc_TypeError,
                        "_ClusterCommand(original, counting, context_var, on_error): a callable, "
                        "and either a callable and None, None or None, a ContextVar, a callable");
        return NULL;
    }
    command_object *self = (command_object *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->original = Py_NewRef(original);
    self->counting = in_c ? NULL : Py_NewRef(counting);
    self->context_var = in_c ? Py_NewRef(var) : NULL;
    self->on_error = in_c ? Py_NewRef(on_error) : NULL;
    self->vectorcall = command_vectorcall;
    return (PyObject *)self;
}

static int
command_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(COMMAND(self)->original);
    Py_VISIT(COMMAND(self)->counting);
    Py_VISIT(COMMAND(self)->context_var);
    Py_VISIT(COMMAND(self)->on_error);
    return 0;
}

static int
command_clear(PyObject *self)
{
    Py_CLEAR(COMMAND(self)->original);
    Py_CLEAR(COMMAND(self)->counting);
    Py_CLEAR(COMMAND(self)->context_var);
    Py_CLEAR(COMMAND(self)->on_error);
    return 0;
}

static void
command_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    (void)command_clear(self);
    type->tp_free(self);
    Py_DECREF(type);
}

/* __wrapped__ (and _redis_backoff_c_wraps, by which patch() knows its own
 * wrapper) is redis-py's function; __name__, __qualname__, __doc__ and
 * __module__ are its own, as functools.wraps gives a Python wrapper. */
static PyObject *
command_original(PyObject *self, void *closure)
{
    return rbc_wrapped_attr(COMMAND(self)->original, (const char *)closure);
}

/* _is_coroutine_marker: inspect.iscoroutinefunction() (3.12+) is true
 * for the asyncio method, as for the `async def` it stands for. */
static PyObject *
command_coroutine_marker(PyObject *self, void *closure)
{
    if (COMMAND(self)->counting == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_is_coroutine_marker");
        return NULL;
    }
    return rbc_coroutine_mark();
}

static PyGetSetDef command_getset[] = {
    {"_is_coroutine_marker", command_coroutine_marker, NULL, NULL, NULL},
    {"__wrapped__", command_original, NULL, "redis-py's execute_command", NULL},
    {"_redis_backoff_c_wraps", command_original, NULL, "redis-py's execute_command", NULL},
    {"__name__", command_original, NULL, NULL, "__name__"},
    {"__qualname__", command_original, NULL, NULL, "__qualname__"},
    {"__doc__", command_original, NULL, NULL, "__doc__"},
    {"__module__", command_original, NULL, NULL, "__module__"},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef command_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(command_object, vectorcall), READONLY, NULL},
    {NULL},
};

static PyType_Slot command_slots[] = {
    {Py_tp_new, command_new},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, rbc_function_descr_get},
    {Py_tp_getset, command_getset},
    {Py_tp_members, command_members},
    {Py_tp_traverse, command_traverse},
    {Py_tp_clear, command_clear},
    {Py_tp_dealloc, command_dealloc},
    {0, NULL},
};

static PyType_Spec command_spec = {
    .name = "redis_backoff_c._speedups._ClusterCommand",
    .basicsize = sizeof(command_object),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
             | Py_TPFLAGS_METHOD_DESCRIPTOR | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = command_slots,
};

int
rbc_cluster_init(rbc_state *st, PyObject *module)
{
    rbc_cluster_state *cs = &st->cluster;
    cs->str_retry = PyUnicode_InternFromString("retry");
    if (cs->str_retry == NULL) {
        return -1;
    }
    cs->Command_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &command_spec, NULL);
    if (cs->Command_type == NULL) {
        return -1;
    }
    return PyModule_AddObjectRef(module, "_ClusterCommand", (PyObject *)cs->Command_type);
}

int
rbc_cluster_traverse(rbc_cluster_state *cs, visitproc visit, void *arg)
{
    Py_VISIT(cs->Command_type);
    return 0;
}

void
rbc_cluster_clear(rbc_cluster_state *cs)
{
    Py_CLEAR(cs->Command_type);
    Py_CLEAR(cs->str_retry);
}
