/* redis_backoff_c._speedups: the module object, its state and its start-up.
 *
 * Multi-phase initialisation (PEP 489) with per-module state (PEP 573,
 * state.h): each concern fills its part of the state, and creates its heap
 * types, in its own init function, called from module_exec layer by layer
 * from the bottom (__slots__, random source, strategies, extras, the retry
 * core, the sync Retry, the asyncio Retry); traverse and clear visit the
 * same parts, clear from the top.
 */
#include "state.h"
#include "args.h"
#include "async_coro.h"
#include "async_retry.h"
#include "call_bounds.h"
#include "cluster.h"
#include "extras.h"
#include "random_source.h"
#include "retry.h"
#include "retry_core.h"
#include "slots.h"
#include "strategies.h"

static int
common_init(rbc_common_state *common)
{
    common->int_zero = PyLong_FromLong(0);
    common->str_backoff = PyUnicode_InternFromString("_backoff");
    common->str_dict = PyUnicode_InternFromString("__dict__");
    common->copyreg_newobj = rbc_import_attr("copyreg", "__newobj__");
    common->copy_deepcopy = rbc_import_attr("copy", "deepcopy");
    return common->int_zero && common->str_backoff && common->str_dict && common->copyreg_newobj
                   && common->copy_deepcopy
               ? 0
               : -1;
}

static int
common_traverse(rbc_common_state *common, visitproc visit, void *arg)
{
    Py_VISIT(common->copyreg_newobj);
    Py_VISIT(common->copy_deepcopy);
    return 0;
}

static void
common_clear(rbc_common_state *common)
{
    Py_CLEAR(common->int_zero);
    Py_CLEAR(common->str_backoff);
    Py_CLEAR(common->str_dict);
    Py_CLEAR(common->copyreg_newobj);
    Py_CLEAR(common->copy_deepcopy);
}

static int
module_exec(PyObject *module)
{
    rbc_state *st = rbc_get_state(module);
    if (common_init(&st->common) < 0 || rbc_slots_init(&st->slots) < 0
        || rbc_random_init(st, module) < 0 || rbc_strategies_init(st, module) < 0
        || rbc_extras_init(st, module) < 0 || rbc_retry_core_init(&st->core) < 0
        || rbc_retry_init(st, module) < 0 || rbc_async_init(st, module) < 0
        || rbc_cluster_init(st, module) < 0 || rbc_bounds_init(st, module) < 0) {
        return -1;
    }
    return 0;
}

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    rbc_state *st = rbc_get_state(module);
    int err;
    if ((err = common_traverse(&st->common, visit, arg))
        || (err = rbc_slots_traverse(&st->slots, visit, arg))
        || (err = rbc_random_traverse(&st->random, visit, arg))
        || (err = rbc_strategies_traverse(&st->strategies, visit, arg))
        || (err = rbc_extras_traverse(&st->extras, visit, arg))
        || (err = rbc_retry_core_traverse(&st->core, visit, arg))
        || (err = rbc_async_traverse(&st->async, visit, arg))
        || (err = rbc_cluster_traverse(&st->cluster, visit, arg))
        || (err = rbc_bounds_traverse(&st->bounds, visit, arg))) {
        return err;
    }
    return 0;
}

static int
module_clear(PyObject *module)
{
    rbc_state *st = rbc_get_state(module);
    rbc_bounds_clear(&st->bounds);
    rbc_cluster_clear(&st->cluster);
    rbc_async_clear(&st->async);
    rbc_retry_clear(&st->retry);
    rbc_retry_core_clear(&st->core);
    rbc_extras_clear(&st->extras);
    rbc_strategies_clear(&st->strategies);
    rbc_random_clear(&st->random);
    rbc_slots_clear(&st->slots);
    common_clear(&st->common);
    return 0;
}

static void
module_free(void *module)
{
    (void)module_clear((PyObject *)module);
}

/* _set_release_rules(ldexp_exponential, retry_checker, /): the rules of the
 * installed redis-py release, decided in redis_backoff_c/_rules.py and
 * handed over once, at import, by redis_backoff_c/_impl.py. */
static PyObject *
set_release_rules(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "_set_release_rules() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    int ldexp = PyObject_IsTrue(args[0]);
    int checker = ldexp < 0 ? -1 : PyObject_IsTrue(args[1]);
    if (checker < 0) {
        return NULL;
    }
    rbc_state *st = rbc_get_state(module);
    st->strategies.ldexp_rule = ldexp;
    st->core.checker_not_none = (char)checker;
    Py_RETURN_NONE;
}

/* _set_interpreter_rules(stop_chains_result, stop_chains_none, await_error, /):
 * what the running interpreter's coroutines do, asked of it by
 * redis_backoff_c/_rules.py and handed over once, at import, by
 * redis_backoff_c/_impl.py, for the C awaitable to do the same. */
static PyObject *
set_interpreter_rules(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "_set_interpreter_rules() takes 3 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    int result = PyObject_IsTrue(args[0]);
    int none = result < 0 ? -1 : PyObject_IsTrue(args[1]);
    if (none < 0) {
        return NULL;
    }
    if (!PyCallable_Check(args[2])) {
        PyErr_Format(PyExc_TypeError,
                     "_set_interpreter_rules() argument 'await_error' must be callable, not %.200s",
                     Py_TYPE(args[2])->tp_name);
        return NULL;
    }
    rbc_async_state *as = &rbc_get_state(module)->async;
    as->stop_chains_result = (char)result;
    as->stop_chains_none = (char)none;
    Py_XSETREF(as->await_error, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* *slot = value, a callable of the package handed over once, at import, by
 * redis_backoff_c/_impl.py (the two below); TypeError naming `func`
 * otherwise. */
static PyObject *
set_package_callable(const char *func, PyObject **slot, PyObject *value)
{
    if (!PyCallable_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s() argument must be callable, not %.200s", func,
                     Py_TYPE(value)->tp_name);
        return NULL;
    }
    Py_XSETREF(*slot, Py_NewRef(value));
    Py_RETURN_NONE;
}

/* _set_writes_judge(judge, /): redis_backoff_c.writes._judge, which reads
 * a failed attempt under writes="at-most-once" (rbc_extras_may_have_run). */
static PyObject *
set_writes_judge(PyObject *module, PyObject *judge)
{
    return set_package_callable("_set_writes_judge", &rbc_get_state(module)->extras.writes_judge,
                                judge);
}

/* _set_hook_reporter(reporter, /): redis_backoff_c.hooks._hook_failed,
 * given the Exception an on_retry or on_give_up hook raised
 * (rbc_extras_retrying, rbc_extras_gave_up). */
static PyObject *
set_hook_reporter(PyObject *module, PyObject *reporter)
{
    return set_package_callable("_set_hook_reporter",
                                &rbc_get_state(module)->extras.hook_reporter, reporter);
}

/* _set_deadline_hook(hook, /): redis_backoff_c._call_deadline.saw_deadline,
 * called once, when a Retry is first given a deadline (extras.c). */
static PyObject *
set_deadline_hook(PyObject *module, PyObject *hook)
{
    rbc_extras_state *es = &rbc_get_state(module)->extras;
    if (es->deadline_seen) {
        Py_RETURN_NONE; /* seen already: the package reads that instead */
    }
    return set_package_callable("_set_deadline_hook", &es->deadline_hook, hook);
}

/* _deadline_seen(): whether a Retry was ever given a deadline here. */
static PyObject *
deadline_seen(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(rbc_get_state(module)->extras.deadline_seen);
}

/* _set_call_deadline(var, enter, /): while patch() bounds redis-py's waits
 * by a call's deadline, redis_backoff_c._call_deadline's CALL_DEADLINE and
 * enter_cluster_command (see the extras state); (None, None) when not. */
static PyObject *
set_call_deadline(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "_set_call_deadline() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    rbc_extras_state *es = &rbc_get_state(module)->extras;
    if (args[0] == Py_None && args[1] == Py_None) {
        Py_CLEAR(es->call_deadline);
        Py_CLEAR(es->enter_cluster_command);
        Py_RETURN_NONE;
    }
    if (!PyContextVar_CheckExact(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "_set_call_deadline() arguments must be a ContextVar and a callable, "
                        "or None and None");
        return NULL;
    }
    /* Both written before either old value is released. */
    PyObject *old_var = es->call_deadline, *old_enter = es->enter_cluster_command;
    es->call_deadline = Py_NewRef(args[0]);
    es->enter_cluster_command = Py_NewRef(args[1]);
    Py_XDECREF(old_var);
    Py_XDECREF(old_enter);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"set_random_source", (PyCFunction)(void (*)(void))rbc_set_random_source,
     METH_FASTCALL | METH_KEYWORDS,
     "set_random_source(name, seed=None)\n--\n\n"
     "Choose where jittered strategies draw from: 'python' (the random\n"
     "module, as redis-py; the default) or 'fast' (a xoshiro256** generator\n"
     "in C, seeded with the int `seed`, or from os.urandom when None)."},
    {"get_random_source", rbc_get_random_source, METH_NOARGS,
     "get_random_source()\n--\n\nThe name of the active random source: 'python' or 'fast'."},
    RBC_ASYNC_CORO_METHODS,
    RBC_CLUSTER_METHODS,
    {"_set_release_rules", (PyCFunction)(void (*)(void))set_release_rules, METH_FASTCALL,
     "_set_release_rules(ldexp_exponential, retry_checker, /)\n--\n\n"
     "The installed redis-py's rules (redis_backoff_c._rules): 8.2's math.ldexp\n"
     "exponential and `is_retryable is not None` test when true, 8.0/8.1's\n"
     "rules when false.  Private: set once, at import."},
    {"_set_interpreter_rules", (PyCFunction)(void (*)(void))set_interpreter_rules, METH_FASTCALL,
     "_set_interpreter_rules(stop_chains_result, stop_chains_none, await_error, /)\n--\n\n"
     "What the running interpreter's coroutines do (redis_backoff_c._rules), for\n"
     "the C awaitable to do the same.  Private: set once, at import."},
    {"_set_writes_judge", set_writes_judge, METH_O,
     "_set_writes_judge(judge, /)\n--\n\n"
     "redis_backoff_c.writes._judge: asked, under writes='at-most-once', whether a\n"
     "failed attempt may have run.  Private: set once, at import."},
    {"_set_call_deadline", (PyCFunction)(void (*)(void))set_call_deadline, METH_FASTCALL,
     "_set_call_deadline(var, enter, /)\n--\n\n"
     "While patch() bounds redis-py's waits: redis_backoff_c._call_deadline's\n"
     "CALL_DEADLINE and enter_cluster_command; None, None when not.  Private."},
    {"_set_deadline_hook", set_deadline_hook, METH_O,
     "_set_deadline_hook(hook, /)\n--\n\n"
     "redis_backoff_c._call_deadline.saw_deadline: called once, when a Retry is\n"
     "first given a deadline.  Private: set once, at import."},
    {"_deadline_seen", deadline_seen, METH_NOARGS,
     "_deadline_seen()\n--\n\nWhether a Retry was ever given a deadline.  Private."},
    {"_set_hook_reporter", set_hook_reporter, METH_O,
     "_set_hook_reporter(reporter, /)\n--\n\n"
     "redis_backoff_c.hooks._hook_failed: given a retry hook and the Exception it\n"
     "raised.  Private: set once, at import."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if PY_VERSION_HEX >= 0x030C0000
    /* The state holds a random generator and cached objects that are not
     * shared between interpreters, so each subinterpreter gets its own. */
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    /* Not yet audited for free-threading: keep the GIL on. */
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

PyModuleDef rbc_module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "redis_backoff_c._speedups",
    .m_doc = "C implementations of redis-py's backoff strategies and Retry.",
    .m_size = sizeof(rbc_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&rbc_module_def);
}
