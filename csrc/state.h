/* Per-module state shared by every C file of the extension.
 *
 * There are no mutable C globals: everything that outlives one call lives
 * here, reached from a heap type through PyType_GetModuleState() or from
 * the module through PyModule_GetState().  Each concern owns its own
 * sub-struct, declared in its own header, with its own traverse/clear.
 *
 * Error exits, in every C file: a function that owns more than one
 * reference leaves on failure through one `error:` label at its end, which
 * releases each reference it may own there (Py_XDECREF for one that may
 * still be NULL) and returns the failure value; its error paths `goto
 * error` instead of repeating the cleanup.  When the success path needs
 * the same release, the one label is `done:`, reached with the result (or
 * status) set.  Another outcome with its own cleanup (async_call.c's
 * re-raise of the handled error) gets its own label likewise.  A function
 * that owns one reference, released on one early return, stays as it is.
 *
 * Memory safety, in every C file: any call that can run Python code may
 * mutate or free what the C code is looking at.  That is any call, an
 * attribute get or set, a dict store or lookup with a key the user chose
 * (its __hash__ and __eq__), a rich compare, a hash, a number conversion
 * (__float__, __index__), an isinstance check (a metaclass hook),
 * copy.deepcopy, and every Py_DECREF, Py_SETREF or Py_CLEAR of a user's
 * object (its __del__).  Across such a call, hold no borrowed reference
 * (a field, a list or tuple item, a dict value) and no pointer into memory
 * an object owns (the extras block, a field's address): take a strong
 * reference first, or read again after the call.  When storing a field,
 * write it, and any C value cached beside it, before releasing the old
 * value (Py_XSETREF does that for one field; for two, hold the old one
 * and release it last).
 */
#ifndef RBC_STATE_H
#define RBC_STATE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "compat.h"
#include "random_source.h"
#include "strategies.h"
#include "retry.h"
#include "async_retry.h"
#include "extras.h"
#include "slots.h"

/* Objects that more than one concern uses: created once, in module.c. */
typedef struct {
    PyObject *int_zero;
    PyObject *str_backoff;    /* interned "_backoff" */
    PyObject *str_dict;       /* interned "__dict__" */
    PyObject *copyreg_newobj; /* copyreg.__newobj__, for __reduce__ */
} rbc_common_state;

typedef struct rbc_state {
    rbc_common_state common;
    rbc_random_state random;
    rbc_strategies_state strategies;
    rbc_retry_state retry;
    rbc_async_state async;
    rbc_extras_state extras;
    rbc_slots_state slots;
} rbc_state;

extern PyModuleDef rbc_module_def;

static inline rbc_state *
rbc_get_state(PyObject *module)
{
    return (rbc_state *)PyModule_GetState(module);
}

/* State of the module that defined `type` or one of its bases. */
static inline rbc_state *
rbc_state_from_type(PyTypeObject *type)
{
    PyObject *module = rbc_type_module_by_def(type, &rbc_module_def);
    return module == NULL ? NULL : rbc_get_state(module);
}

/* State of the module behind `self`, the instance of one of our heap types
 * or of a subclass of one.  The common case, an instance of our own type,
 * reads the type's module directly; a subclass searches its bases.
 * (METH_METHOD would hand a method its defining class instead, but
 * CPython's call specialisations skip METH_METHOD, which costs more.) */
static inline rbc_state *
rbc_state_of(PyObject *self)
{
    PyObject *module = ((PyHeapTypeObject *)Py_TYPE(self))->ht_module;
    if (module != NULL && PyModule_GetDef(module) == &rbc_module_def) {
        return rbc_get_state(module);
    }
    return rbc_state_from_type(Py_TYPE(self));
}

/* self._backoff.reset(), call_with_retry's first step (retry.c and both
 * asyncio designs): nothing to do for an unmodified C strategy other than
 * DecorrelatedJitterBackoff, the usual case, decided here with one type
 * compare; retry_core.c does the rest.  Here, not in retry_core.h, because
 * it reads two concerns' states and is inlined on the hot path. */
static inline int
rbc_retry_reset_backoff(rbc_state *st, rbc_retry_object *self)
{
    if (self->backoff != NULL) {
        int kind = rbc_genuine_strategy_kind(&st->strategies, self->backoff);
        if (kind >= 0 && kind != RBC_DECORRELATED_JITTER) {
            return 0;
        }
    }
    return rbc_retry_reset_backoff_slow(st, self);
}

#endif
