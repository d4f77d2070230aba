/* The extension's per-module state: the ground layer, data only.
 *
 * There are no mutable C globals: everything that outlives one call lives
 * here, reached from a heap type through PyType_GetModuleState() or from
 * the module through PyModule_GetState().  Each concern owns one
 * sub-struct, declared below and nowhere else, and fills, traverses and
 * clears it in its own file (module.c calls them in layer order: see
 * docs/architecture.md).  This file names no function of any concern, so
 * every file can include it and the dependencies between the concerns
 * point one way (scripts/check_layers.py checks that).
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

#include <stdint.h>

#include "compat.h"

/* ---- random source (random_source.c) ----------------------------------- */

typedef struct {
    int use_fast; /* 0: random module, 1: xoshiro256** */
    uint64_t xoshiro[4];
    PyObject *module_dict;      /* random.__dict__ */
    PyObject *instance;         /* random._inst, the module's generator */
    PyObject *uniform_function; /* Random.uniform, the plain function */
    PyObject *instance_random;  /* random._inst.random, a bound C method */
    PyObject *str_uniform;
    PyObject *str_random;
} rbc_random_state;

/* ---- strategies (strategies.c): the seven kinds, in redis.backoff's order --- */

enum {
    RBC_CONSTANT = 0,
    RBC_NO_BACKOFF,
    RBC_EXPONENTIAL,
    RBC_FULL_JITTER,
    RBC_EQUAL_JITTER,
    RBC_DECORRELATED_JITTER,
    RBC_EXPONENTIAL_WITH_JITTER,
    RBC_STRATEGY_COUNT
};

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
    /* redis_backoff_c._rules.LDEXP_EXPONENTIAL (module.c's
     * _set_release_rules): 1 for redis-py 8.2's math.ldexp, 0 for
     * base * 2**failures in Python's numbers. */
    int ldexp_rule;
    PyObject *str_compute; /* interned "compute" and "reset" */
    PyObject *str_reset;
    /* The float the direct paths of compute() return, rewritten when
     * nothing else holds it (strategies.c's direct_result). */
    PyObject *spare_result;
    /* Each type's own compute and reset as created, and the version tag its
     * class had when they were last seen still in place (0: not seen). */
    PyObject *unpatched_compute[RBC_STRATEGY_COUNT];
    PyObject *unpatched_reset[RBC_STRATEGY_COUNT];
    unsigned int unpatched_version_tags[RBC_STRATEGY_COUNT];
} rbc_strategies_state;

/* ---- extras (extras.c) ------------------------------------------------- */

/* The counters of RetryStats, in snapshot() order. */
typedef enum {
    RBC_STAT_CALLS,
    RBC_STAT_ATTEMPTS,
    RBC_STAT_SUCCESSES,
    RBC_STAT_FAILED_ATTEMPTS,
    RBC_STAT_RETRIES,
    RBC_STAT_GIVE_UPS_EXHAUSTED,
    RBC_STAT_GIVE_UPS_NOT_RETRYABLE,
    RBC_STAT_GIVE_UPS_DEADLINE,
    RBC_STAT_GIVE_UPS_BUDGET,
    RBC_STAT_GIVE_UPS_MAY_HAVE_RUN,
    RBC_STAT_UNHANDLED,
    RBC_STAT_ABORTED,
    RBC_STAT_COUNT
} rbc_stat;

/* Why a call gave up: on_give_up's event.reason (redis_backoff_c.hooks
 * REASONS, in this order), and the stat counted. */
typedef enum {
    RBC_GIVE_UP_NONE = 0,
    RBC_GIVE_UP_EXHAUSTED,
    RBC_GIVE_UP_NOT_RETRYABLE,
    RBC_GIVE_UP_DEADLINE,
    RBC_GIVE_UP_BUDGET,
    RBC_GIVE_UP_MAY_HAVE_RUN,
    RBC_GIVE_UP_COUNT
} rbc_give_up;

typedef struct {
    PyTypeObject *Budget_type;
    PyTypeObject *Stats_type;
    PyObject *stat_names[RBC_STAT_COUNT]; /* interned snapshot() keys */
    PyObject *str_slept_seconds;
    PyObject *str_deadline;
    PyObject *str_budget;
    PyObject *str_stats;
    PyObject *str_writes;
    PyObject *str_at_least_once; /* interned "at-least-once", "at-most-once" */
    PyObject *str_at_most_once;
    /* redis_backoff_c.writes._judge (module.c's _set_writes_judge): called
     * with a failure under writes="at-most-once", true when the attempt may
     * have run on the server; NULL until the package sets it. */
    PyObject *writes_judge;
    PyTypeObject *Event_type; /* RetryEvent, the hooks' argument (a tuple subclass) */
    PyObject *spare_event;    /* an event whose hook let it go, empty, for reuse */
    PyObject *str_on_retry;   /* interned "on_retry", "on_give_up" */
    PyObject *str_on_give_up;
    PyObject *give_up_reasons[RBC_GIVE_UP_COUNT]; /* interned, by rbc_give_up; [0] NULL */
    /* redis_backoff_c.hooks._hook_failed (module.c's _set_hook_reporter):
     * called with a hook and the Exception it raised; NULL until set. */
    PyObject *hook_reporter;
    /* While patch() bounds redis-py's waits by a call's deadline (module.c's
     * _set_call_deadline), else NULL: redis_backoff_c._call_deadline's
     * CALL_DEADLINE, the ContextVar holding when the command running in
     * the context must end, which a call with a deadline ends by too; and
     * its enter_cluster_command(client, *args), called by RedisCluster's
     * execute_command when the cluster's Retry has a deadline, which sets
     * it and returns the Token (or None). */
    PyObject *call_deadline;
    PyObject *enter_cluster_command;
    /* Whether a Retry of this interpreter was ever given a deadline, and
     * redis_backoff_c._call_deadline.saw_deadline (module.c's
     * _set_deadline_hook), called the first time: patch() installs the
     * deadline's bounds only once one exists (a process without deadlines
     * pays nothing for them). */
    int deadline_seen;
    PyObject *deadline_hook;
} rbc_extras_state;

/* ---- __slots__ in copies (slots.c) ------------------------------------- */

typedef struct {
    PyObject *str_slots; /* interned "__slots__" */
    PyObject *slotnames; /* copyreg._slotnames */
} rbc_slots_state;

/* ---- the retry core (retry_core.c), for both Retry types --------------- */

/* What distinguishes the sync Retry from the asyncio one. */
typedef struct {
    PyTypeObject *type;           /* our C type (the state's one reference to it) */
    PyObject *family;             /* redis.retry.Retry or redis.asyncio.retry.Retry */
    PyObject *default_errors;     /* tuple: the default supported_errors */
    PyObject *default_errors_set; /* frozenset of it */
    const char *name;             /* "Retry", for messages */
} rbc_retry_flavor;

/* The Retry types are flavors of one object: the sync one and the asyncio
 * one, each made by its own file into its slot of the core's state. */
enum { RBC_FLAVOR_SYNC,
       RBC_FLAVOR_ASYNC,
       RBC_FLAVOR_COUNT };

typedef struct {
    rbc_retry_flavor flavors[RBC_FLAVOR_COUNT];
    PyObject *str_retries;
    PyObject *str_supported_errors;
    PyObject *str_is_retryable; /* "_is_retryable" */
    /* How call_with_retry tests its is_retryable argument:
     * redis_backoff_c._rules.RETRY_CHECKER (module.c's _set_release_rules):
     * 1 for redis-py 8.2's `is not None`, 0 for 8.0/8.1's truth. */
    char checker_not_none;
} rbc_retry_core_state;

/* ---- the sync Retry (retry.c) ------------------------------------------ */

typedef struct {
    PyObject *sleep_module_name; /* "redis_backoff_c.retry" */
    PyObject *str_sleep;         /* "sleep" */
} rbc_retry_state;

/* ---- the asyncio Retry (async_retry.c, async_call.c) ------------------- */

/* The one-item tuple reused as the args of the StopIteration that
 * delivers a singleton result (see async_call.c): 3.12 and 3.13, where the
 * interpreter iterates our awaitable and the tuple has no cached hash, and
 * not where the refcount does not say who else holds it (free-threading). */
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define RBC_STOP_ARGS_CACHE 1
#else
#define RBC_STOP_ARGS_CACHE 0
#endif

/* How many finished awaitables' memory blocks are kept for reuse. */
#define RBC_CALL_FREE_LIST_SIZE 16

typedef struct {
    PyTypeObject *Call_type;        /* the awaitable call_with_retry returns */
    PyTypeObject *AsyncMethod_type; /* call_with_retry's descriptor type (async_method.h) */
    PyObject *sleep_module_name;    /* "redis_backoff_c.asyncio.retry" */
    PyObject *str_sleep;            /* "sleep" */
    PyObject *str_throw;            /* "throw" */
    PyObject *str_close;            /* "close" */
    /* Memory of finished awaitables (untracked, holding no references),
     * reused by the next call_with_retry: see async_call.c. */
    PyObject *free_calls[RBC_CALL_FREE_LIST_SIZE];
    int free_calls_count;
    PyObject *stop_args; /* (singleton,) when RBC_STOP_ARGS_CACHE, else NULL */
    /* The running interpreter's ways, asked of it by
     * redis_backoff_c._rules (module.c's _set_interpreter_rules): whether
     * a coroutine's send() chains the handled exception to the
     * StopIteration of a result other than None, and of None; and
     * _rules.await_error, which raises the TypeError of `await obj`. */
    char stop_chains_result;
    char stop_chains_none;
    PyObject *await_error;
} rbc_async_state;

/* ---- the cluster command loop (cluster.c) ------------------------------ */

typedef struct {
    /* redis_backoff_c._speedups._ClusterCommand: what patch() puts in
     * RedisCluster.execute_command. */
    PyTypeObject *Command_type;
    PyObject *str_retry; /* interned "retry" */
} rbc_cluster_state;

/* ---- the deadline's bounds on redis-py's waits (call_bounds.c) -------- */

/* Interned attribute names the bounds read on clients, connections and
 * sockets, by index. */
enum { RBC_BOUNDS_CONNECTION,        /* "connection" */
       RBC_BOUNDS_CONNECTION_POOL,   /* "connection_pool" */
       RBC_BOUNDS_CONNECTION_KWARGS, /* "connection_kwargs" */
       RBC_BOUNDS_RETRY,             /* "retry" */
       RBC_BOUNDS_SOCK,              /* "_sock" */
       RBC_BOUNDS_SOCKET_TIMEOUT,    /* "socket_timeout" */
       RBC_BOUNDS_GETTIMEOUT,        /* "gettimeout" */
       RBC_BOUNDS_SETTIMEOUT,        /* "settimeout" */
       RBC_BOUNDS_LOWERED,           /* "_redis_backoff_c_lowered" */
       RBC_BOUNDS_NAMES };

typedef struct {
    /* redis_backoff_c._speedups._CallBound: what patch() puts in redis-py's
     * command entries and connection waits (sync) while it bounds them. */
    PyTypeObject *Bound_type;
    PyObject *names[RBC_BOUNDS_NAMES];
} rbc_bounds_state;

/* ---- shared by every concern (module.c) ---------------------------- */

/* Objects that more than one concern uses: created once, in module.c. */
typedef struct {
    PyObject *int_zero;
    PyObject *str_backoff;    /* interned "_backoff" */
    PyObject *str_dict;       /* interned "__dict__" */
    PyObject *copyreg_newobj; /* copyreg.__newobj__, for __reduce__ */
    PyObject *copy_deepcopy;  /* copy.deepcopy */
} rbc_common_state;

typedef struct rbc_state {
    rbc_common_state common;
    rbc_random_state random;
    rbc_strategies_state strategies;
    rbc_extras_state extras;
    rbc_slots_state slots;
    rbc_retry_core_state core;
    rbc_retry_state retry;
    rbc_async_state async;
    rbc_cluster_state cluster;
    rbc_bounds_state bounds;
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

#endif
