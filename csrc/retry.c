/* redis_backoff_c.retry.Retry: the synchronous Retry and its
 * call_with_retry loop, built from the steps of retry_core.h. */
#include "retry.h"
#include "args.h"
#include "extras.h"
#include "retry_core.h"

/* redis.retry.Retry's default supported_errors. */
static const rbc_retry_default_error default_errors[] = {
    {"redis.exceptions", "ConnectionError"},
    {"redis.exceptions", "TimeoutError"},
    {"socket", "timeout"},
    {NULL, NULL},
};

static inline const rbc_retry_flavor *
sync_flavor_of(PyObject *self)
{
    rbc_state *st = rbc_state_of(self);
    return st == NULL ? NULL : &st->core.flavors[RBC_FLAVOR_SYNC];
}

/* ---------------------------------------------------------------------- */
/* Sleeping                                                                */

/* redis_backoff_c.retry.sleep(delay), looked up now (failure path only),
 * so that a test can patch it as redis-py's tests patch redis.retry.sleep.
 * It is time.sleep by default: the GIL is released and Ctrl-C interrupts
 * it with KeyboardInterrupt. */
static int
sleep_for(rbc_retry_state *rs, PyObject *delay)
{
    PyObject *sleep = rbc_module_attr(rs->sleep_module_name, rs->str_sleep);
    if (sleep == NULL) {
        return -1;
    }
    PyObject *result = PyObject_CallOneArg(sleep, delay);
    Py_DECREF(sleep);
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* call_with_retry                                                         */

typedef struct {
    PyObject *do_;
    PyObject *fail;
    PyObject *is_retryable;
    PyObject *with_failure_count;
    rbc_call_extras extras; /* the call's deadline, and whether it is counted */
} retry_call;

/* The Retry's own checker rejected the error (redis-py 8.2): fail(error)
 * or fail(error, failures + 1), the failure count left as it is, so that
 * the caller's cleanup still runs; then 0 to raise the error, or -1 when
 * fail raised. */
static int
fail_rejected(rbc_retry_object *self, retry_call *call, PyObject *error, long long failures)
{
    PyObject *count = PyLong_FromLongLong(failures + 1);
    if (count == NULL) {
        return -1;
    }
    PyObject *result = rbc_retry_call_fail(call->fail, error, count, call->with_failure_count);
    Py_DECREF(count);
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
    rbc_extras_gave_up_not_retryable(rbc_retry_call_extras(self, &call->extras), &call->extras);
    return 0;
}

/* One caught supported error, inside redis-py's `except` block: 1 to call
 * do() again (on_retry called), 0 to raise the error (as redis-py, or
 * because an extra gave up: the budget, the deadline; call->extras.gave_up
 * says why), -1 when a callback raised. */
static int
handle_error(rbc_state *st, rbc_retry_object *self, retry_call *call, PyObject *error,
             long long *failures)
{
    int own = rbc_retry_own_checker_allows(self, error);
    if (own <= 0) {
        return own < 0 ? -1 : fail_rejected(self, call, error, *failures);
    }
    int go_on = rbc_retry_call_checker_allows(st, self, &call->extras, call->is_retryable, error);
    if (go_on <= 0) {
        return go_on;
    }
    *failures += 1;
    PyObject *count = PyLong_FromLongLong(*failures);
    if (count == NULL) {
        return -1;
    }
    PyObject *delay = NULL;
    int status = -1;
    PyObject *result = rbc_retry_call_fail(call->fail, error, count, call->with_failure_count);
    if (result == NULL) {
        goto done;
    }
    Py_DECREF(result);
    status = rbc_extras_may_have_run(&st->extras, &self->extras, &call->extras, error);
    if (status != 0) {
        status = status > 0 ? 0 : -1; /* 1: raise the error, which may have run */
        goto done;
    }
    status = -1;
    if (rbc_retry_exhausted(self, &call->extras, *failures)) {
        status = 0;
        goto done;
    }
    int should_sleep;
    delay = rbc_retry_next_delay(st, self, count, &should_sleep);
    if (delay == NULL) {
        goto done;
    }
    status = should_sleep ? rbc_extras_before_sleep(&self->extras, &call->extras, delay) : 1;
    if (status > 0) {
        status = rbc_extras_retrying(&st->extras, &self->extras, &call->extras, error, *failures,
                                     delay)
                         < 0
                     ? -1
                     : 1;
    }
    if (status > 0 && should_sleep) {
        double started = rbc_extras_sleep_started(rbc_retry_call_extras(self, &call->extras));
        status = sleep_for(&st->retry, delay) < 0 ? -1 : 1;
        rbc_extras_sleep_ended(rbc_retry_call_extras(self, &call->extras), started);
    }
    if (status > 0) { /* 0: the deadline is too near to sleep */
        status = rbc_extras_before_retry(self->extras, &call->extras);
    }
done:
    Py_DECREF(count);
    Py_XDECREF(delay);
    return status;
}

static int
bind_call(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, retry_call *call)
{
    PyObject *values[4];
    if (rbc_retry_bind_call(args, nargs, kwnames, values) < 0) {
        return -1;
    }
    call->do_ = values[0];
    call->fail = values[1];
    call->is_retryable = values[2];
    call->with_failure_count = values[3];
    return 0;
}

/* The loop after do() first raised: each supported error handled as in
 * redis-py's `except` block, do() called again, until it returns, an error
 * is raised, or a callback raises.  Kept out of call_with_retry so that
 * the success path stays small. */
static PyObject *
retry_after_error(rbc_state *st, rbc_retry_object *me, retry_call *call)
{
    long long failures = 0;
    for (;;) {
        PyObject *error = rbc_exc_fetch();
        if (error == NULL) {
            PyErr_SetString(PyExc_SystemError, "do() returned NULL without an exception");
            return NULL;
        }
        if (!rbc_retry_catches(me, &call->extras, error)) {
            rbc_exc_restore(error); /* KeyboardInterrupt, foreign errors: untouched */
            return NULL;
        }
        PyObject *previous = rbc_exc_begin_handling(error);
        int step = handle_error(st, me, call, error, &failures);
        if (step == 0
            && rbc_extras_gave_up(&st->extras, &me->extras, &call->extras, error, failures) < 0) {
            /* A KeyboardInterrupt in on_give_up: raised instead of the error,
             * whose give-up is counted already. */
            rbc_exc_end_handling(previous);
            Py_DECREF(error);
            return NULL;
        }
        rbc_exc_end_handling(previous);
        if (step == 0) {
            rbc_exc_restore(error);
            return NULL;
        }
        Py_DECREF(error);
        if (step < 0) {
            rbc_extras_call_aborted(rbc_retry_call_extras(me, &call->extras)); /* a callback raised */
            return NULL;
        }
        PyObject *result = PyObject_CallNoArgs(call->do_);
        if (result != NULL) {
            rbc_extras_call_succeeded(rbc_retry_call_extras(me, &call->extras));
            return result;
        }
    }
}

static PyObject *call_with_retry(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames);

/* clang-format off */
static PyMethodDef retry_methods[] = {
    {"call_with_retry", (PyCFunction)(void (*)(void))call_with_retry,
     METH_FASTCALL | METH_KEYWORDS,
     "call_with_retry($self, /, do, fail, is_retryable=None, with_failure_count=False)\n--\n\n"
     "Return do(); on an error in _supported_errors, call fail(error) (or\n"
     "fail(error, failures)), sleep _backoff.compute(failures) seconds through\n"
     "redis_backoff_c.retry.sleep and call do() again, up to _retries times\n"
     "(forever when < 0); then raise the error. When the Retry's own checker\n"
     "(self.is_retryable) is set and returns false for the error, fail() is\n"
     "called (failures + 1 as its count) and the error raised; then a false\n"
     "is_retryable(error) raises it at once (the argument is combined with\n"
     "the Retry's checker by AND)."},
    RBC_RETRY_COMMON_METHODS,
    {NULL, NULL, 0, NULL},
};
/* clang-format on */

static PyObject *
call_with_retry(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    retry_call call;
    if (nargs == 2 && kwnames == NULL && Py_TYPE(args[0])->tp_call != NULL
        && Py_TYPE(args[1])->tp_call != NULL) {
        /* redis-py's own calls: do and fail, positional */
        call.do_ = args[0];
        call.fail = args[1];
        call.is_retryable = Py_None;
        call.with_failure_count = Py_False;
    }
    else if (bind_call(args, nargs, kwnames, &call) < 0) {
        return NULL;
    }
    rbc_state *st = rbc_state_of(self);
    if (st == NULL) {
        return NULL;
    }
    rbc_retry_object *me = RETRY(self);
    if (rbc_retry_reset_backoff(st, me) < 0) {
        return NULL;
    }
    rbc_extras_call_begin(st, me->extras, &call.extras);
    PyObject *result = PyObject_Vectorcall(call.do_, NULL, 0, NULL);
    if (result != NULL) {
        rbc_extras_call_succeeded(rbc_retry_call_extras(me, &call.extras));
        return result;
    }
    return retry_after_error(st, me, &call);
}

/* ---------------------------------------------------------------------- */
/* The type                                                                */

static PyObject *
retry_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    rbc_state *st = rbc_state_from_type(type);
    return st == NULL ? NULL : rbc_retry_new(&st->core.flavors[RBC_FLAVOR_SYNC], type);
}

static int
retry_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    const rbc_retry_flavor *fl = sync_flavor_of(self);
    return fl == NULL ? -1 : rbc_retry_init_args(fl, self, args, kwds);
}

static PyObject *
retry_richcompare(PyObject *self, PyObject *other, int op)
{
    const rbc_retry_flavor *fl = sync_flavor_of(self);
    return fl == NULL ? NULL : rbc_retry_richcompare(fl, self, other, op);
}

static Py_hash_t
retry_hash(PyObject *self)
{
    const rbc_retry_flavor *fl = sync_flavor_of(self);
    return fl == NULL ? -1 : rbc_retry_hash(fl, self);
}

/* clang-format off */

static PyType_Slot retry_slots[] = {
    {Py_tp_doc, (void *)RBC_RETRY_TEXT_SIGNATURE
                        "Retry an operation up to `retries` times (forever when < 0) after an\n"
                        "error in `supported_errors` (default: redis ConnectionError and\n"
                        "TimeoutError, socket.timeout), sleeping backoff.compute(failures)\n"
                        "seconds between tries.  `is_retryable` (redis-py 8.2's): a checker\n"
                        "that must also return true for an error to be retried.  Opt-in:\n"
                        "`deadline` bounds one call (seconds), `budget` (RetryBudget) throttles\n"
                        "retries, `stats` (RetryStats) counts."},
    {Py_tp_new, retry_new},
    {Py_tp_init, retry_init},
    {Py_tp_hash, retry_hash},
    {Py_tp_richcompare, retry_richcompare},
    {Py_tp_methods, retry_methods},
    RBC_RETRY_COMMON_SLOTS,
    {0, NULL},
};
/* clang-format on */

/* Called through rbc_retry_type_vectorcall (retry_core.h). */
static PyType_Spec retry_spec = RBC_RETRY_SPEC("redis_backoff_c.retry.Retry", retry_slots);

/* ---------------------------------------------------------------------- */
/* Module state                                                            */

int
rbc_retry_init(rbc_state *st, PyObject *module)
{
    rbc_retry_state *rs = &st->retry;
    rbc_retry_flavor *fl = &st->core.flavors[RBC_FLAVOR_SYNC];
    fl->name = "Retry";
    rs->sleep_module_name = PyUnicode_InternFromString("redis_backoff_c.retry");
    rs->str_sleep = PyUnicode_InternFromString("sleep");
    if (rs->sleep_module_name == NULL || rs->str_sleep == NULL
        || rbc_retry_flavor_init(fl, "redis.retry", default_errors) < 0) {
        return -1;
    }
    PyTypeObject *type = rbc_retry_flavor_type_new(fl, module, &retry_spec);
    return type == NULL ? -1 : PyModule_AddObjectRef(module, "Retry", (PyObject *)type);
}

void
rbc_retry_clear(rbc_retry_state *rs)
{
    Py_CLEAR(rs->sleep_module_name);
    Py_CLEAR(rs->str_sleep);
}
