/* The deadline's bounds on redis-py's sync waits, their common calls in C.
 *
 * While patch() bounds a command by its Retry's deadline
 * (redis_backoff_c/_call_deadline.py), a wrapper sits on redis-py's
 * command entry (Redis.execute_command, PubSub.execute_command,
 * Pipeline.immediate_execute_command) and on the connection's waits
 * (connect_check_health, send_packed_command, read_response).  Every call
 * of every command passes through them, so their common calls are made
 * here, without a Python frame:
 *
 *   entry    a client whose Retry is a C Retry: without a deadline,
 *            redis-py's method at once; with one, for a command whose name
 *            is an upper-case str of no blocking command, the command's
 *            deadline set in the context variable for the call's run.
 *   connect  a connection already connected, or no deadline: redis-py's.
 *   send     no deadline and no socket timeout of ours to put back, or a
 *            deadline not yet passed, a socket, and a write under 64 KiB
 *            (it never waits): redis-py's.
 *   read     no deadline and nothing to put back: redis-py's; a deadline:
 *            the socket's timeout kept within _DRIFT of the time left, as
 *            _call_deadline._bound_socket does, then redis-py's read; a
 *            failed read is handed to `on_cut`, which drops a connection
 *            whose wait the deadline cut.
 *
 * asyncio (the entries of redis.asyncio's Redis, PubSub and Pipeline, the
 * connection's waits): without a deadline, redis-py's coroutine function
 * called directly, which gives the coroutine the Python wrapper would
 * await; with one, the Python wrapper (the deadline is set for the
 * coroutine's run, which only a coroutine of its own can do).
 *
 * Anything else goes to `slow`, the Python wrapper, which does all of it
 * (the same outcome, by the same rules). */
#ifndef RBC_CALL_BOUNDS_H
#define RBC_CALL_BOUNDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "state.h"

/* _CallBound(kind, original, slow, extra): `kind` an RBC_BOUND_*,
 * `original` redis-py's function, `slow` the Python wrapper; `extra` the
 * frozenset of the blocking commands' names (upper case) for a sync entry,
 * on_cut(connection, sock, error) for a sync read, else None. */
enum { RBC_BOUND_ENTRY,
       RBC_BOUND_CONNECT,
       RBC_BOUND_SEND,
       RBC_BOUND_READ,
       RBC_BOUND_ASYNC_ENTRY, /* asyncio: redis-py's coroutine unless a deadline */
       RBC_BOUND_ASYNC_WAIT,  /* asyncio: redis-py's coroutine unless a deadline is set */
       RBC_BOUND_KINDS };

int rbc_bounds_init(rbc_state *st, PyObject *module);
int rbc_bounds_traverse(rbc_bounds_state *bs, visitproc visit, void *arg);
void rbc_bounds_clear(rbc_bounds_state *bs);

#endif
