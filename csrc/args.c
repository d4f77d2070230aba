/* The helpers below every concern: see args.h. */
#include "args.h"

#include <math.h>

/* The index of parameter `key` of `sig`, or -1 with a TypeError. */
static Py_ssize_t
parameter_index(const rbc_signature *sig, PyObject *key)
{
    if (sig->count == 0) {
        PyErr_Format(PyExc_TypeError, "%s() takes no arguments", sig->function);
        return -1;
    }
    for (Py_ssize_t j = 0; j < sig->count; j++) {
        if (PyUnicode_Check(key) && PyUnicode_CompareWithASCIIString(key, sig->names[j]) == 0) {
            return j;
        }
    }
    PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%S'", sig->function,
                 key);
    return -1;
}

/* The positional arguments, then one keyword at a time (keyword_value),
 * then the check that every required one came. */
static int
bind_positional(const rbc_signature *sig, PyObject *const *args, Py_ssize_t nargs,
                PyObject **values)
{
    if (nargs > sig->positional) {
        if (sig->positional == 0) {
            PyErr_Format(PyExc_TypeError, "%s() takes no arguments", sig->function);
        }
        else {
            PyErr_Format(PyExc_TypeError,
                         "%s() takes at most %zd positional argument%s (%zd given)",
                         sig->function, sig->positional, sig->positional == 1 ? "" : "s", nargs);
        }
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        values[i] = args[i];
    }
    return 0;
}

static int
bind_keyword(const rbc_signature *sig, Py_ssize_t nargs, PyObject *key, PyObject *value,
             PyObject **values)
{
    Py_ssize_t slot = parameter_index(sig, key);
    if (slot < 0) {
        return -1;
    }
    if (slot < nargs) {
        PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'",
                     sig->function, sig->names[slot]);
        return -1;
    }
    values[slot] = value;
    return 0;
}

static int
check_required(const rbc_signature *sig, PyObject **values)
{
    for (Py_ssize_t j = 0; j < sig->count; j++) {
        if (values[j] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %zd)",
                         sig->function, sig->names[j], j + 1);
            return -1;
        }
    }
    return 0;
}

int
rbc_bind_keywords(const rbc_signature *sig, PyObject *const *args, Py_ssize_t nargs,
                  PyObject *kwnames, PyObject **values)
{
    if (bind_positional(sig, args, nargs, values) < 0) {
        return -1;
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        if (bind_keyword(sig, nargs, PyTuple_GET_ITEM(kwnames, k), args[nargs + k], values) < 0) {
            return -1;
        }
    }
    return check_required(sig, values);
}

int
rbc_bind_tuple(const rbc_signature *sig, PyObject *args, PyObject *kwds, PyObject **values)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (bind_positional(sig, &PyTuple_GET_ITEM(args, 0), nargs, values) < 0) {
        return -1;
    }
    /* The call's own dict and tuple, which no other code holds: the
     * borrowed references stay valid while the caller runs. */
    Py_ssize_t position = 0;
    PyObject *key, *value;
    while (kwds != NULL && PyDict_Next(kwds, &position, &key, &value)) {
        if (bind_keyword(sig, nargs, key, value, values) < 0) {
            return -1;
        }
    }
    return check_required(sig, values);
}

int
rbc_is_real_number(PyObject *obj)
{
    if (PyFloat_Check(obj) || PyLong_Check(obj)) {
        return 1;
    }
    PyNumberMethods *nb = Py_TYPE(obj)->tp_as_number;
    return nb != NULL && (nb->nb_float != NULL || nb->nb_index != NULL);
}

int
rbc_check_real(const char *owner, const char *name, PyObject *value)
{
    if (rbc_is_real_number(value)) {
        return 0;
    }
    PyErr_Format(PyExc_TypeError,
                 "%s() argument '%s' must be a real number, not %.200s",
                 owner, name, Py_TYPE(value)->tp_name);
    return -1;
}

int
rbc_refuse_delete(PyObject *value, const char *name)
{
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete attribute '%s'", name);
        return -1;
    }
    return 0;
}

/* Python's tuple hash (xxHash-based, CPython 3.8 and later) over hashes
 * already computed: hash((a, b, ...)) without building the tuple, for the
 * strategies' hash((base, cap)) and Retry's hash((backoff, retries,
 * frozenset(errors))). */
#if SIZEOF_PY_UHASH_T > 4
#define XXPRIME_1 ((Py_uhash_t)11400714785074694791ULL)
#define XXPRIME_2 ((Py_uhash_t)14029467366897019727ULL)
#define XXPRIME_5 ((Py_uhash_t)2870177450012600261ULL)
#define XXROTATE(x) ((x << 31) | (x >> 33))
#else
#define XXPRIME_1 ((Py_uhash_t)2654435761UL)
#define XXPRIME_2 ((Py_uhash_t)2246822519UL)
#define XXPRIME_5 ((Py_uhash_t)374761393UL)
#define XXROTATE(x) ((x << 13) | (x >> 19))
#endif

Py_hash_t
rbc_combine_hashes(const Py_hash_t *lanes, Py_ssize_t count)
{
    Py_uhash_t acc = XXPRIME_5;
    for (Py_ssize_t i = 0; i < count; i++) {
        acc += (Py_uhash_t)lanes[i] * XXPRIME_2;
        acc = XXROTATE(acc);
        acc *= XXPRIME_1;
    }
    acc += (Py_uhash_t)count ^ (XXPRIME_5 ^ 3527539UL);
    if (acc == (Py_uhash_t)-1) {
        return 1546275796;
    }
    return (Py_hash_t)acc;
}

PyObject *
rbc_import_attr(const char *module_name, const char *name)
{
    PyObject *module = PyImport_ImportModule(module_name);
    if (module == NULL) {
        return NULL;
    }
    PyObject *value = PyObject_GetAttrString(module, name);
    Py_DECREF(module);
    return value;
}

PyObject *
rbc_function_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(self);
    }
    return PyMethod_New(self, obj);
}

PyObject *
rbc_wrapped_attr(PyObject *original, const char *name)
{
    if (original == NULL) {
        PyErr_SetString(PyExc_AttributeError, "the wrapper has been cleared");
        return NULL;
    }
    if (name == NULL) {
        return Py_NewRef(original);
    }
    Py_INCREF(original); /* held: the lookup may run code */
    PyObject *value = PyObject_GetAttrString(original, name);
    Py_DECREF(original);
    return value;
}

PyObject *
rbc_coroutine_mark(void)
{
    /* Its name on 3.13 and later, and on 3.12. */
    PyObject *mark = rbc_import_attr("inspect", "_is_coroutine_mark");
    if (mark == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        mark = rbc_import_attr("inspect", "_is_coroutine_marker");
    }
    return mark;
}

PyObject *
rbc_module_attr(PyObject *module_name, PyObject *name)
{
    PyObject *module = PyImport_GetModule(module_name);
    if (module == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        module = PyImport_Import(module_name);
        if (module == NULL) {
            return NULL;
        }
    }
    PyObject *value = PyObject_GetAttr(module, name);
    Py_DECREF(module);
    return value;
}

/* A real number's value as a double, or -1 with TypeError naming it. */
int
rbc_real_value(const char *owner, const char *name, PyObject *value, double *out)
{
    if (rbc_check_real(owner, name, value) < 0) {
        return -1;
    }
    double v = PyFloat_AsDouble(value);
    if (v == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    *out = v;
    return 0;
}

/* A real number > 0 (and finite unless allow_infinite): ValueError naming
 * it otherwise. */
int
rbc_positive_value(const char *owner, const char *name, PyObject *value, int allow_infinite,
                   double *out)
{
    if (rbc_real_value(owner, name, value, out) < 0) {
        return -1;
    }
    if (!(*out > 0.0) || (!allow_infinite && isinf(*out))) {
        PyErr_Format(PyExc_ValueError, "%s() argument '%s' must be a %spositive number, not %R",
                     owner, name, allow_infinite ? "" : "finite ", value);
        return -1;
    }
    return 0;
}
