/* The seven backoff strategies of redis.backoff as C heap types. */
#ifndef RBC_STRATEGIES_H
#define RBC_STRATEGIES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef enum {
    RBC_CONSTANT = 0,
    RBC_NO_BACKOFF,
    RBC_EXPONENTIAL,
    RBC_FULL_JITTER,
    RBC_EQUAL_JITTER,
    RBC_DECORRELATED_JITTER,
    RBC_EXPONENTIAL_WITH_JITTER,
    RBC_STRATEGY_COUNT
} rbc_strategy_kind;

typedef struct {
    PyTypeObject *types[RBC_STRATEGY_COUNT];
    /* redis-py's classes: __eq__ accepts their instances, as theirs accept ours. */
    PyObject *redis_classes[RBC_STRATEGY_COUNT];
    PyObject *abstract_backoff; /* redis.backoff.AbstractBackoff */
    PyObject *default_cap;      /* 0.512 */
    PyObject *default_base;     /* 0.008 */
    PyObject *int_two;
    PyObject *int_three;
    PyTypeObject *fraction_type; /* fractions.Fraction */
    PyObject *str_cap;           /* interned "_cap", "_base", ... */
    PyObject *str_base;
    PyObject *str_previous_backoff;
    /* 1 when the installed redis.backoff has _exponential (redis-py 8.2):
     * the exponential strategies then follow math.ldexp, else
     * base * 2**failures.  Set once, when the module is executed. */
    int ldexp_rule;
    PyObject *str_compute; /* interned "compute" and "reset" */
    PyObject *str_reset;
    /* Each type's own compute and reset as created, and the version tag its
     * class had when they were last seen still in place (0: not seen). */
    PyObject *genuine_compute[RBC_STRATEGY_COUNT];
    PyObject *genuine_reset[RBC_STRATEGY_COUNT];
    unsigned int genuine_version_tags[RBC_STRATEGY_COUNT];
} rbc_strategies_state;

struct rbc_state;

int rbc_strategies_init(struct rbc_state *st, PyObject *module);
int rbc_strategies_traverse(rbc_strategies_state *ss, visitproc visit, void *arg);
void rbc_strategies_clear(rbc_strategies_state *ss);

/* The kind of `backoff` when its type is exactly one of the seven C types
 * (not a subclass, whose Python overrides must be honoured), else -1.
 * Retry uses it to call compute()/reset() without a method lookup. */
static inline int
rbc_plain_strategy_kind(rbc_strategies_state *ss, PyObject *backoff)
{
    PyTypeObject *type = Py_TYPE(backoff);
    for (int kind = 0; kind < RBC_STRATEGY_COUNT; kind++) {
        if (ss->types[kind] == type) {
            return kind;
        }
    }
    return -1;
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

/* rbc_plain_strategy_kind, and only while the type's compute and reset are
 * still its own C methods: a class-level mock of either is called through
 * Python, as redis-py's Retry would call it.  One comparison while the
 * class is untouched. */
static inline int
rbc_genuine_strategy_kind(rbc_strategies_state *ss, PyObject *backoff)
{
    int kind = rbc_plain_strategy_kind(ss, backoff);
    if (kind < 0) {
        return -1;
    }
    unsigned int tag = rbc_valid_version_tag(Py_TYPE(backoff));
    if (tag != 0 && tag == ss->genuine_version_tags[kind]) {
        return kind;
    }
    return rbc_strategy_revalidate(ss, kind);
}

/* backoff.reset() and backoff.compute(failures) for a plain C strategy of
 * the given kind (see rbc_genuine_strategy_kind). compute returns a new
 * reference or NULL with an exception set. */
void rbc_strategy_reset(struct rbc_state *st, PyObject *backoff, int kind);
PyObject *rbc_strategy_compute(struct rbc_state *st, PyObject *backoff,
                               int kind, PyObject *failures);

/* copy.deepcopy(backoff) for a plain C strategy of the given kind, when
 * every field is an exact float, int or bool (which deepcopy returns as
 * they are): a new object of the same type holding the same fields.
 * Returns NULL *without* an exception set when a field is something else
 * (the caller then asks copy.deepcopy), or NULL with one on failure. */
PyObject *rbc_strategy_atomic_copy(struct rbc_state *st, PyObject *backoff, int kind);

/* hash() of a tuple whose items hash to lanes[0..count): Python's own
 * tuple hash, without the tuple. */
Py_hash_t rbc_combine_hashes(const Py_hash_t *lanes, Py_ssize_t count);

#endif
