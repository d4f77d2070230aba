/* The awaitable that redis_backoff_c.asyncio.retry.Retry.call_with_retry
 * returns: redis-py's `async def call_with_retry` as a C state machine
 * that speaks the coroutine protocol (__await__, send, throw, close). */
#ifndef RBC_ASYNC_CALL_H
#define RBC_ASYNC_CALL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "extras.h"
#include "state.h"

/* Creates the awaitable type into st->async.Call_type. */
int rbc_async_call_init(rbc_state *st, PyObject *module);

/* Frees the memory kept for reuse (module clear). */
void rbc_async_call_free_list_clear(rbc_async_state *as);

/* A new awaitable that will run call_with_retry on `retry` (an asyncio
 * Retry object) when first sent to.  is_retryable may be None. */
PyObject *rbc_async_call_new(rbc_state *st, PyObject *retry, PyObject *do_,
                             PyObject *fail, PyObject *is_retryable,
                             PyObject *with_failure_count);

/* The error that was being handled (in fail() or the sleep) when `call`,
 * an awaitable of this file, was closed, or None: what the coroutine
 * design's GeneratorExit gets as __context__, as redis-py's does. */
PyObject *rbc_async_close_context(rbc_state *st, PyObject *call);

/* An awaitable that, when first sent to, handles `error` as the failure
 * of do()'s first try and goes on with the failure loop: the second half
 * of the native-coroutine design (async_coro.c), whose coroutine has
 * already reset the backoff and awaited do() once. */
PyObject *rbc_async_call_new_caught(rbc_state *st, PyObject *retry, PyObject *error,
                                    PyObject *do_, PyObject *fail, PyObject *is_retryable,
                                    PyObject *with_failure_count, const rbc_call_extras *call);

#endif
