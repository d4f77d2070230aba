/* redis_backoff_c._speedups: the module object, its state and its start-up.
 *
 * Multi-phase initialisation (PEP 489) with per-module state (PEP 573):
 * each concern (random source, strategies, sync Retry, asyncio Retry)
 * creates its heap types and fills its part of the state in its own
 * rbc_*_init() function, called from module_exec in dependency order.
 */
#include "state.h"
#include "async_coro.h"

static int
module_exec(PyObject *module)
{
    rbc_state *st = rbc_get_state(module);
    if (rbc_slots_init(&st->slots) < 0 || rbc_random_init(st, module) < 0
        || rbc_strategies_init(st, module) < 0
        || rbc_extras_init(st, module) < 0
        || rbc_retry_init(st, module) < 0
        || rbc_async_init(st, module) < 0) {
        return -1;
    }
    return 0;
}

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    rbc_state *st = rbc_get_state(module);
    int err;
    if ((err = rbc_random_traverse(&st->random, visit, arg))
        || (err = rbc_strategies_traverse(&st->strategies, visit, arg))
        || (err = rbc_retry_traverse(&st->retry, visit, arg))
        || (err = rbc_async_traverse(&st->async, visit, arg))
        || (err = rbc_extras_traverse(&st->extras, visit, arg))
        || (err = rbc_slots_traverse(&st->slots, visit, arg))) {
        return err;
    }
    return 0;
}

static int
module_clear(PyObject *module)
{
    rbc_state *st = rbc_get_state(module);
    rbc_async_clear(&st->async);
    rbc_retry_clear(&st->retry);
    rbc_extras_clear(&st->extras);
    rbc_strategies_clear(&st->strategies);
    rbc_random_clear(&st->random);
    rbc_slots_clear(&st->slots);
    return 0;
}

static void
module_free(void *module)
{
    (void)module_clear((PyObject *)module);
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
    RBC_RETRY_MODULE_METHODS,
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
