/* The awaitable of the asyncio Retry's call_with_retry: see async_call.h.
 *
 * redis-py's coroutine, for reference of the order this reproduces:
 *
 *     self._backoff.reset()
 *     failures = 0
 *     while True:
 *         try:
 *             return await do()                        # CALL_AWAIT_DO
 *         except self._supported_errors as error:
 *             if self._is_retryable is not None and not self._is_retryable(error):
 *                 await fail(error) / fail(error, failures + 1) # CALL_REJECTING
 *                 raise
 *             if is_retryable and not is_retryable(error):  # 8.2: is not None
 *                 raise
 *             failures += 1
 *             await fail(error) / fail(error, failures) # CALL_AWAIT_FAIL
 *             if self._retries >= 0 and failures > self._retries:
 *                 raise error
 *             backoff = self._backoff.compute(failures)
 *             if backoff > 0:
 *                 await sleep(backoff)                 # CALL_AWAIT_SLEEP
 *
 * Each `await` is a phase in which the object holds the iterator of the
 * awaited object (`inner`) and forwards send/throw/close to it, as a
 * coroutine's `await` does.  Every time the inner iterator stops (returns
 * or raises), run() takes the next steps of the loop above, up to the next
 * await that suspends (a value to yield to the event loop) or to the end.
 *
 * Inside the `except` block (the fail and sleep phases) the error is the
 * handled exception while Python code runs on our behalf, as in redis-py's
 * coroutine frame, so that exceptions get it as __context__ and
 * sys.exc_info() sees it.  A coroutine does not push its handled exception
 * when it forwards throw() or close() to the awaited object, so neither
 * does this.
 */
#include "async_call.h"
#include "args.h"
#include "extras.h"
#include "retry_core.h"

typedef enum {
    CALL_CREATED,     /* not started: the first send runs reset() and do() */
    CALL_CAUGHT,      /* not started, do() already raised `error` (async_coro.c) */
    CALL_AWAIT_DO,    /* in `await do()` */
    CALL_AWAIT_FAIL,  /* in `await fail(...)`, handling `error` */
    CALL_REJECTING,   /* the same, the Retry's checker said no: `raise` next */
    CALL_AWAIT_SLEEP, /* in `await sleep(delay)`, handling `error` */
    CALL_DONE,        /* returned, raised or closed */
} call_phase;

typedef struct {
    PyObject_HEAD
    PyObject *retry; /* the asyncio Retry (an rbc_retry_object) */
    PyObject *do_;   /* the callables, cleared when done */
    PyObject *fail;
    PyObject *is_retryable;       /* None when not given */
    PyObject *with_failure_count; /* its truth is read at each failure */
    PyObject *inner;              /* the iterator awaited now, or NULL */
    PyObject *error;              /* the error handled in the fail/sleep phases */
    /* close() came while fail() or the sleep was awaited: the error then
     * handled, the __context__ of the coroutine design's GeneratorExit
     * (rbc_async_close_context). */
    PyObject *closed_context;
    double sleep_started; /* rbc_extras_sleep_started, for slept_seconds */
    rbc_state *state;     /* the module's: read through call_state() only */
    long long failures;
    rbc_call_extras extras; /* the call's deadline and counting, fixed when it starts */
    call_phase phase;
    char running;   /* inside send/throw/close: re-entry is an error */
    char finalized; /* tp_finalize ran: the memory is not reused */
    char awaited;   /* __await__ ran: from then on it is also an iterator */
} call_object;

#define CALL(op) ((call_object *)(op))

/* The module's state, or NULL once it is gone (no exception set).  The
 * state lives as long as the module, and the module as long as our type
 * holds it, which is not as long as the type lives: in the interpreter's
 * final collections the type's clear drops its module (ht_module), which
 * may free the state while an awaitable in a cycle is still to be
 * finalized or deallocated.  A module cleared but not yet freed (its
 * slots emptied) is gone for us too. */
static inline rbc_state *
call_state_alive(call_object *self)
{
    if (((PyHeapTypeObject *)Py_TYPE(self))->ht_module == NULL
        || self->state->async.Call_type == NULL) {
        return NULL;
    }
    return self->state;
}

/* The same, NULL with RuntimeError when the state is gone. */
static rbc_state *
call_state(call_object *self)
{
    rbc_state *st = call_state_alive(self);
    if (st == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "redis_backoff_c was cleared");
    }
    return st;
}

/* The extras this call counts in (rbc_retry_call_extras). */
static inline rbc_retry_extras *
call_extras(call_object *self)
{
    return rbc_retry_call_extras(RETRY(self->retry), &self->extras);
}

/* The end of the coroutine: drop everything a finished frame drops. */
static inline void
finish(call_object *self)
{
    self->phase = CALL_DONE;
    Py_CLEAR(self->inner);
    Py_CLEAR(self->error);
    Py_CLEAR(self->do_);
    Py_CLEAR(self->fail);
    Py_CLEAR(self->is_retryable);
    Py_CLEAR(self->with_failure_count);
}

/* A StopIteration escaping a coroutine becomes RuntimeError (PEP 479), so
 * the caller never mistakes it for our return. */
static void
convert_stop_iteration(void)
{
    if (!PyErr_ExceptionMatches(PyExc_StopIteration)) {
        return;
    }
    PyObject *stop = rbc_exc_fetch();
    PyErr_SetString(PyExc_RuntimeError, "coroutine raised StopIteration");
    PyObject *runtime = rbc_exc_fetch();
    if (runtime == NULL) {
        Py_XDECREF(stop);
        return;
    }
    PyException_SetCause(runtime, Py_NewRef(stop));
    PyException_SetContext(runtime, stop);
    rbc_exc_restore(runtime);
}

/* ---------------------------------------------------------------------- */
/* Awaiting one object                                                     */

/* Is `obj` a generator made awaitable by @types.coroutine? */
static int
is_iterable_coroutine(PyObject *obj)
{
    if (!PyGen_CheckExact(obj)) {
        return 0;
    }
    /* The generator's code flags, read without an attribute lookup. */
#if PY_VERSION_HEX >= 0x030C0000
    PyCodeObject *code = PyGen_GetCode((PyGenObject *)obj);
    int flags = code->co_flags;
    Py_DECREF(code);
#elif PY_VERSION_HEX >= 0x030B0000
    int flags = ((PyGenObject *)obj)->gi_code->co_flags;
#else
    int flags = ((PyCodeObject *)((PyGenObject *)obj)->gi_code)->co_flags;
#endif
    return (flags & CO_ITERABLE_COROUTINE) != 0;
}

/* The TypeError with which `await obj` fails on the running interpreter,
 * whose words changed in 3.14 and 3.15: raised by the interpreter itself
 * (redis_backoff_c._rules.await_error), for `obj`, or for what its
 * __await__() returned (`result`, consumed; NULL: it has no __await__),
 * with none of that helper's frames in the traceback. */
static void
raise_await_error(call_object *self, PyObject *obj, PyObject *result)
{
    rbc_state *st = call_state(self);
    PyObject *await_error = st == NULL ? NULL : Py_XNewRef(st->async.await_error);
    if (st != NULL && await_error == NULL) {
        PyErr_SetString(PyExc_SystemError, "redis_backoff_c: the interpreter rules are not set");
    }
    if (await_error != NULL) {
        PyObject *args[2] = {obj, result};
        PyObject *returned = PyObject_Vectorcall(await_error, args, result == NULL ? 1 : 2, NULL);
        Py_DECREF(await_error);
        if (returned != NULL) { /* it always raises */
            Py_DECREF(returned);
            PyErr_SetString(PyExc_SystemError, "redis_backoff_c: await_error() returned");
        }
        PyObject *error = rbc_exc_fetch();
        if (error != NULL) {
            if (PyErr_GivenExceptionMatches(error, PyExc_TypeError)) {
                (void)PyException_SetTraceback(error, Py_None);
            }
            rbc_exc_restore(error);
        }
    }
    Py_XDECREF(result);
}

/* What `await obj` iterates: a coroutine itself (the fast path), else
 * obj.__await__(), checked as the interpreter checks it. */
static PyObject *
awaitable_iter(call_object *self, PyObject *obj)
{
    if (PyCoro_CheckExact(obj) || is_iterable_coroutine(obj)) {
        return Py_NewRef(obj);
    }
    unaryfunc getter = Py_TYPE(obj)->tp_as_async != NULL ? Py_TYPE(obj)->tp_as_async->am_await
                                                         : NULL;
    if (getter == NULL) {
        raise_await_error(self, obj, NULL);
        return NULL;
    }
    PyObject *iter = getter(obj);
    if (iter == NULL) {
        return NULL;
    }
    if (PyCoro_CheckExact(iter) || is_iterable_coroutine(iter) || !PyIter_Check(iter)) {
        raise_await_error(self, obj, iter);
        return NULL;
    }
    return iter;
}

/* Forward a send to the awaited iterator; forget it once it has stopped. */
static PySendResult
send_inner(call_object *self, PyObject *arg, PyObject **value)
{
    PySendResult outcome = PyIter_Send(self->inner, arg, value);
    if (outcome != PYGEN_NEXT) {
        Py_CLEAR(self->inner);
    }
    return outcome;
}

/* `await awaitable` (a new reference, consumed): its first step. */
static PySendResult
await_first(call_object *self, PyObject *awaitable, PyObject **value)
{
    PyObject *iter = awaitable_iter(self, awaitable);
    Py_DECREF(awaitable);
    if (iter == NULL) {
        return PYGEN_ERROR;
    }
    self->inner = iter;
    return send_inner(self, Py_None, value);
}

/* ---------------------------------------------------------------------- */
/* The steps of the loop                                                   */

/* `await do()`, in the `try` block. */
static PySendResult
enter_do(call_object *self, PyObject **value)
{
    self->phase = CALL_AWAIT_DO;
    PyObject *awaitable = PyObject_CallNoArgs(self->do_);
    if (awaitable == NULL) {
        return PYGEN_ERROR;
    }
    return await_first(self, awaitable, value);
}

/* Re-raise `error` (consumed) as the end of the coroutine, after
 * on_give_up when the call gave up (see rbc_extras_gave_up: a
 * KeyboardInterrupt the hook raises is raised instead). */
static PySendResult
raise_error(call_object *self, PyObject *error)
{
    rbc_state *st = self->extras.gave_up != RBC_GIVE_UP_NONE ? call_state_alive(self) : NULL;
    if (st != NULL) {
        PyObject *previous = rbc_exc_begin_handling(error);
        int status = rbc_extras_gave_up(&st->extras, &RETRY(self->retry)->extras, &self->extras,
                                        error, self->failures);
        rbc_exc_end_handling(previous);
        if (status < 0) {
            Py_DECREF(error);
            finish(self);
            return PYGEN_ERROR;
        }
    }
    rbc_exc_restore(error);
    finish(self);
    return PYGEN_ERROR;
}

/* The first step of `await fail(error)` (or `fail(error, count)`) in
 * `phase`; `error` (consumed) is kept as the error being handled, which
 * the caller has made the handled exception. */
static PySendResult
enter_fail(call_object *self, PyObject *error, long long count, call_phase phase,
           PyObject **value)
{
    PyObject *number = PyLong_FromLongLong(count);
    PyObject *awaitable = number == NULL ? NULL
                                         : rbc_retry_call_fail(self->fail, error, number,
                                                               self->with_failure_count);
    Py_XDECREF(number);
    if (awaitable == NULL) {
        Py_DECREF(error);
        finish(self);
        return PYGEN_ERROR;
    }
    self->error = error;
    self->phase = phase;
    return await_first(self, awaitable, value);
}

/* do() raised (the exception is set): redis-py's `except` clause up to the
 * first step of `await fail(...)`. */
static PySendResult
after_do_error(call_object *self, PyObject **value)
{
    rbc_retry_object *retry = (rbc_retry_object *)self->retry;
    PyObject *error = rbc_exc_fetch();
    if (error == NULL) {
        PyErr_SetString(PyExc_SystemError, "do() failed without an exception");
        finish(self);
        return PYGEN_ERROR;
    }
    if (!rbc_retry_catches(retry, &self->extras, error)) {
        return raise_error(self, error); /* foreign errors, KeyboardInterrupt: untouched */
    }
    PyObject *previous = rbc_exc_begin_handling(error);
    int go_on = rbc_retry_own_checker_allows(retry, error);
    if (go_on == 0) {
        /* Rejected by the Retry's checker: fail is awaited, with the
         * count it would have had, then the error raised (run()). */
        PySendResult outcome = enter_fail(self, error, self->failures + 1,
                                          CALL_REJECTING, value);
        rbc_exc_end_handling(previous);
        return outcome;
    }
    if (go_on > 0) {
        rbc_state *st = call_state(self);
        go_on = st == NULL ? -1
                           : rbc_retry_call_checker_allows(st, retry, &self->extras, self->is_retryable, error);
    }
    if (go_on <= 0) {
        rbc_exc_end_handling(previous);
        if (go_on == 0) {
            return raise_error(self, error); /* the bare `raise` */
        }
        Py_DECREF(error);
        rbc_extras_call_aborted(call_extras(self)); /* a checker raised */
        finish(self);
        return PYGEN_ERROR;
    }
    self->failures += 1;
    PySendResult outcome = enter_fail(self, error, self->failures, CALL_AWAIT_FAIL, value);
    rbc_exc_end_handling(previous);
    return outcome;
}

/* fail's awaitable returned after the Retry's checker rejected the error:
 * the bare `raise` of it, a give-up counted in the stats. */
static PySendResult
after_rejected_fail(call_object *self)
{
    PyObject *error = self->error;
    self->error = NULL;
    rbc_extras_gave_up_not_retryable(call_extras(self), &self->extras);
    return raise_error(self, error);
}

/* Leaving the `except` block for the next attempt: `await do()` again,
 * unless the call's deadline has passed (then the error is raised). */
static PySendResult
retry_do(call_object *self, PyObject **value)
{
    PyObject *error = self->error;
    self->error = NULL;
    if (!rbc_extras_before_retry(call_extras(self), &self->extras)) {
        return raise_error(self, error);
    }
    Py_XDECREF(error);
    return enter_do(self, value);
}

/* `await sleep(delay)` (delay consumed), handling the error: the `sleep` of
 * redis_backoff_c.asyncio.retry, looked up now (failure path only) so
 * that tests can patch it, as redis.asyncio.retry.sleep. */
static PySendResult
enter_sleep(call_object *self, rbc_state *st, PyObject *delay, PyObject **value)
{
    PyObject *sleep = rbc_module_attr(st->async.sleep_module_name, st->async.str_sleep);
    PyObject *awaitable = sleep == NULL ? NULL : PyObject_CallOneArg(sleep, delay);
    Py_XDECREF(sleep);
    Py_DECREF(delay);
    if (awaitable == NULL) {
        return PYGEN_ERROR;
    }
    self->phase = CALL_AWAIT_SLEEP;
    return await_first(self, awaitable, value);
}

/* fail's awaitable returned: the retries limit, compute(failures) and the
 * backoff sleep, or do() again at once. */
static PySendResult
after_fail(call_object *self, PyObject **value)
{
    rbc_retry_object *retry = (rbc_retry_object *)self->retry;
    PyObject *error = self->error;
    PyObject *previous = rbc_exc_begin_handling(error);
    PyObject *delay = NULL;
    rbc_state *st = call_state(self);
    if (st == NULL) {
        goto error;
    }
    int may_have_run = rbc_extras_may_have_run(&st->extras, &retry->extras, &self->extras, error);
    if (may_have_run < 0) {
        goto error;
    }
    if (may_have_run || rbc_retry_exhausted(retry, &self->extras, self->failures)) {
        goto raise; /* `raise error`: the same object */
    }
    PyObject *count = PyLong_FromLongLong(self->failures);
    if (count == NULL) {
        goto error;
    }
    int should_sleep = 0;
    delay = rbc_retry_next_delay(st, retry, count, &should_sleep);
    Py_DECREF(count);
    if (delay == NULL) {
        goto error;
    }
    int allowed = should_sleep ? rbc_extras_before_sleep(&retry->extras, &self->extras, delay) : 1;
    if (allowed < 0) {
        goto error;
    }
    if (allowed == 0) {
        goto raise; /* the sleep would reach the deadline */
    }
    if (rbc_extras_retrying(&st->extras, &retry->extras, &self->extras, error, self->failures,
                            delay)
        < 0) {
        goto error; /* a KeyboardInterrupt in on_retry */
    }
    if (!should_sleep) {
        Py_DECREF(delay);
        rbc_exc_end_handling(previous);
        return retry_do(self, value);
    }
    self->sleep_started = rbc_extras_sleep_started(call_extras(self));
    PySendResult outcome = enter_sleep(self, st, delay, value); /* consumes delay */
    rbc_exc_end_handling(previous);
    if (outcome == PYGEN_ERROR) {
        rbc_extras_sleep_ended(call_extras(self), self->sleep_started);
        rbc_extras_call_aborted(call_extras(self));
        finish(self);
    }
    return outcome;
raise:
    Py_XDECREF(delay);
    rbc_exc_end_handling(previous);
    self->error = NULL;
    return raise_error(self, error);
error:
    Py_XDECREF(delay);
    rbc_exc_end_handling(previous);
    rbc_extras_call_aborted(call_extras(self)); /* the judge, compute() or the delay raised */
    finish(self);
    return PYGEN_ERROR;
}

/* The awaited object stopped with `outcome` (its result in *value, or the
 * exception set): take the next steps of the loop until an await suspends
 * (PYGEN_NEXT, *value to yield) or the coroutine ends. */
static PySendResult
run(call_object *self, PySendResult outcome, PyObject **value)
{
    while (outcome != PYGEN_NEXT) {
        switch (self->phase) {
        case CALL_AWAIT_DO:
            if (outcome == PYGEN_RETURN) {
                rbc_extras_call_succeeded(call_extras(self));
                finish(self);
                return PYGEN_RETURN;
            }
            outcome = after_do_error(self, value);
            break;
        case CALL_AWAIT_FAIL:
            if (outcome == PYGEN_ERROR) { /* fail raised, or was cancelled or closed */
                rbc_extras_call_aborted(call_extras(self));
                finish(self);
                return PYGEN_ERROR;
            }
            Py_DECREF(*value); /* fail's result is not used */
            *value = NULL;
            outcome = after_fail(self, value);
            break;
        case CALL_REJECTING:
            if (outcome == PYGEN_ERROR) {
                rbc_extras_call_aborted(call_extras(self));
                finish(self);
                return PYGEN_ERROR;
            }
            Py_DECREF(*value);
            *value = NULL;
            return after_rejected_fail(self);
        case CALL_AWAIT_SLEEP:
            rbc_extras_sleep_ended(call_extras(self), self->sleep_started);
            if (outcome == PYGEN_ERROR) { /* the sleep raised, or was cancelled or closed */
                rbc_extras_call_aborted(call_extras(self));
                finish(self);
                return PYGEN_ERROR;
            }
            Py_DECREF(*value);
            *value = NULL;
            outcome = retry_do(self, value);
            break;
        case CALL_DONE:
            return outcome;
        default:
            PyErr_SetString(PyExc_SystemError, "call_with_retry awaitable in a bad state");
            return PYGEN_ERROR;
        }
    }
    return PYGEN_NEXT;
}

/* ---------------------------------------------------------------------- */
/* The coroutine protocol                                                  */

static int
refuse_reentry(call_object *self)
{
    if (self->running) {
        PyErr_SetString(PyExc_ValueError, "coroutine already executing");
        return -1;
    }
    return 0;
}

/* The first send: reset() and the first `await do()`. */
static PySendResult
start(call_object *self, PyObject *arg, PyObject **value)
{
    if (arg != Py_None) {
        PyErr_SetString(PyExc_TypeError, "can't send non-None value to a just-started coroutine");
        return PYGEN_ERROR;
    }
    rbc_state *st = call_state(self);
    if (st == NULL || rbc_retry_reset_backoff(st, (rbc_retry_object *)self->retry) < 0) {
        finish(self);
        return PYGEN_ERROR;
    }
    rbc_extras_call_begin(st, RETRY(self->retry)->extras, &self->extras);
    self->phase = CALL_AWAIT_DO;
    PyObject *awaitable = PyObject_CallNoArgs(self->do_);
    if (awaitable == NULL || !PyCoro_CheckExact(awaitable)) {
        return run(self, awaitable == NULL ? PYGEN_ERROR : await_first(self, awaitable, value),
                   value);
    }
    /* The usual do(), an async def: its coroutine is its own iterator,
     * stepped through its am_send slot.  When it returns at once (no I/O
     * awaited), so do we. */
    self->inner = awaitable;
    PySendResult outcome = PyCoro_Type.tp_as_async->am_send(awaitable, Py_None, value);
    if (outcome == PYGEN_NEXT) {
        return PYGEN_NEXT;
    }
    self->inner = NULL;
    Py_DECREF(awaitable);
    if (outcome == PYGEN_RETURN) {
        rbc_extras_call_succeeded(call_extras(self));
        finish(self);
        return PYGEN_RETURN;
    }
    return run(self, outcome, value);
}

/* The first send of an awaitable made by rbc_async_call_new_caught: the
 * native coroutine (async_coro.c) already reset the backoff and awaited
 * do(), which raised self->error; the failure loop goes on from there, as
 * if this awaitable's own `await do()` had raised it. */
static PySendResult
start_caught(call_object *self, PyObject *arg, PyObject **value)
{
    if (arg != Py_None) {
        PyErr_SetString(PyExc_TypeError, "can't send non-None value to a just-started coroutine");
        return PYGEN_ERROR;
    }
    PyObject *error = self->error;
    self->error = NULL;
    self->phase = CALL_AWAIT_DO;
    rbc_exc_restore(error);
    return run(self, PYGEN_ERROR, value);
}

static PySendResult
call_am_send(PyObject *op, PyObject *arg, PyObject **value)
{
    call_object *self = CALL(op);
    *value = NULL;
    if (refuse_reentry(self) < 0) {
        return PYGEN_ERROR;
    }
    PySendResult outcome;
    self->running = 1;
    switch (self->phase) {
    case CALL_CREATED:
        outcome = start(self, arg, value);
        break;
    case CALL_CAUGHT:
        outcome = start_caught(self, arg, value);
        break;
    case CALL_AWAIT_DO:
        outcome = run(self, send_inner(self, arg, value), value);
        break;
    case CALL_AWAIT_FAIL:
    case CALL_REJECTING:
    case CALL_AWAIT_SLEEP: {
        PyObject *previous = rbc_exc_begin_handling(self->error);
        outcome = send_inner(self, arg, value);
        rbc_exc_end_handling(previous);
        outcome = run(self, outcome, value);
        break;
    }
    default:
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        outcome = PYGEN_ERROR;
    }
    self->running = 0;
    if (outcome == PYGEN_ERROR) {
        convert_stop_iteration();
    }
    return outcome;
}

#if RBC_STOP_ARGS_CACHE
/* Is `obj` one of the objects that live as long as the interpreter (the
 * bools, the small ints)?  Holding one retains nothing. */
static int
is_static_singleton(PyObject *obj)
{
    if (obj == Py_True || obj == Py_False) {
        return 1;
    }
    if (!PyLong_CheckExact(obj) || !PyUnstable_Long_IsCompact((PyLongObject *)obj)) {
        return 0;
    }
    Py_ssize_t n = PyUnstable_Long_CompactValue((PyLongObject *)obj);
    if (n < -5 || n > 256) {
        return 0;
    }
    PyObject *cached = PyLong_FromSsize_t(n); /* the small int itself: cannot fail */
    if (cached == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(cached);
    return cached == obj;
}
#endif

#if PY_VERSION_HEX >= 0x030C0000
/* The args of StopIteration(result): (result,).  A StopIteration that
 * carries one of the interpreter's singletons (await do() returning a
 * small count or a bool) takes the module's one-item tuple when nothing else
 * holds it any more (as zip and enumerate reuse their result tuple): no
 * other object can tell, and the tuple retains nothing of the caller's.
 * `as` is NULL when the module is gone: no cache then. */
static PyObject *
stop_args(rbc_async_state *as, PyObject *result)
{
#if RBC_STOP_ARGS_CACHE
    PyObject *cached = as == NULL ? NULL : as->stop_args;
    if (cached != NULL && Py_REFCNT(cached) == 1 && is_static_singleton(result)) {
        PyObject *previous = PyTuple_GET_ITEM(cached, 0); /* a singleton too */
        PyTuple_SET_ITEM(cached, 0, Py_NewRef(result));
        Py_DECREF(previous);
        return Py_NewRef(cached);
    }
#endif
    PyObject *args = PyTuple_New(1);
    if (args != NULL) {
        PyTuple_SET_ITEM(args, 0, Py_NewRef(result));
    }
    return args;
}
#endif

/* StopIteration(result) as a coroutine's return raises it: a tuple or an
 * exception result is the exception's single argument, never unpacked.
 * This is the cost of every `await` of ours that returns a value where the
 * interpreter iterates instead of calling am_send (3.12+ for any awaitable
 * that is not a native coroutine), so it is made cheap.  The exception
 * being handled becomes its __context__ where the running interpreter's
 * coroutines chain it (up to 3.13 always; from 3.14 for None only), and
 * not otherwise; `as` is NULL when the module is gone (then it chains). */
static void
set_stop_iteration(rbc_async_state *as, PyObject *result)
{
    int chain = as == NULL ? 1 : result == Py_None ? as->stop_chains_none
                                                   : as->stop_chains_result;
#if PY_VERSION_HEX >= 0x030C0000
    /* Every exception is created at once here: build the instance
     * directly, as BaseException.__new__ and StopIteration.__init__ would
     * leave it (args == (result,), value == result, the rest empty),
     * without the generic call and argument parsing. */
    /* None: StopIteration(), as a coroutine's send raises it. */
    PyObject *args = result == Py_None ? PyTuple_New(0) : stop_args(as, result);
    if (args == NULL) {
        return;
    }
    /* StopIteration is a static type: its tp_alloc (PyType_GenericAlloc)
     * is PyObject_GC_New with every field zeroed and the object tracked,
     * done here without the generic size computation and memset. */
    PyStopIterationObject *stop = PyObject_GC_New(PyStopIterationObject,
                                                  (PyTypeObject *)PyExc_StopIteration);
    if (stop == NULL) {
        Py_DECREF(args);
        return;
    }
    stop->dict = NULL;
    stop->args = args;
    stop->notes = NULL;
    stop->traceback = NULL;
    stop->context = NULL;
    stop->cause = NULL;
    stop->suppress_context = 0;
    stop->value = Py_NewRef(result);
    PyObject_GC_Track(stop);
    if (chain) {
        /* As PyErr_SetObject would (a new exception, so no cycle to
         * break). */
        PyObject *handled = PyErr_GetHandledException();
        if (handled != NULL && handled != Py_None) {
            PyException_SetContext((PyObject *)stop, handled);
        }
        else {
            Py_XDECREF(handled);
        }
    }
    PyErr_SetRaisedException((PyObject *)stop);
#else
    /* Before 3.12 the value can be raised unnormalised, as
     * _PyGen_SetStopIterationValue does, except where the exception's
     * constructor would unpack or adopt it. */
    if (chain && !PyTuple_Check(result) && !PyExceptionInstance_Check(result)) {
        PyErr_SetObject(PyExc_StopIteration, result);
        return;
    }
    PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, result);
    if (stop == NULL) {
        return;
    }
    if (chain) {
        PyErr_SetObject(PyExc_StopIteration, stop); /* chains what is handled */
        Py_DECREF(stop);
    }
    else {
        PyErr_Restore(Py_NewRef(PyExc_StopIteration), stop, NULL);
    }
#endif
}

/* The return value of send(), __next__() and throw() for an outcome. */
static PyObject *
outcome_to_result(call_object *self, PySendResult outcome, PyObject *value, int none_as_exhausted)
{
    if (outcome == PYGEN_NEXT) {
        return value;
    }
    if (outcome == PYGEN_RETURN) {
        if (value == Py_None && none_as_exhausted) {
            Py_DECREF(value);
            return NULL; /* tp_iternext: NULL without an exception */
        }
        rbc_state *st = call_state_alive(self); /* the result is delivered even without it */
        set_stop_iteration(st == NULL ? NULL : &st->async, value);
        Py_DECREF(value);
    }
    return NULL;
}

/* iter(): after __await__ we are the iterator it returned; before, not
 * iterable, as a coroutine is not. */
static PyObject *
call_iter(PyObject *op)
{
    if (!CALL(op)->awaited) {
        PyErr_Format(PyExc_TypeError, "'%.200s' object is not iterable", Py_TYPE(op)->tp_name);
        return NULL;
    }
    return Py_NewRef(op);
}

/* tp_iternext is how `await` drives us on CPython 3.12 and later, after
 * __await__; before that a coroutine is not an iterator, and neither are
 * we: next() raises TypeError as it does on a coroutine. */
static PyObject *
call_iternext(PyObject *op)
{
    if (!CALL(op)->awaited) {
        PyErr_Format(PyExc_TypeError, "'%.200s' object is not an iterator", Py_TYPE(op)->tp_name);
        return NULL;
    }
    PyObject *value;
    PySendResult outcome = call_am_send(op, Py_None, &value);
    return outcome_to_result(CALL(op), outcome, value, 1);
}

static PyObject *
call_send(PyObject *op, PyObject *arg)
{
    PyObject *value;
    PySendResult outcome = call_am_send(op, arg, &value);
    return outcome_to_result(CALL(op), outcome, value, 0);
}

/* Raise what throw(typ[, val[, tb]]) describes, as generator.throw does:
 * 0 with it set, or -1 with a TypeError when the arguments are not an
 * exception (then, as for a coroutine, nothing else happens). */
static int
raise_thrown(PyObject *typ, PyObject *val, PyObject *tb)
{
    if (tb == Py_None) {
        tb = NULL;
    }
    if (tb != NULL && !PyTraceBack_Check(tb)) {
        PyErr_SetString(PyExc_TypeError, "throw() third argument must be a traceback object");
        return -1;
    }
    PyObject *error;
    if (PyExceptionClass_Check(typ)) {
        if (val == NULL || val == Py_None) {
            error = PyObject_CallNoArgs(typ);
        }
        else if (PyObject_TypeCheck(val, (PyTypeObject *)typ)) {
            error = Py_NewRef(val);
        }
        else if (PyTuple_Check(val)) {
            error = PyObject_Call(typ, val, NULL);
        }
        else {
            error = PyObject_CallOneArg(typ, val);
        }
        if (error != NULL && !PyExceptionInstance_Check(error)) {
            PyErr_Format(PyExc_TypeError,
                         "calling %R should have returned an instance of BaseException, not %s",
                         typ, Py_TYPE(error)->tp_name);
            Py_CLEAR(error);
        }
    }
    else if (PyExceptionInstance_Check(typ)) {
        if (val != NULL && val != Py_None) {
            PyErr_SetString(PyExc_TypeError, "instance exception may not have a separate value");
            return -1;
        }
        error = Py_NewRef(typ);
    }
    else {
        PyErr_Format(PyExc_TypeError,
                     "exceptions must be classes or instances deriving from BaseException, not %s",
                     Py_TYPE(typ)->tp_name);
        return -1;
    }
    if (error == NULL) {
        return 0; /* the exception's constructor raised: that is thrown */
    }
    if (tb != NULL && PyException_SetTraceback(error, tb) < 0) {
        Py_DECREF(error);
        return 0;
    }
    rbc_exc_restore(error);
    return 0;
}

/* The StopIteration that the awaited iterator's throw() raised on
 * returning: its value (a new reference), or NULL for another error. */
static int
fetch_stop_value(PyObject **value)
{
    if (!PyErr_ExceptionMatches(PyExc_StopIteration)) {
        return 0;
    }
    PyObject *stop = rbc_exc_fetch();
    if (!PyObject_TypeCheck(stop, (PyTypeObject *)PyExc_StopIteration)) {
        /* Normalising it failed (MemoryError): that error is the outcome. */
        rbc_exc_restore(stop);
        return 0;
    }
    *value = Py_NewRef(((PyStopIterationObject *)stop)->value);
    Py_DECREF(stop);
    return 1;
}

/* Close the awaited iterator, as a coroutine's close() closes what it
 * awaits: its close() when it has one.  0, or -1 with its error set. */
static int
close_inner(rbc_async_state *as, PyObject *inner)
{
    PyObject *close;
    int found = rbc_get_optional_attr(inner, as->str_close, &close);
    if (found <= 0) {
        return found;
    }
    PyObject *result = PyObject_CallNoArgs(close);
    Py_DECREF(close);
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

/* throw() at the await point: GeneratorExit closes the awaited iterator and
 * is raised here; anything else goes to its throw(), when it has one. */
static PySendResult
throw_inner(call_object *self, rbc_async_state *as, PyObject *const *args, Py_ssize_t nargs,
            PyObject **value)
{
    PyObject *typ = args[0];
    PyObject *val = nargs > 1 ? args[1] : NULL;
    PyObject *tb = nargs > 2 ? args[2] : NULL;
    PyObject *inner = self->inner;
    self->inner = NULL; /* it is done with, unless it yields again below */
    if (PyErr_GivenExceptionMatches(typ, PyExc_GeneratorExit)) {
        int closed = close_inner(as, inner);
        Py_DECREF(inner);
        if (closed == 0) {
            (void)raise_thrown(typ, val, tb);
        }
        return PYGEN_ERROR;
    }
    PyObject *throw;
    int found = rbc_get_optional_attr(inner, as->str_throw, &throw);
    if (found <= 0) {
        Py_DECREF(inner);
        if (found == 0) {
            (void)raise_thrown(typ, val, tb);
        }
        return PYGEN_ERROR;
    }
    *value = PyObject_Vectorcall(throw, args, nargs, NULL);
    Py_DECREF(throw);
    if (*value != NULL) {
        self->inner = inner;
        return PYGEN_NEXT;
    }
    Py_DECREF(inner);
    return fetch_stop_value(value) ? PYGEN_RETURN : PYGEN_ERROR;
}

/* An exception thrown in comes out of the await in redis-py's `except`
 * block: the coroutine, resuming with it, chains it to its own handled
 * exception (the error) as __context__, as a `raise` there would. */
static void
chain_to_handled(PyObject *handled)
{
    PyObject *raised = rbc_exc_fetch();
    if (raised == NULL) {
        return;
    }
    PyObject *previous = rbc_exc_begin_handling(handled);
    PyErr_SetObject((PyObject *)Py_TYPE(raised), raised); /* context, cycle-safe */
    rbc_exc_end_handling(previous);
    Py_DECREF(raised);
}

static PySendResult
throw_outcome(call_object *self, PyObject *const *args, Py_ssize_t nargs, PyObject **value)
{
    rbc_state *st = call_state(self);
    if (st == NULL) {
        return PYGEN_ERROR;
    }
    switch (self->phase) {
    case CALL_CREATED:
    case CALL_CAUGHT:
        /* Raised before the first line: nothing runs, the coroutine ends. */
        if (raise_thrown(args[0], nargs > 1 ? args[1] : NULL, nargs > 2 ? args[2] : NULL) == 0) {
            finish(self);
        }
        return PYGEN_ERROR;
    case CALL_AWAIT_DO:
        return run(self, throw_inner(self, &st->async, args, nargs, value), value);
    case CALL_AWAIT_FAIL:
    case CALL_REJECTING:
    case CALL_AWAIT_SLEEP: {
        PySendResult outcome = throw_inner(self, &st->async, args, nargs, value);
        if (outcome == PYGEN_ERROR) {
            chain_to_handled(self->error);
        }
        return run(self, outcome, value);
    }
    default:
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return PYGEN_ERROR;
    }
}

static PyObject *
call_throw(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    call_object *self = CALL(op);
    if (nargs < 1 || nargs > 3) {
        PyErr_Format(PyExc_TypeError, "throw expected %s, got %zd",
                     nargs < 1 ? "at least 1 argument" : "at most 3 arguments", nargs);
        return NULL;
    }
    if (refuse_reentry(self) < 0) {
        return NULL;
    }
    PyObject *value = NULL;
    self->running = 1;
    PySendResult outcome = throw_outcome(self, args, nargs, &value);
    self->running = 0;
    if (outcome == PYGEN_ERROR) {
        convert_stop_iteration();
    }
    return outcome_to_result(CALL(op), outcome, value, 0);
}

static PyObject *
call_close(PyObject *op, PyObject *unused)
{
    call_object *self = CALL(op);
    if (refuse_reentry(self) < 0) {
        return NULL;
    }
    if (self->phase == CALL_CREATED || self->phase == CALL_CAUGHT || self->phase == CALL_DONE) {
        finish(self);
        Py_RETURN_NONE;
    }
    PyObject *exit = PyExc_GeneratorExit;
    PyObject *value = NULL;
    self->running = 1;
    PySendResult outcome = throw_outcome(self, &exit, 1, &value);
    self->running = 0;
    if (outcome == PYGEN_NEXT) {
        Py_DECREF(value);
        PyErr_SetString(PyExc_RuntimeError, "coroutine ignored GeneratorExit");
        return NULL;
    }
    if (outcome == PYGEN_RETURN) {
#if PY_VERSION_HEX >= 0x030D0000
        return value; /* 3.13: close() returns what the coroutine returned */
#else
        Py_DECREF(value);
        Py_RETURN_NONE;
#endif
    }
    if (PyErr_ExceptionMatches(PyExc_GeneratorExit)) {
        PyObject *exit_raised = rbc_exc_fetch();
        Py_XSETREF(self->closed_context, PyException_GetContext(exit_raised));
        Py_DECREF(exit_raised);
        Py_RETURN_NONE;
    }
    convert_stop_iteration();
    return NULL;
}

PyObject *
rbc_async_close_context(rbc_state *st, PyObject *call)
{
    if (!Py_IS_TYPE(call, st->async.Call_type)) {
        PyErr_Format(PyExc_TypeError, "_async_close_context() argument must be the awaitable of "
                                      "_async_caught(), not %.200s",
                     Py_TYPE(call)->tp_name);
        return NULL;
    }
    PyObject *context = CALL(call)->closed_context;
    return Py_NewRef(context != NULL ? context : Py_None);
}

static PyObject *
call_await(PyObject *self)
{
    CALL(self)->awaited = 1;
    return Py_NewRef(self);
}

/* ---------------------------------------------------------------------- */
/* Life cycle                                                              */

PyObject *
rbc_async_call_new(rbc_state *st, PyObject *retry, PyObject *do_, PyObject *fail,
                   PyObject *is_retryable, PyObject *with_failure_count)
{
    rbc_async_state *as = &st->async;
    call_object *self;
    if (as->free_calls_count > 0) {
        /* Memory of a finished one: only the object header to set again. */
        self = (call_object *)as->free_calls[--as->free_calls_count];
        (void)PyObject_Init((PyObject *)self, as->Call_type);
    }
    else {
        if (as->Call_type == NULL) { /* the module was cleared */
            PyErr_SetString(PyExc_RuntimeError, "redis_backoff_c was cleared");
            return NULL;
        }
        self = PyObject_GC_New(call_object, as->Call_type);
        if (self == NULL) {
            return NULL;
        }
    }
    self->retry = Py_NewRef(retry);
    self->do_ = Py_NewRef(do_);
    self->fail = Py_NewRef(fail);
    self->is_retryable = Py_NewRef(is_retryable);
    self->with_failure_count = Py_NewRef(with_failure_count);
    self->inner = NULL;
    self->error = NULL;
    self->closed_context = NULL;
    self->sleep_started = 0.0;
    self->state = st;
    self->failures = 0;
    self->extras.deadline_at = 0.0;
    self->extras.counted = 0;
    self->extras.gave_up = RBC_GIVE_UP_NONE;
    self->phase = CALL_CREATED;
    self->running = 0;
    self->finalized = 0;
    self->awaited = 0;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

PyObject *
rbc_async_call_new_caught(rbc_state *st, PyObject *retry, PyObject *error, PyObject *do_,
                          PyObject *fail, PyObject *is_retryable, PyObject *with_failure_count,
                          const rbc_call_extras *call)
{
    PyObject *op = rbc_async_call_new(st, retry, do_, fail, is_retryable, with_failure_count);
    if (op != NULL) {
        CALL(op)->error = Py_NewRef(error);
        CALL(op)->extras = *call;
        CALL(op)->phase = CALL_CAUGHT;
    }
    return op;
}

static int
call_traverse(PyObject *op, visitproc visit, void *arg)
{
    call_object *self = CALL(op);
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->retry);
    Py_VISIT(self->do_);
    Py_VISIT(self->fail);
    Py_VISIT(self->is_retryable);
    Py_VISIT(self->with_failure_count);
    Py_VISIT(self->inner);
    Py_VISIT(self->error);
    Py_VISIT(self->closed_context);
    return 0;
}

static int
call_clear(PyObject *op)
{
    call_object *self = CALL(op);
    finish(self);
    Py_CLEAR(self->retry);
    Py_CLEAR(self->closed_context);
    return 0;
}

/* As a coroutine's finalizer: one never awaited warns; one suspended in an
 * await is closed, which closes what it awaits. */
static void
call_finalize(PyObject *op)
{
    call_object *self = CALL(op);
    self->finalized = 1;
    if (self->phase == CALL_DONE || self->retry == NULL) {
        return;
    }
    if (call_state_alive(self) == NULL) {
        /* The interpreter is ending and our module is gone: drop what the
         * call holds; what it awaits is closed by its own finalizer. */
        finish(self);
        return;
    }
    PyObject *saved = rbc_exc_fetch();
    if (self->phase == CALL_CREATED) {
        finish(self);
        if (PyErr_WarnEx(PyExc_RuntimeWarning,
                         "coroutine 'Retry.call_with_retry' was never awaited", 1)
            < 0) {
            PyErr_WriteUnraisable(op);
        }
    }
    else {
        PyObject *result = call_close(op, NULL);
        if (result == NULL) {
            PyErr_WriteUnraisable(op);
        }
        Py_XDECREF(result);
    }
    if (saved != NULL) {
        rbc_exc_restore(saved);
    }
}

static void
call_dealloc(PyObject *op)
{
    /* A finished awaitable (the usual case) has nothing to finalize: skip
     * the finalizer protocol's resurrection dance. */
    if (CALL(op)->phase != CALL_DONE && PyObject_CallFinalizerFromDealloc(op) < 0) {
        return; /* resurrected by the finalizer */
    }
    call_object *self = CALL(op);
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    if (self->phase != CALL_DONE) {
        finish(self);
    }
    Py_CLEAR(self->retry);
    Py_CLEAR(self->closed_context);
    /* An awaitable lives for one call_with_retry: keep its memory for the
     * next, unless the module is gone or being cleared, or the
     * finalizer ran (its "finalized" mark would stay on the memory, and
     * the next object's finalizer would never run). */
    rbc_state *st = call_state_alive(self);
    rbc_async_state *as = st == NULL ? NULL : &st->async;
    if (as != NULL && as->Call_type == type && as->free_calls_count < RBC_CALL_FREE_LIST_SIZE
        && !self->finalized) {
        as->free_calls[as->free_calls_count++] = op;
    }
    else {
        type->tp_free(op);
    }
    Py_DECREF(type);
}

void
rbc_async_call_free_list_clear(rbc_async_state *as)
{
    while (as->free_calls_count > 0) {
        PyObject_GC_Del(as->free_calls[--as->free_calls_count]);
    }
}

static PyObject *
call_get_running(PyObject *op, void *closure)
{
    return PyBool_FromLong(CALL(op)->running);
}

static PyObject *
call_get_await(PyObject *op, void *closure)
{
    PyObject *inner = CALL(op)->inner;
    return Py_NewRef(inner != NULL ? inner : Py_None);
}

/* clang-format off */
static PyGetSetDef call_getset[] = {
    {"cr_running", call_get_running, NULL, "Whether send/throw/close is running.", NULL},
    {"cr_await", call_get_await, NULL, "The object awaited now, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef call_methods[] = {
    {"send", call_send, METH_O,
     "send($self, value, /)\n--\n\n"
     "Send a value into the awaited object; return the next value it yields,\n"
     "or raise StopIteration with call_with_retry's result."},
    {"throw", (PyCFunction)(void (*)(void))call_throw, METH_FASTCALL,
     "throw($self, typ, val=None, tb=None, /)\n--\n\n"
     "Raise an exception at the await point: into the awaited object."},
    {"close", call_close, METH_NOARGS,
     "close($self, /)\n--\n\nRaise GeneratorExit at the await point: close the awaited object."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot call_slots[] = {
    {Py_tp_doc, (void *)"The awaitable of asyncio Retry.call_with_retry(): await it once."},
    {Py_am_await, call_await},
    {Py_am_send, (void *)call_am_send},
    {Py_tp_iter, call_iter},
    {Py_tp_iternext, call_iternext},
    {Py_tp_methods, call_methods},
    {Py_tp_getset, call_getset},
    {Py_tp_traverse, call_traverse},
    {Py_tp_clear, call_clear},
    {Py_tp_finalize, call_finalize},
    {Py_tp_dealloc, call_dealloc},
    {0, NULL},
};
/* clang-format on */

static PyType_Spec call_spec = {
    .name = "redis_backoff_c._speedups.CallWithRetry",
    .basicsize = sizeof(call_object),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = call_slots,
};

int
rbc_async_call_init(rbc_state *st, PyObject *module)
{
    st->async.Call_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &call_spec, NULL);
    return st->async.Call_type == NULL ? -1 : 0;
}
