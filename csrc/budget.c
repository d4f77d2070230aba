/* RetryBudget: see budget.h. */
#include "budget.h"
#include "args.h"

#define BUDGET(op) ((rbc_budget_object *)(op))

static const char *const budget_parameters[] = {"max_tokens", "token_ratio"};
static const rbc_signature budget_signature = {"RetryBudget", budget_parameters, 2, 2};

static PyObject *
budget_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *values[2] = {NULL, NULL};
    if (rbc_bind(&budget_signature, args, PyVectorcall_NARGS(nargsf), kwnames, values) < 0) {
        return NULL;
    }
    double max_tokens, token_ratio;
    if (rbc_positive_value("RetryBudget", "max_tokens", values[0], 0, &max_tokens) < 0
        || rbc_positive_value("RetryBudget", "token_ratio", values[1], 0, &token_ratio) < 0) {
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)type;
    rbc_budget_object *self = (rbc_budget_object *)tp->tp_alloc(tp, 0);
    if (self == NULL) {
        return NULL;
    }
    self->max_tokens_obj = Py_NewRef(values[0]);
    self->token_ratio_obj = Py_NewRef(values[1]);
    self->max_tokens = max_tokens;
    self->token_ratio = token_ratio;
    self->tokens = max_tokens; /* gRFC A6: the bucket starts full */
    self->threshold = max_tokens / 2.0;
    return (PyObject *)self;
}

/* For the type's tp_new: RetryBudget(*args, **kwargs) without vectorcall. */
static PyObject *
budget_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *kwnames = NULL;
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    Py_ssize_t nkw = kwds == NULL ? 0 : PyDict_GET_SIZE(kwds);
    PyObject **stack = PyMem_New(PyObject *, nargs + nkw + 1);
    if (stack == NULL) {
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        stack[i] = PyTuple_GET_ITEM(args, i);
    }
    PyObject *result = NULL;
    if (nkw > 0) {
        kwnames = PyTuple_New(nkw);
        if (kwnames == NULL) {
            goto done;
        }
        Py_ssize_t pos = 0, k = 0;
        PyObject *key, *value;
        while (PyDict_Next(kwds, &pos, &key, &value)) {
            PyTuple_SET_ITEM(kwnames, k, Py_NewRef(key));
            stack[nargs + k] = value;
            k++;
        }
    }
    result = budget_vectorcall((PyObject *)type, stack, (size_t)nargs, kwnames);
done:
    Py_XDECREF(kwnames);
    PyMem_Free(stack);
    return result;
}

static int
budget_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(BUDGET(self)->max_tokens_obj);
    Py_VISIT(BUDGET(self)->token_ratio_obj);
    return 0;
}

static int
budget_clear(PyObject *self)
{
    Py_CLEAR(BUDGET(self)->max_tokens_obj);
    Py_CLEAR(BUDGET(self)->token_ratio_obj);
    return 0;
}

static void
budget_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    (void)budget_clear(self);
    type->tp_free(self);
    Py_DECREF(type);
}

double
rbc_budget_tokens(rbc_budget_object *self)
{
    RBC_EXTRAS_LOCK(self);
    double tokens = self->tokens;
    RBC_EXTRAS_UNLOCK(self);
    return tokens;
}

static PyObject *
budget_get_tokens(PyObject *self, void *closure)
{
    return PyFloat_FromDouble(rbc_budget_tokens(BUDGET(self)));
}

static PyObject *
budget_get_max_tokens(PyObject *self, void *closure)
{
    PyObject *value = BUDGET(self)->max_tokens_obj;
    return value != NULL ? Py_NewRef(value) : PyFloat_FromDouble(BUDGET(self)->max_tokens);
}

static PyObject *
budget_get_token_ratio(PyObject *self, void *closure)
{
    PyObject *value = BUDGET(self)->token_ratio_obj;
    return value != NULL ? Py_NewRef(value) : PyFloat_FromDouble(BUDGET(self)->token_ratio);
}

static PyObject *
budget_get_retry_allowed(PyObject *self, void *closure)
{
    return PyBool_FromLong(rbc_budget_tokens(BUDGET(self)) > BUDGET(self)->threshold);
}

static PyObject *
budget_repr(PyObject *self)
{
    PyObject *max_tokens = budget_get_max_tokens(self, NULL);
    PyObject *ratio = budget_get_token_ratio(self, NULL);
    PyObject *tokens = budget_get_tokens(self, NULL);
    PyObject *repr = NULL;
    if (max_tokens != NULL && ratio != NULL && tokens != NULL) {
        repr = PyUnicode_FromFormat("RetryBudget(max_tokens=%R, token_ratio=%R, tokens=%R)",
                                    max_tokens, ratio, tokens);
    }
    Py_XDECREF(max_tokens);
    Py_XDECREF(ratio);
    Py_XDECREF(tokens);
    return repr;
}

/* Pickled by value: (RetryBudget, (max_tokens, token_ratio), tokens). */
static PyObject *
budget_reduce(PyObject *self, PyObject *unused)
{
    PyObject *max_tokens = budget_get_max_tokens(self, NULL);
    PyObject *ratio = budget_get_token_ratio(self, NULL);
    PyObject *result = NULL;
    if (max_tokens != NULL && ratio != NULL) {
        result = Py_BuildValue("O(OO)d", (PyObject *)Py_TYPE(self), max_tokens, ratio,
                               rbc_budget_tokens(BUDGET(self)));
    }
    Py_XDECREF(max_tokens);
    Py_XDECREF(ratio);
    return result;
}

/* The token count of a pickle, kept in [0, max_tokens]. */
static PyObject *
budget_setstate(PyObject *self, PyObject *state)
{
    double tokens;
    if (rbc_real_value("RetryBudget.__setstate__", "state", state, &tokens) < 0) {
        return NULL;
    }
    rbc_budget_object *me = BUDGET(self);
    if (!(tokens >= 0.0 && tokens <= me->max_tokens)) {
        PyErr_Format(PyExc_ValueError,
                     "RetryBudget.__setstate__() argument 'state' must be a token count "
                     "in [0, max_tokens], not %R",
                     state);
        return NULL;
    }
    RBC_EXTRAS_LOCK(me);
    me->tokens = tokens;
    RBC_EXTRAS_UNLOCK(me);
    Py_RETURN_NONE;
}

/* clang-format off */
static PyGetSetDef budget_getset[] = {
    {"max_tokens", budget_get_max_tokens, NULL, "the size of the bucket (read-only)", NULL},
    {"token_ratio", budget_get_token_ratio, NULL,
     "tokens a successful call_with_retry puts back (read-only)", NULL},
    {"tokens", budget_get_tokens, NULL, "the tokens in the bucket now, in [0, max_tokens]", NULL},
    {"retry_allowed", budget_get_retry_allowed, NULL,
     "whether a retry would be allowed now: tokens > max_tokens / 2", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef budget_methods[] = {
    {"__reduce__", budget_reduce, METH_NOARGS, NULL},
    {"__setstate__", budget_setstate, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot budget_slots[] = {
    {Py_tp_doc, (void *)"RetryBudget(max_tokens, token_ratio)\n--\n\n"
                        "Retry throttling as gRPC's (gRFC A6), shared by every Retry that holds\n"
                        "it: the bucket starts with max_tokens tokens; each attempt that fails\n"
                        "with a supported error takes one (never below 0); each call_with_retry\n"
                        "that succeeds puts token_ratio back (never above max_tokens). A retry\n"
                        "is allowed only while more than max_tokens / 2 tokens are left; a\n"
                        "call's first attempt is never refused."},
    {Py_tp_new, budget_new},
    {Py_tp_repr, budget_repr},
    {Py_tp_getset, budget_getset},
    {Py_tp_methods, budget_methods},
    {Py_tp_traverse, budget_traverse},
    {Py_tp_clear, budget_clear},
    {Py_tp_dealloc, budget_dealloc},
    {0, NULL},
};
/* clang-format on */

static PyType_Spec budget_spec = {
    .name = "redis_backoff_c.RetryBudget",
    .basicsize = sizeof(rbc_budget_object),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = budget_slots,
};

int
rbc_budget_init(rbc_extras_state *es, PyObject *module)
{
    es->Budget_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &budget_spec, NULL);
    if (es->Budget_type == NULL) {
        return -1;
    }
    es->Budget_type->tp_vectorcall = budget_vectorcall;
    return PyModule_AddObjectRef(module, "RetryBudget", (PyObject *)es->Budget_type);
}
