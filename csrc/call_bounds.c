/* The deadline's bounds on redis-py's sync waits, in C: see call_bounds.h. */
#include "call_bounds.h"
#include "compat.h"
#include "deadline.h"
#include "retry_core.h"

#include <math.h>         /* isinf */
#include <stddef.h>       /* offsetof */
#include <structmember.h> /* PyMemberDef before 3.12 */

/* redis_backoff_c._call_deadline's _LEAST, _DRIFT and _NEVER_WAITS (the
 * module's own values; tests/contract/test_extras.py compares them with
 * _speedups._BOUNDS_CONSTANTS). */
#define LEAST_TIMEOUT 1e-6
#define DRIFT 0.005
#define NEVER_WAITS (64 * 1024)

typedef struct {
    PyObject_HEAD
    PyObject *original; /* redis-py's function */
    PyObject *slow;     /* _call_deadline's Python wrapper of it */
    PyObject *extra;    /* entry: frozenset of blocking names; read: on_cut; else NULL */
    int kind;           /* RBC_BOUND_* */
    vectorcallfunc vectorcall;
} bound_object;

#define BOUND(op) ((bound_object *)(op))

/* `target` called with the call's arguments, held for the call: the call
 * may run code that clears the object it was read from. */
static PyObject *
call_held(PyObject *target, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (target == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_CallBound has been cleared");
        return NULL;
    }
    Py_INCREF(target);
    PyObject *result = PyObject_Vectorcall(target, args, nargsf, kwnames);
    Py_DECREF(target);
    return result;
}

/* What the variable holds for the command running in this context: 1 and
 * *at (monotonic seconds), 0 when nothing is set (or the bounds are not
 * installed), 2 when it holds no float (left to the Python wrapper), -1
 * with an exception.  The lookup runs no Python code. */
static int
context_deadline(const rbc_state *st, double *at)
{
    PyObject *var = st->extras.call_deadline, *value = NULL;
    if (var == NULL) {
        return 0;
    }
    if (PyContextVar_Get(var, NULL, &value) < 0) {
        return -1;
    }
    if (value == NULL) {
        return 0;
    }
    int found = PyFloat_CheckExact(value) ? 1 : 2;
    if (found == 1) {
        *at = PyFloat_AS_DOUBLE(value);
    }
    Py_DECREF(value); /* a float: runs no code */
    return found;
}

/* ---------------------------------------------------------------------- */
/* The entry: a client's command                                          */

/* The deadline of the Retry a client's command runs under, as
 * _call_deadline._client_retry finds it (its held connection's, else the
 * one its pool gives each connection): 1 and *seconds, 0 for none, 2 when
 * it is no exact C Retry or the client is unusual (the Python wrapper
 * reads it then), -1 with an exception. */
static int
client_deadline(const rbc_state *st, PyObject *client, double *seconds)
{
    PyObject *const *names = st->bounds.names;
    PyObject *connection = NULL, *pool = NULL, *kwargs = NULL, *retry = NULL;
    int found = rbc_get_optional_attr(client, names[RBC_BOUNDS_CONNECTION], &connection);
    if (found <= 0) {
        found = found < 0 ? -1 : 2;
        goto done;
    }
    if (connection != Py_None) {
        found = rbc_get_optional_attr(connection, names[RBC_BOUNDS_RETRY], &retry);
    }
    else if ((found = rbc_get_optional_attr(client, names[RBC_BOUNDS_CONNECTION_POOL], &pool)) > 0
             && (found = rbc_get_optional_attr(pool, names[RBC_BOUNDS_CONNECTION_KWARGS], &kwargs))
                    > 0) {
        if (!PyDict_CheckExact(kwargs)) {
            found = 2;
            goto done;
        }
        retry = PyDict_GetItemWithError(kwargs, names[RBC_BOUNDS_RETRY]); /* a str key: no code */
        found = retry != NULL ? 1 : PyErr_Occurred() ? -1
                                                     : 0;
        Py_XINCREF(retry);
    }
    if (found <= 0) {
        found = found < 0 ? -1 : 2;
        goto done;
    }
    if (retry == Py_None) {
        found = 0;
        goto done;
    }
    if (!Py_IS_TYPE(retry, st->core.flavors[RBC_FLAVOR_SYNC].type)
        && !Py_IS_TYPE(retry, st->core.flavors[RBC_FLAVOR_ASYNC].type)) {
        found = 2; /* another Retry: its `deadline` is read in Python */
        goto done;
    }
    rbc_retry_extras *extras = RETRY(retry)->extras;
    found = extras != NULL && extras->deadline != NULL;
    if (found) {
        *seconds = extras->deadline_seconds;
    }
done:
    Py_XDECREF(connection);
    Py_XDECREF(pool);
    Py_XDECREF(kwargs);
    Py_XDECREF(retry);
    return found;
}

/* 1 when the command (its name the first argument) cannot block: an
 * upper-case ASCII str (as redis-py's methods give it) that names none of
 * `blocking`; 0 when the Python wrapper must read its wait. */
static int
blocks_not(PyObject *blocking, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || blocking == NULL) {
        return 0;
    }
    PyObject *name = args[1];
    if (!PyUnicode_CheckExact(name) || !PyUnicode_IS_ASCII(name)) {
        return 0;
    }
    const Py_UCS1 *chars = PyUnicode_1BYTE_DATA(name);
    for (Py_ssize_t i = 0, n = PyUnicode_GET_LENGTH(name); i < n; i++) {
        if (chars[i] >= 'a' && chars[i] <= 'z') {
            return 0;
        }
    }
    int blocks = PySet_Contains(blocking, name); /* an exact str's hash: no code */
    if (blocks < 0) {
        PyErr_Clear(); /* (no memory) the Python wrapper's */
    }
    return blocks == 0;
}

/* `target` called while the variable holds `at` (the earlier of it and
 * what it held), reset after whatever happens. */
static PyObject *
call_by(const rbc_state *st, PyObject *target, double at, PyObject *const *args, size_t nargsf,
        PyObject *kwnames)
{
    PyObject *var = Py_NewRef(st->extras.call_deadline);
    PyObject *outer = NULL, *at_object = NULL, *token = NULL, *result = NULL;
    if (PyContextVar_Get(var, NULL, &outer) < 0) {
        goto done;
    }
    if (outer != NULL && PyFloat_CheckExact(outer) && PyFloat_AS_DOUBLE(outer) < at) {
        at = PyFloat_AS_DOUBLE(outer);
    }
    if ((at_object = PyFloat_FromDouble(at)) == NULL
        || (token = PyContextVar_Set(var, at_object)) == NULL) {
        goto done;
    }
    result = call_held(target, args, nargsf, kwnames);
    PyObject *error = result == NULL ? rbc_exc_fetch() : NULL;
    if (PyContextVar_Reset(var, token) < 0) {
        if (error == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyErr_Clear(); /* the call's own error is the one to see */
    }
    if (error != NULL) {
        rbc_exc_restore(error);
    }
done:
    Py_XDECREF(outer);
    Py_XDECREF(at_object);
    Py_XDECREF(token);
    Py_DECREF(var);
    return result;
}

static PyObject *
entry_call(const rbc_state *st, bound_object *me, PyObject *const *args, size_t nargsf,
           PyObject *kwnames)
{
    double seconds = 0.0;
    if (st->extras.call_deadline == NULL) {
        return call_held(me->original, args, nargsf, kwnames);
    }
    int found = client_deadline(st, args[0], &seconds);
    if (found < 0) {
        return NULL;
    }
    if (found == 0) {
        return call_held(me->original, args, nargsf, kwnames);
    }
    if (found == 2 || me->kind == RBC_BOUND_ASYNC_ENTRY
        || !blocks_not(me->extra, args, PyVectorcall_NARGS(nargsf))
        || st->extras.call_deadline == NULL) { /* reading the client ran code */
        return call_held(me->slow, args, nargsf, kwnames);
    }
    double at = rbc_monotonic_now() + seconds;
    if (isinf(at)) { /* as _enter: a deadline that never comes sets none */
        return call_held(me->original, args, nargsf, kwnames);
    }
    return call_by(st, me->original, at, args, nargsf, kwnames);
}

/* ---------------------------------------------------------------------- */
/* The connection's waits                                                 */

/* The connection's socket (a new reference; None when not connected): 1,
 * 0 when it has no `_sock` (the Python wrapper's case), -1 on error. */
static int
connection_sock(const rbc_state *st, PyObject *connection, PyObject **sock)
{
    return rbc_get_optional_attr(connection, st->bounds.names[RBC_BOUNDS_SOCK], sock);
}

/* Whether a deadline lowered the socket's timeout (the connection's
 * __dict__ holds the socket under _redis_backoff_c_lowered): 1 yes, 0 no,
 * -1 with an exception.  The dict is held: a lookup by an exact str runs
 * no code. */
static int
lowered(const rbc_state *st, PyObject *connection)
{
    PyObject *dict = PyObject_GenericGetDict(connection, NULL);
    if (dict == NULL) {
        return -1;
    }
    int found = PyDict_Contains(dict, st->bounds.names[RBC_BOUNDS_LOWERED]);
    Py_DECREF(dict);
    return found;
}

/* No deadline: redis-py's wait, unless a deadline lowered this socket's
 * timeout (the Python wrapper puts its own back first). */
static PyObject *
wait_unbounded(const rbc_state *st, bound_object *me, PyObject *const *args, size_t nargsf,
               PyObject *kwnames)
{
    int was_lowered = lowered(st, args[0]);
    if (was_lowered < 0) {
        return NULL;
    }
    return call_held(was_lowered ? me->slow : me->original, args, nargsf, kwnames);
}

static PyObject *
connect_call(const rbc_state *st, bound_object *me, PyObject *const *args, size_t nargsf,
             PyObject *kwnames)
{
    double at = 0.0;
    PyObject *sock = NULL;
    int found = context_deadline(st, &at);
    if (found <= 0) {
        return found < 0 ? NULL : call_held(me->original, args, nargsf, kwnames);
    }
    if (found == 1 && (found = connection_sock(st, args[0], &sock)) < 0) {
        return NULL;
    }
    int connected = found == 1 && sock != Py_None;
    Py_XDECREF(sock);
    return call_held(connected ? me->original : me->slow, args, nargsf, kwnames);
}

/* asyncio: redis-py's coroutine function without a deadline, the Python
 * wrapper's with one. */
static PyObject *
async_wait_call(const rbc_state *st, bound_object *me, PyObject *const *args, size_t nargsf,
                PyObject *kwnames)
{
    double at = 0.0;
    int found = context_deadline(st, &at);
    if (found < 0) {
        return NULL;
    }
    return call_held(found == 0 ? me->original : me->slow, args, nargsf, kwnames);
}

/* The bytes a packed command holds (bytes, or a list or tuple of bytes and
 * one-dimensional byte memoryviews, as redis-py packs), or -1 for anything
 * else (the Python wrapper sizes it). */
static Py_ssize_t
packed_size(PyObject *command)
{
    if (PyBytes_CheckExact(command)) {
        return PyBytes_GET_SIZE(command);
    }
    if (!PyList_CheckExact(command) && !PyTuple_CheckExact(command)) {
        return -1;
    }
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0, n = PySequence_Fast_GET_SIZE(command); i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(command, i);
        if (PyBytes_CheckExact(item)) {
            size += PyBytes_GET_SIZE(item);
            continue;
        }
        /* redis-py packs a large value as a memoryview of its bytes. */
        if (!PyMemoryView_Check(item)) {
            return -1;
        }
        const Py_buffer *view = PyMemoryView_GET_BUFFER(item);
        if (view->ndim != 1 || view->itemsize != 1) {
            return -1;
        }
        size += view->len;
    }
    return size;
}

static PyObject *
send_call(const rbc_state *st, bound_object *me, PyObject *const *args, size_t nargsf,
          PyObject *kwnames)
{
    double at = 0.0;
    PyObject *sock = NULL;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int found = context_deadline(st, &at);
    if (found <= 0) {
        return found < 0 ? NULL : wait_unbounded(st, me, args, nargsf, kwnames);
    }
    /* A deadline passed (cut before the write), an unusual call or
     * command, or a write that may wait: the Python wrapper's. */
    Py_ssize_t size = found == 1 && nargs >= 2 ? packed_size(args[1]) : -1;
    int plain = size >= 0 && size < NEVER_WAITS && at > rbc_monotonic_now();
    if (plain && (found = connection_sock(st, args[0], &sock)) < 0) {
        return NULL;
    }
    plain = plain && found == 1 && sock != Py_None;
    Py_XDECREF(sock);
    return call_held(plain ? me->original : me->slow, args, nargsf, kwnames);
}

/* Whether the socket's timeout, as it is now (*current, a new reference;
 * *current_seconds), is the connection's own and already within `left`:
 * no deadline lowered it (the connection's __dict__ holds no note; redis-py
 * sets the socket's timeout to the connection's own and puts it back
 * after each pending-data check), and it waits no longer than the time
 * left, as redis-py 8.2's default of 5 s does under a deadline of 10.
 * Then there is nothing to do, and the connection's socket_timeout, a
 * Python property (about 500 instructions a read), is not read.  1 yes,
 * 0 no, -1 with an exception. */
static int
socket_within(const rbc_state *st, PyObject *connection, PyObject *sock, double left,
              PyObject **current, double *current_seconds)
{
    PyObject *const *names = st->bounds.names;
    PyObject *dict = PyObject_GenericGetDict(connection, NULL);
    if (dict == NULL) {
        return -1;
    }
    int noted = PyDict_Contains(dict, names[RBC_BOUNDS_LOWERED]);
    Py_DECREF(dict);
    if (noted < 0) {
        return -1;
    }
    if ((*current = PyObject_CallMethodNoArgs(sock, names[RBC_BOUNDS_GETTIMEOUT])) == NULL
        || (*current != Py_None && (*current_seconds = PyFloat_AsDouble(*current)) == -1.0
            && PyErr_Occurred())) {
        return -1;
    }
    return !noted && *current != Py_None && *current_seconds <= left;
}

/* The socket's timeout for a wait by `at`: the lesser of the connection's
 * own and the time left, changed only when it drifted more than DRIFT
 * from it (each change is a system call); the socket noted in the
 * connection's __dict__ when lowered, the note dropped when not, as
 * _call_deadline._bound_socket does.  0 and *held set to whether the
 * socket is lowered; 1 when the connection's own timeout is no int or
 * float (nothing done: the Python wrapper's); -1 with an exception. */
static int
bound_socket(const rbc_state *st, PyObject *connection, PyObject *sock, double at, int *held)
{
    PyObject *const *names = st->bounds.names;
    PyObject *own = NULL, *current = NULL, *timeout = NULL, *dict = NULL;
    int status = -1;
    double left = at - rbc_monotonic_now(), own_seconds = 0.0, current_seconds = 0.0;
    if (left < LEAST_TIMEOUT) {
        left = LEAST_TIMEOUT;
    }
    int within = socket_within(st, connection, sock, left, &current, &current_seconds);
    if (within != 0) {
        *held = 0;
        status = within > 0 ? 0 : -1;
        goto done;
    }
    if ((own = PyObject_GetAttr(connection, names[RBC_BOUNDS_SOCKET_TIMEOUT])) == NULL) {
        goto done;
    }
    if (own != Py_None && !PyFloat_CheckExact(own) && !PyLong_CheckExact(own)) {
        status = 1;
        goto done;
    }
    if (own != Py_None && (own_seconds = PyFloat_AsDouble(own)) == -1.0 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) { /* an int past a double */
            PyErr_Clear();
            status = 1;
        }
        goto done;
    }
    *held = !(own != Py_None && own_seconds <= left);
    if (!*held && (current == Py_None || current_seconds != own_seconds)) {
        timeout = Py_NewRef(own);
    }
    else if (*held
             && (current == Py_None || current_seconds - left < -DRIFT
                 || current_seconds - left > DRIFT)
             && (timeout = PyFloat_FromDouble(left)) == NULL) {
        goto done;
    }
    if (timeout != NULL) {
        PyObject *set = PyObject_CallMethodOneArg(sock, names[RBC_BOUNDS_SETTIMEOUT], timeout);
        if (set == NULL) {
            goto done;
        }
        Py_DECREF(set);
    }
    /* Read after the calls above, which may run code. */
    if ((dict = PyObject_GenericGetDict(connection, NULL)) == NULL) {
        goto done;
    }
    if (*held) {
        status = PyDict_SetItem(dict, names[RBC_BOUNDS_LOWERED], sock);
    }
    else {
        /* Asked first: deleting a missing note raises a KeyError to
         * clear, about 700 instructions. */
        status = PyDict_Contains(dict, names[RBC_BOUNDS_LOWERED]);
        if (status > 0) {
            status = PyDict_DelItem(dict, names[RBC_BOUNDS_LOWERED]);
        }
    }
done:
    Py_XDECREF(own);
    Py_XDECREF(current);
    Py_XDECREF(timeout);
    Py_XDECREF(dict);
    return status;
}

/* redis-py's read on a socket bounded by `at`; a failed one is shown to
 * on_cut(connection, sock, error), which drops the connection when the
 * deadline cut its wait, before the error is raised again. */
static PyObject *
bounded_read(const rbc_state *st, bound_object *me, PyObject *sock, double at,
             PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    int held = 0;
    PyObject *on_cut = Py_XNewRef(me->extra); /* held: the calls may clear `me` */
    PyObject *result = NULL, *error = NULL;
    if (on_cut == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_CallBound has been cleared");
        goto done;
    }
    int status = bound_socket(st, args[0], sock, at, &held);
    if (status != 0) {
        result = status > 0 ? call_held(me->slow, args, nargsf, kwnames) : NULL;
        goto done;
    }
    result = call_held(me->original, args, nargsf, kwnames);
    if (result == NULL && held && (error = rbc_exc_fetch()) != NULL) {
        /* As in the Python wrapper's except block: the read's error is the
         * one handled, so what on_cut raises has it for its context. */
        PyObject *previous = rbc_exc_begin_handling(error);
        PyObject *cut = PyObject_CallFunctionObjArgs(on_cut, args[0], sock, error, NULL);
        rbc_exc_end_handling(previous);
        if (cut == NULL) {
            Py_DECREF(error);
            goto done;
        }
        Py_DECREF(cut);
        rbc_exc_restore(error);
    }
done:
    Py_XDECREF(on_cut);
    return result;
}

static PyObject *
read_call(const rbc_state *st, bound_object *me, PyObject *const *args, size_t nargsf,
          PyObject *kwnames)
{
    double at = 0.0;
    PyObject *sock = NULL, *result = NULL;
    int found = context_deadline(st, &at);
    if (found <= 0) {
        return found < 0 ? NULL : wait_unbounded(st, me, args, nargsf, kwnames);
    }
    if (found == 2 || (found = connection_sock(st, args[0], &sock)) == 0) {
        return call_held(me->slow, args, nargsf, kwnames);
    }
    if (found < 0) {
        return NULL;
    }
    if (sock == Py_None) {
        result = call_held(me->original, args, nargsf, kwnames);
    }
    else {
        result = bounded_read(st, me, sock, at, args, nargsf, kwnames);
    }
    Py_DECREF(sock);
    return result;
}

/* ---------------------------------------------------------------------- */
/* _CallBound                                                             */

static PyObject *
bound_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    bound_object *me = BOUND(callable);
    if (PyVectorcall_NARGS(nargsf) < 1) {
        PyErr_SetString(PyExc_TypeError, "_CallBound() needs the client or connection first");
        return NULL;
    }
    /* NULL once the type has dropped its module at shutdown: redis-py's. */
    const rbc_state *st = (const rbc_state *)PyType_GetModuleState(Py_TYPE(callable));
    if (st == NULL || st->bounds.names[0] == NULL) {
        PyErr_Clear();
        return call_held(me->original, args, nargsf, kwnames);
    }
    switch (me->kind) {
    case RBC_BOUND_ENTRY:
    case RBC_BOUND_ASYNC_ENTRY:
        return entry_call(st, me, args, nargsf, kwnames);
    case RBC_BOUND_ASYNC_WAIT:
        return async_wait_call(st, me, args, nargsf, kwnames);
    case RBC_BOUND_CONNECT:
        return connect_call(st, me, args, nargsf, kwnames);
    case RBC_BOUND_SEND:
        return send_call(st, me, args, nargsf, kwnames);
    default:
        return read_call(st, me, args, nargsf, kwnames);
    }
}

static PyObject *
bound_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *original, *slow, *extra;
    int kind;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "_CallBound() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "iOOO:_CallBound", &kind, &original, &slow, &extra)) {
        return NULL;
    }
    int extra_ok = kind == RBC_BOUND_ENTRY  ? PyFrozenSet_CheckExact(extra)
                   : kind == RBC_BOUND_READ ? PyCallable_Check(extra)
                                            : extra == Py_None;
    if (kind < 0 || kind >= RBC_BOUND_KINDS || !PyCallable_Check(original)
        || !PyCallable_Check(slow) || !extra_ok) {
        PyErr_SetString(PyExc_TypeError,
                        "_CallBound(kind, original, slow, extra): a kind in [0, 6), two "
                        "callables, and a frozenset (sync entry), a callable (sync read) "
                        "or None");
        return NULL;
    }
    bound_object *self = (bound_object *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->original = Py_NewRef(original);
    self->slow = Py_NewRef(slow);
    self->extra = extra == Py_None ? NULL : Py_NewRef(extra);
    self->kind = kind;
    self->vectorcall = bound_vectorcall;
    return (PyObject *)self;
}

static int
bound_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(BOUND(self)->original);
    Py_VISIT(BOUND(self)->slow);
    Py_VISIT(BOUND(self)->extra);
    return 0;
}

static int
bound_clear(PyObject *self)
{
    Py_CLEAR(BOUND(self)->original);
    Py_CLEAR(BOUND(self)->slow);
    Py_CLEAR(BOUND(self)->extra);
    return 0;
}

static void
bound_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    (void)bound_clear(self);
    type->tp_free(self);
    Py_DECREF(type);
}

/* __wrapped__ and _redis_backoff_c_wraps (by which patch() knows its own
 * wrapper) are redis-py's function; __name__, __qualname__, __doc__ and
 * __module__ its own, as functools.wraps gives the Python wrapper. */
static PyObject *
bound_original(PyObject *self, void *closure)
{
    return rbc_wrapped_attr(BOUND(self)->original, (const char *)closure);
}

/* _is_coroutine_marker: inspect.iscoroutinefunction() (3.12+) is true for
 * an asyncio kind, as for the `async def` it stands for. */
static PyObject *
bound_coroutine_marker(PyObject *self, void *closure)
{
    int kind = BOUND(self)->kind;
    if (kind != RBC_BOUND_ASYNC_ENTRY && kind != RBC_BOUND_ASYNC_WAIT) {
        PyErr_SetString(PyExc_AttributeError, "_is_coroutine_marker");
        return NULL;
    }
    return rbc_coroutine_mark();
}

/* _redis_backoff_c_bounds: True, the mark of the deadline's bounds. */
static PyObject *
bound_mark(PyObject *self, void *closure)
{
    Py_RETURN_TRUE;
}

static PyGetSetDef bound_getset[] = {
    {"__wrapped__", bound_original, NULL, "redis-py's function", NULL},
    {"_redis_backoff_c_wraps", bound_original, NULL, "redis-py's function", NULL},
    {"_redis_backoff_c_bounds", bound_mark, NULL, NULL, NULL},
    {"_is_coroutine_marker", bound_coroutine_marker, NULL, NULL, NULL},
    {"__name__", bound_original, NULL, NULL, "__name__"},
    {"__qualname__", bound_original, NULL, NULL, "__qualname__"},
    {"__doc__", bound_original, NULL, NULL, "__doc__"},
    {"__module__", bound_original, NULL, NULL, "__module__"},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef bound_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(bound_object, vectorcall), READONLY, NULL},
    {NULL},
};

static PyType_Slot bound_slots[] = {
    {Py_tp_new, bound_new},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, rbc_function_descr_get},
    {Py_tp_getset, bound_getset},
    {Py_tp_members, bound_members},
    {Py_tp_traverse, bound_traverse},
    {Py_tp_clear, bound_clear},
    {Py_tp_dealloc, bound_dealloc},
    {0, NULL},
};

static PyType_Spec bound_spec = {
    .name = "redis_backoff_c._speedups._CallBound",
    .basicsize = sizeof(bound_object),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
             | Py_TPFLAGS_METHOD_DESCRIPTOR | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = bound_slots,
};

int
rbc_bounds_init(rbc_state *st, PyObject *module)
{
    static const char *const names[RBC_BOUNDS_NAMES] = {
        "connection",
        "connection_pool",
        "connection_kwargs",
        "retry",
        "_sock",
        "socket_timeout",
        "gettimeout",
        "settimeout",
        "_redis_backoff_c_lowered",
    };
    rbc_bounds_state *bs = &st->bounds;
    for (int i = 0; i < RBC_BOUNDS_NAMES; i++) {
        if ((bs->names[i] = PyUnicode_InternFromString(names[i])) == NULL) {
            return -1;
        }
    }
    bs->Bound_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &bound_spec, NULL);
    if (bs->Bound_type == NULL) {
        return -1;
    }
    PyObject *constants = Py_BuildValue("(ddn)", LEAST_TIMEOUT, DRIFT, (Py_ssize_t)NEVER_WAITS);
    if (constants == NULL) {
        return -1;
    }
    int status = PyModule_AddObjectRef(module, "_BOUNDS_CONSTANTS", constants);
    Py_DECREF(constants);
    if (status < 0) {
        return -1;
    }
    return PyModule_AddObjectRef(module, "_CallBound", (PyObject *)bs->Bound_type);
}

int
rbc_bounds_traverse(rbc_bounds_state *bs, visitproc visit, void *arg)
{
    Py_VISIT(bs->Bound_type);
    return 0;
}

void
rbc_bounds_clear(rbc_bounds_state *bs)
{
    Py_CLEAR(bs->Bound_type);
    for (int i = 0; i < RBC_BOUNDS_NAMES; i++) {
        Py_CLEAR(bs->names[i]);
    }
}
