/* A C method that introspection takes for an `async def`.
 *
 * redis-py 8.2's asyncio clients keep a retry only when
 * inspect.iscoroutinefunction(type(retry).call_with_retry) is true, and
 * convert any other one to their own Retry.  A C method (method_descriptor)
 * is not a coroutine function to inspect, however it behaves.  This
 * descriptor calls a C function exactly as a method_descriptor does (the
 * interpreter calls it unbound, through vectorcall, with no bound-method
 * object), and, once given the `async def` it stands for (its "template"),
 * answers inspect's questions about functions (__code__, __defaults__,
 * __kwdefaults__, __annotations__, __name__, ...) from that function:
 * inspect.iscoroutinefunction() and inspect.signature() see the async def
 * on every CPython 3.10 to 3.13, as they see Cython's functions. */
#ifndef RBC_ASYNC_METHOD_H
#define RBC_ASYNC_METHOD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The C function behind the method: METH_FASTCALL | METH_KEYWORDS with
 * the instance as `self` (an instance of the owner type), and first the
 * `context` the descriptor was made with (the module state, which saves
 * the call looking it up). */
typedef PyObject *(*rbc_method_impl)(void *context, PyObject *self, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames);

/* Creates the descriptor type (one per module). */
PyTypeObject *rbc_async_method_type_new(PyObject *module);

/* A new descriptor named `name` (a static string) for instances of `owner`
 * (a heap type), calling `impl` with `context`, which must live as long as
 * the owner holds its module (ht_module): the descriptor refuses calls
 * once the owner has dropped it; `doc` (static) is its __doc__ until it is given a
 * template. */
PyObject *rbc_async_method_new(PyTypeObject *method_type, PyTypeObject *owner, const char *name,
                               rbc_method_impl impl, void *context, const char *doc);

#endif
