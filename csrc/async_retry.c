/* Placeholder until the asyncio Retry lands. */
#include "state.h"

int rbc_async_init(struct rbc_state *st, PyObject *module) { return 0; }
int rbc_async_traverse(rbc_async_state *as, visitproc visit, void *arg)
{
    Py_VISIT(as->AsyncRetry_type);
    return 0;
}
void rbc_async_clear(rbc_async_state *as) { Py_CLEAR(as->AsyncRetry_type); }
