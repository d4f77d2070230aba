/* Placeholder until the synchronous Retry lands. */
#include "state.h"

int rbc_retry_init(struct rbc_state *st, PyObject *module) { return 0; }
int rbc_retry_traverse(rbc_retry_state *rs, visitproc visit, void *arg)
{
    Py_VISIT(rs->Retry_type);
    return 0;
}
void rbc_retry_clear(rbc_retry_state *rs) { Py_CLEAR(rs->Retry_type); }
