/* The native-coroutine design of the asyncio call_with_retry: the C half.
 *
 * redis_backoff_c/asyncio/_coroutine.py holds the `async def` whose
 * success path is the interpreter's own `await do()`; it calls these two
 * module functions, which keep reset(), the decisions and the whole
 * failure loop in C (the loop is async_call.c's awaitable, started at the
 * point where do() has raised).  Which design serves which CPython is
 * decided at import: see redis_backoff_c/asyncio/retry.py. */
#ifndef RBC_ASYNC_CORO_H
#define RBC_ASYNC_CORO_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "state.h"

/* _async_begin(retry): self._backoff.reset(); then None, or, for a Retry
 * with extras (deadline, budget, stats) once reset() has returned, the call
 * counted and True, or its deadline (monotonic seconds, a float), which the
 * coroutine hands to _async_caught.  One argument (METH_O, the cheapest
 * call CPython makes to C): do and fail are checked where they are first
 * called, as redis-py's coroutine meets them; see _async_check_do. */
PyObject *rbc_async_begin(PyObject *module, PyObject *retry);
/* _async_check_do(do): TypeError naming `do` unless it is callable, for the
 * coroutine's handler of the TypeError that calling it raised. */
PyObject *rbc_async_check_do(PyObject *module, PyObject *do_);
/* _async_caught(retry, error, do, fail, is_retryable, with_failure_count,
 * started): the awaitable of the failure loop, from the caught error on;
 * `started` is what _async_begin returned. */
PyObject *rbc_async_caught(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
/* _async_succeeded(retry) and _async_unhandled(retry): the accounting of a
 * call with extras whose first do() returned, or raised an error that is
 * not retried (extras.h's hooks). */
PyObject *rbc_async_succeeded(PyObject *module, PyObject *retry);
/* _async_close_context(awaitable): for the GeneratorExit of close() that
 * CPython raises in the coroutine's frame, at the await of the failure
 * loop, outside any handler: the error being handled when it came. */
PyObject *rbc_async_closed_context(PyObject *module, PyObject *call);
PyObject *rbc_async_unhandled(PyObject *module, PyObject *retry);

/* clang-format off */
#define RBC_ASYNC_CORO_METHODS                                                    \
    {"_async_begin", rbc_async_begin, METH_O,                                     \
     "_async_begin(retry, /)\n--\n\n"                                             \
     "Reset retry._backoff (the coroutine design); with extras, count the\n"     \
     "call and return True or its deadline."},                                    \
    {"_async_check_do", rbc_async_check_do, METH_O,                               \
     "_async_check_do(do, /)\n--\n\n"                                             \
     "TypeError naming call_with_retry()'s 'do' unless it is callable."},         \
    {"_async_caught", (PyCFunction)(void (*)(void))rbc_async_caught, METH_FASTCALL, \
     "_async_caught(retry, error, do, fail, is_retryable, with_failure_count, started, /)\n--\n\n" \
     "An awaitable of the failure loop, starting from `error` raised by\n"        \
     "do()'s first try (the coroutine design)."},                                 \
    {"_async_succeeded", rbc_async_succeeded, METH_O,                             \
     "_async_succeeded(retry, /)\n--\n\n"                                         \
     "Count the success of a call with extras (the coroutine design)."},          \
    {"_async_unhandled", rbc_async_unhandled, METH_O,                             \
     "_async_unhandled(retry, /)\n--\n\n"                                         \
     "Count an error that is not retried (the coroutine design)."},               \
    {"_async_close_context", rbc_async_closed_context, METH_O,                    \
     "_async_close_context(awaitable, /)\n--\n\n"                                 \
     "The error being handled when the failure loop's awaitable was closed."}
/* clang-format on */

#endif
