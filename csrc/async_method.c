/* The descriptor of async_method.h: a C method that inspect takes for an
 * `async def`.
 *
 * Calls: the type has Py_TPFLAGS_METHOD_DESCRIPTOR, so `obj.meth(a, b)`
 * is run by the interpreter as meth(obj, a, b) through our vectorcall,
 * with no bound method made (LOAD_METHOD / LOAD_ATTR's method form, and
 * their specialisations, which also need an immutable type); only
 * `f = obj.meth` makes one, with __get__, as a Python function does.
 *
 * Introspection: inspect treats an object as "function-like" (see
 * _signature_is_functionlike in Lib/inspect.py, 3.10 to 3.13) when it is
 * callable, not a class, and has a str __name__, a code object __code__,
 * __defaults__ (None or a tuple), __kwdefaults__ (None or a dict) and
 * __annotations__ (None or a dict); iscoroutinefunction() then reads the
 * CO_COROUTINE flag of its __code__, and signature() builds the signature
 * from __code__ and the defaults as for a Python function.  These
 * attributes are the template's, an `async def` given once with
 * _present_as(); before that the descriptor has none of them and is a
 * plain C method to inspect. */
#include "async_method.h"
#include "compat.h"

#include <structmember.h> /* PyMemberDef before 3.12 */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall; /* method_vectorcall, read through tp_vectorcall_offset */
    PyTypeObject *owner;       /* the type whose instances it applies to */
    rbc_method_impl impl;
    void *context;    /* impl's first argument */
    const char *name; /* static */
    const char *doc;  /* static; __doc__ while there is no template */
    PyObject *template;
} rbc_async_method;

/* ---------------------------------------------------------------------- */
/* Calls                                                                   */

static int
check_self(rbc_async_method *m, PyObject *self)
{
    if (PyObject_TypeCheck(self, m->owner)) {
        return 0;
    }
    /* method_descriptor's words. */
    PyErr_Format(PyExc_TypeError,
                 "descriptor '%s' for '%.100s' objects doesn't apply to a '%.100s' object",
                 m->name, m->owner->tp_name, Py_TYPE(self)->tp_name);
    return -1;
}

static PyObject *
needs_an_argument(rbc_async_method *m)
{
    PyErr_Format(PyExc_TypeError, "descriptor '%s' of '%.100s' object needs an argument", m->name,
                 m->owner->tp_name);
    return NULL;
}

/* impl(context, self, ...).  The context (the module state) lives as long
 * as the owner holds its module, not as long as the owner lives: in the
 * interpreter's final collections the owner's clear drops its module
 * (ht_module), which may free the state while this descriptor is still
 * reachable. */
static inline PyObject *
call_impl(rbc_async_method *m, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
          PyObject *kwnames)
{
    if (((PyHeapTypeObject *)m->owner)->ht_module == NULL) {
        PyErr_Format(PyExc_RuntimeError, "%.100s.%s: its module was cleared", m->owner->tp_name,
                     m->name);
        return NULL;
    }
    return m->impl(m->context, self, args, nargs, kwnames);
}

/* Meth(self=obj, ...): the template is an `async def` whose `self` may be
 * passed by keyword, so this one takes it too.  Rare; off the usual path. */
static PyObject *
call_with_self_keyword(rbc_async_method *m, PyObject *const *args, PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    Py_ssize_t at = -1;
    for (Py_ssize_t i = 0; i < nkw && at < 0; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_Check(key) && PyUnicode_CompareWithASCIIString(key, "self") == 0) {
            at = i;
        }
    }
    if (at < 0) {
        return needs_an_argument(m);
    }
    PyObject *self = args[at];
    if (check_self(m, self) < 0) {
        return NULL;
    }
    PyObject *rest_names = PyTuple_New(nkw - 1);
    PyObject **rest = PyMem_New(PyObject *, nkw); /* nkw >= 1 */
    PyObject *result = NULL;
    if (rest_names == NULL || rest == NULL) {
        if (rest == NULL) {
            PyErr_NoMemory();
        }
        goto done;
    }
    for (Py_ssize_t i = 0, j = 0; i < nkw; i++) {
        if (i != at) {
            PyTuple_SET_ITEM(rest_names, j, Py_NewRef(PyTuple_GET_ITEM(kwnames, i)));
            rest[j++] = args[i];
        }
    }
    result = call_impl(m, self, rest, 0, nkw > 1 ? rest_names : NULL);
done:
    Py_XDECREF(rest_names);
    PyMem_Free(rest);
    return result;
}

/* Anything but an instance of the exact owner type first: a subclass's
 * instance, a wrong one, or self by keyword.  Kept out of line so that
 * method_vectorcall stays a type compare and a tail call. */
static Py_NO_INLINE PyObject *
method_vectorcall_other(rbc_async_method *m, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames)
{
    if (nargs < 1) {
        return call_with_self_keyword(m, args, kwnames);
    }
    if (check_self(m, args[0]) < 0) {
        return NULL;
    }
    return call_impl(m, args[0], args + 1, nargs - 1, kwnames);
}

/* meth(obj, *args, **kwargs): the only work above the C method's own is
 * the type check of obj, which a method_descriptor makes too. */
static PyObject *
method_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    rbc_async_method *m = (rbc_async_method *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs >= 1 && Py_IS_TYPE(args[0], m->owner)) {
        return call_impl(m, args[0], args + 1, nargs - 1, kwnames);
    }
    return method_vectorcall_other(m, args, nargs, kwnames);
}

/* Meth.__get__(obj): a bound method, as a Python function gives; from the
 * class (obj None), the descriptor itself. */
static PyObject *
method_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(self);
    }
    return PyMethod_New(self, obj);
}

/* ---------------------------------------------------------------------- */
/* The template                                                            */

static PyObject *
present_as(PyObject *self, PyObject *template)
{
    rbc_async_method *m = (rbc_async_method *)self;
    if (!PyFunction_Check(template)
        || !(((PyCodeObject *)PyFunction_GET_CODE(template))->co_flags & CO_COROUTINE)) {
        PyErr_Format(PyExc_TypeError,
                     "_present_as() argument must be an async def function, not %.200s",
                     Py_TYPE(template)->tp_name);
        return NULL;
    }
    Py_XSETREF(m->template, Py_NewRef(template));
    Py_RETURN_NONE;
}

/* The template's attribute `closure` names; AttributeError without one,
 * which is what keeps an untemplated descriptor a plain C method to
 * inspect. */
static PyObject *
template_attribute(PyObject *self, void *closure)
{
    rbc_async_method *m = (rbc_async_method *)self;
    if (m->template == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%s'",
                     Py_TYPE(self)->tp_name, (const char *)closure);
        return NULL;
    }
    return PyObject_GetAttrString(m->template, (const char *)closure);
}

static PyObject *
get_name(PyObject *self, void *closure)
{
    return PyUnicode_FromString(((rbc_async_method *)self)->name);
}

/* "Retry.call_with_retry": the owner's __qualname__ and the name. */
static PyObject *
get_qualname(PyObject *self, void *closure)
{
    rbc_async_method *m = (rbc_async_method *)self;
    if (m->template != NULL) {
        return PyObject_GetAttrString(m->template, "__qualname__");
    }
    /* PyType_GetQualName() is 3.11+. */
    PyObject *owner = PyObject_GetAttrString((PyObject *)m->owner, "__qualname__");
    if (owner == NULL) {
        return NULL;
    }
    PyObject *result = PyUnicode_FromFormat("%U.%s", owner, m->name);
    Py_DECREF(owner);
    return result;
}

static PyObject *
get_doc(PyObject *self, void *closure)
{
    rbc_async_method *m = (rbc_async_method *)self;
    if (m->template != NULL) {
        return PyObject_GetAttrString(m->template, "__doc__");
    }
    return PyUnicode_FromString(m->doc);
}

/* The owner's module, as for a function defined in its class. */
static PyObject *
get_module(PyObject *self, void *closure)
{
    return PyObject_GetAttrString((PyObject *)((rbc_async_method *)self)->owner, "__module__");
}

/* Pickled by reference, as a method_descriptor is: getattr(owner, name). */
static PyObject *
method_reduce(PyObject *self, PyObject *unused)
{
    rbc_async_method *m = (rbc_async_method *)self;
    PyObject *builtins = PyEval_GetBuiltins(); /* borrowed */
    PyObject *getattr = builtins == NULL ? NULL : PyDict_GetItemString(builtins, "getattr");
    if (getattr == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "builtins.getattr is missing");
        }
        return NULL;
    }
    return Py_BuildValue("O(Os)", getattr, (PyObject *)m->owner, m->name);
}

static PyObject *
method_repr(PyObject *self)
{
    rbc_async_method *m = (rbc_async_method *)self;
    return PyUnicode_FromFormat("<async method '%s' of '%s' objects>", m->name, m->owner->tp_name);
}

/* ---------------------------------------------------------------------- */
/* The type                                                                */

static int
method_traverse(PyObject *self, visitproc visit, void *arg)
{
    rbc_async_method *m = (rbc_async_method *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(m->owner);
    Py_VISIT(m->template);
    return 0;
}

/* The owner stays until dealloc, so a call or a repr never meets a
 * cleared one: the cycle owner -> its dict -> this descriptor -> owner is
 * broken by the owner's own clear, as for a method_descriptor. */
static int
method_clear(PyObject *self)
{
    Py_CLEAR(((rbc_async_method *)self)->template);
    return 0;
}

static void
method_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    (void)method_clear(self);
    Py_DECREF(((rbc_async_method *)self)->owner);
    type->tp_free(self);
    Py_DECREF(type);
}

/* clang-format off */
static PyGetSetDef method_getset[] = {
    {"__code__", template_attribute, NULL, NULL, "__code__"},
    {"__defaults__", template_attribute, NULL, NULL, "__defaults__"},
    {"__kwdefaults__", template_attribute, NULL, NULL, "__kwdefaults__"},
    {"__annotations__", template_attribute, NULL, NULL, "__annotations__"},
    {"__globals__", template_attribute, NULL, NULL, "__globals__"},
    {"__name__", get_name, NULL, NULL, NULL},
    {"__qualname__", get_qualname, NULL, NULL, NULL},
    {"__doc__", get_doc, NULL, NULL, NULL},
    {"__module__", get_module, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef method_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(rbc_async_method, vectorcall), READONLY, NULL},
    {"__objclass__", T_OBJECT, offsetof(rbc_async_method, owner), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef method_methods[] = {
    {"_present_as", present_as, METH_O,
     "_present_as(template, /)\n--\n\n"
     "Answer inspect's questions about functions (__code__, __defaults__,\n"
     "...) from `template`, the async def this C method stands for."},
    {"__reduce__", method_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot method_slots[] = {
    /* No Py_tp_doc: the type's __doc__ would hide the instances' own. */
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, method_descr_get},
    {Py_tp_repr, method_repr},
    {Py_tp_getset, method_getset},
    {Py_tp_members, method_members},
    {Py_tp_methods, method_methods},
    {Py_tp_traverse, method_traverse},
    {Py_tp_clear, method_clear},
    {Py_tp_dealloc, method_dealloc},
    {0, NULL},
};
/* clang-format on */

static PyType_Spec method_spec = {
    .name = "redis_backoff_c._speedups.async_method",
    .basicsize = sizeof(rbc_async_method),
    .itemsize = 0,
    /* METHOD_DESCRIPTOR: called unbound by the interpreter; IMMUTABLETYPE:
     * which the interpreter's specialisation of method loads requires. */
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_METHOD_DESCRIPTOR
             | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = method_slots,
};

PyTypeObject *
rbc_async_method_type_new(PyObject *module)
{
    return (PyTypeObject *)PyType_FromModuleAndSpec(module, &method_spec, NULL);
}

PyObject *
rbc_async_method_new(PyTypeObject *method_type, PyTypeObject *owner, const char *name,
                     rbc_method_impl impl, void *context, const char *doc)
{
    rbc_async_method *m = PyObject_GC_New(rbc_async_method, method_type);
    if (m == NULL) {
        return NULL;
    }
    m->vectorcall = method_vectorcall;
    m->owner = (PyTypeObject *)Py_NewRef(owner);
    m->impl = impl;
    m->context = context;
    m->name = name;
    m->doc = doc;
    m->template = NULL;
    PyObject_GC_Track(m);
    return (PyObject *)m;
}
