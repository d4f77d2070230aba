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

/* _async_begin(retry, do, fail, is_retryable, with_failure_count): the
 * checks and self._backoff.reset(), returning None; for a Retry with
 * extras (deadline, budget, stats) once reset() has returned, the C
 * awaitable of the rest of the call instead, for the coroutine to await. */
PyObject *rbc_async_begin(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
/* _async_caught(retry, error, do, fail, is_retryable, with_failure_count):
 * the awaitable of the failure loop, from the caught error on. */
PyObject *rbc_async_caught(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* clang-format off */
#define RBC_ASYNC_CORO_METHODS                                                    \
    {"_async_begin", (PyCFunction)(void (*)(void))rbc_async_begin, METH_FASTCALL, \
     "_async_begin(retry, do, fail, is_retryable, with_failure_count, /)\n--\n\n" \
     "Check do and fail, then reset retry._backoff (the coroutine design);\n"    \
     "with extras, return the awaitable of the whole call instead."},             \
    {"_async_caught", (PyCFunction)(void (*)(void))rbc_async_caught, METH_FASTCALL, \
     "_async_caught(retry, error, do, fail, is_retryable, with_failure_count, /)\n--\n\n" \
     "An awaitable of the failure loop, starting from `error` raised by\n"        \
     "do()'s first try (the coroutine design)."}
/* clang-format on */

#endif
