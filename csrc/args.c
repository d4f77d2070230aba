/* The helpers below every concern: see args.h. */
#include "args.h"

int
rbc_bind_args(const char *fname, const char *const *names, Py_ssize_t nnames,
              PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
              PyObject **values)
{
    if (nargs > nnames) {
        PyErr_Format(PyExc_TypeError,
                     "%s() takes at most %zd positional argument%s (%zd given)",
                     fname, nnames, nnames == 1 ? "" : "s", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        values[i] = args[i];
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t slot = -1;
        for (Py_ssize_t j = 0; j < nnames && slot < 0; j++) {
            if (PyUnicode_CompareWithASCIIString(key, names[j]) == 0) {
                slot = j;
            }
        }
        if (slot < 0) {
            PyErr_Format(PyExc_TypeError,
                         "%s() got an unexpected keyword argument '%U'", fname, key);
            return -1;
        }
        if (slot < nargs) {
            PyErr_Format(PyExc_TypeError,
                         "%s() got multiple values for argument '%s'", fname, names[slot]);
            return -1;
        }
        values[slot] = args[nargs + k];
    }
    for (Py_ssize_t j = 0; j < nnames; j++) {
        if (values[j] == NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%s() missing required argument '%s' (pos %zd)",
                         fname, names[j], j + 1);
            return -1;
        }
    }
    return 0;
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
