/* The seven backoff strategies of redis.backoff as C heap types. */
#ifndef RBC_STRATEGIES_H
#define RBC_STRATEGIES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "state.h"

int rbc_strategies_init(rbc_state *st, PyObject *module);
int rbc_strategies_traverse(rbc_strategies_state *ss, visitproc visit, void *arg);
void rbc_strategies_clear(rbc_strategies_state *ss);

/* The kind of a type that is exactly one of the seven, else -1. */
static inline int
rbc_strategy_type_kind(rbc_strategies_state *ss, PyTypeObject *type)
{
    for (int kind = 0; kind < RBC_STRATEGY_COUNT; kind++) {
        if (ss->types[kind] == type) {
            return kind;
        }
    }
    return -1;
}

/* The kind of `backoff` when its type is exactly one of the seven C types
 * (not a subclass, whose Python overrides must be honoured), else -1.
 * Retry uses it to call compute()/reset() without a method lookup. */
static inline int
rbc_exact_strategy_kind(rbc_strategies_state *ss, PyObject *backoff)
{
    return rbc_strategy_type_kind(ss, Py_TYPE(backoff));
}

/* The type's version tag while CPython vouches that its attributes are
 * unchanged since the tag was given, else 0.  Setting or deleting any
 * attribute of the class (mock.patch.object included) takes it away. */
static inline unsigned int
rbc_valid_version_tag(PyTypeObject *type)
{
#if PY_VERSION_HEX < 0x030D0000
    if (!PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG)) {
        return 0;
    }
#endif
    return type->tp_version_tag;
}

int rbc_strategy_revalidate(rbc_strategies_state *ss, int kind);

/* rbc_exact_strategy_kind, and only while the type's compute and reset are
 * still its own C methods: a class-level mock of either is called through
 * Python, as redis-py's Retry would call it.  One comparison while the
 * class is untouched. */
static inline int
rbc_unpatched_strategy_kind(rbc_strategies_state *ss, PyObject *backoff)
{
    int kind = rbc_exact_strategy_kind(ss, backoff);
    if (kind < 0) {
        return -1;
    }
    unsigned int tag = rbc_valid_version_tag(Py_TYPE(backoff));
    if (tag != 0 && tag == ss->unpatched_version_tags[kind]) {
        return kind;
    }
    return rbc_strategy_revalidate(ss, kind);
}

/* backoff.reset() and backoff.compute(failures) for an unpatched C strategy of
 * the given kind (see rbc_unpatched_strategy_kind). compute returns a new
 * reference or NULL with an exception set. */
void rbc_strategy_reset(rbc_state *st, PyObject *backoff, int kind);
PyObject *rbc_strategy_compute(rbc_state *st, PyObject *backoff,
                               int kind, PyObject *failures);

/* copy.deepcopy(backoff) for an unpatched C strategy of the given kind, when
 * every field is an exact float, int or bool (which deepcopy returns as
 * they are): a new object of the same type holding the same fields.
 * Returns NULL *without* an exception set when a field is something else
 * (the caller then asks copy.deepcopy), or NULL with one on failure. */
PyObject *rbc_strategy_atomic_copy(rbc_state *st, PyObject *backoff, int kind);

#endif
