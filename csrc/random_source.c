/* The random source of the jittered strategies: see random_source.h. */
#include "random_source.h"
#include "args.h"

#include <string.h>

static void
xoshiro_seed(uint64_t s[4], uint64_t seed)
{
    /* splitmix64 spreads any 64-bit seed over the 256-bit state. */
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        s[i] = z ^ (z >> 31);
    }
}

/* ---- the random module ---- */

/* random._inst, Random.uniform (a plain function when it is the unpatched one)
 * and random._inst.random (a bound C method when unpatched), taken from the
 * instance and its class, not from the module's attributes. */
static int
capture_unpatched_methods(rbc_random_state *rs, PyObject *random_module)
{
    rs->instance = PyObject_GetAttrString(random_module, "_inst");
    if (rs->instance == NULL) {
        return -1;
    }
    PyObject *uniform = PyObject_GetAttrString((PyObject *)Py_TYPE(rs->instance), "uniform");
    if (uniform == NULL) {
        return -1;
    }
    if (PyFunction_Check(uniform)) {
        rs->uniform_function = uniform;
    }
    else {
        Py_DECREF(uniform); /* replaced on the class already: never computed here */
    }
    PyObject *random = PyObject_GetAttr(rs->instance, rs->str_random);
    if (random == NULL) {
        return -1;
    }
    if (PyCFunction_Check(random)) {
        rs->instance_random = random;
    }
    else {
        Py_DECREF(random); /* replaced on the class already: always called */
    }
    return 0;
}

int
rbc_random_init(rbc_state *st, PyObject *module)
{
    rbc_random_state *rs = &st->random;
    rs->use_fast = 0;
    xoshiro_seed(rs->xoshiro, 0);
    rs->str_uniform = PyUnicode_InternFromString("uniform");
    rs->str_random = PyUnicode_InternFromString("random");
    if (rs->str_uniform == NULL || rs->str_random == NULL) {
        return -1;
    }
    PyObject *random_module = PyImport_ImportModule("random");
    if (random_module == NULL) {
        return -1;
    }
    rs->module_dict = Py_NewRef(PyModule_GetDict(random_module));
    int status = capture_unpatched_methods(rs, random_module);
    Py_DECREF(random_module);
    return status;
}

int
rbc_random_traverse(rbc_random_state *rs, visitproc visit, void *arg)
{
    Py_VISIT(rs->module_dict);
    Py_VISIT(rs->instance);
    Py_VISIT(rs->uniform_function);
    Py_VISIT(rs->instance_random);
    return 0;
}

void
rbc_random_clear(rbc_random_state *rs)
{
    Py_CLEAR(rs->module_dict);
    Py_CLEAR(rs->instance);
    Py_CLEAR(rs->uniform_function);
    Py_CLEAR(rs->instance_random);
    Py_CLEAR(rs->str_uniform);
    Py_CLEAR(rs->str_random);
}

/* Whether `uniform` is Random.uniform bound to random._inst: what the
 * module holds until someone replaces random.uniform. */
static int
is_unpatched_uniform(rbc_random_state *rs, PyObject *uniform)
{
    return rs->uniform_function != NULL && PyMethod_Check(uniform)
           && PyMethod_GET_FUNCTION(uniform) == rs->uniform_function
           && PyMethod_GET_SELF(uniform) == rs->instance;
}

/* Whether `random` is the C random() bound to random._inst: what the module
 * holds until someone replaces random.random. */
static int
is_unpatched_random(rbc_random_state *rs, PyObject *random)
{
    return rs->instance_random != NULL && PyCFunction_Check(random)
           && PyCFunction_GET_SELF(random) == rs->instance
           && PyCFunction_GET_FUNCTION(random) == PyCFunction_GET_FUNCTION(rs->instance_random);
}

/* random._inst.random(): what the unpatched uniform calls as self.random().
 * It is a C method taking no argument (METH_NOARGS): called as CPython's
 * own call of one calls it, its function with (self, NULL), which skips
 * the generic call's helpers (a recursion check: it calls nothing back). */
static int
call_instance_random(rbc_random_state *rs, double *out)
{
    PyObject *method = rs->instance_random;
    PyObject *value = PyCFunction_GET_FLAGS(method) == METH_NOARGS
                          ? PyCFunction_GET_FUNCTION(method)(PyCFunction_GET_SELF(method), NULL)
                          : PyObject_CallNoArgs(method);
    if (value == NULL) {
        return -1;
    }
    if (PyFloat_CheckExact(value)) { /* what the C random() returns */
        *out = PyFloat_AS_DOUBLE(value);
        Py_DECREF(value); /* a float: its free runs no Python code */
        return 0;
    }
    *out = PyFloat_AsDouble(value);
    Py_DECREF(value);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

int
rbc_random_uniform_python(rbc_random_state *rs, double a, double b, double *out)
{
    double r;
    PyObject *uniform = PyDict_GetItemWithError(rs->module_dict, rs->str_uniform);
    if (uniform == NULL || rs->instance_random == NULL || !is_unpatched_uniform(rs, uniform)) {
        return PyErr_Occurred() ? -1 : 1;
    }
    if (call_instance_random(rs, &r) < 0) {
        return -1;
    }
    /* random.uniform's formula, operation for operation. */
    *out = a + (b - a) * r;
    return 0;
}

PyObject *
rbc_random_call_uniform(rbc_random_state *rs, PyObject *a, PyObject *b)
{
    PyObject *uniform = PyDict_GetItemWithError(rs->module_dict, rs->str_uniform);
    if (uniform == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_AttributeError,
                            "module 'random' has no attribute 'uniform'");
        }
        return NULL;
    }
    Py_INCREF(uniform); /* the call may replace it in the module */
    PyObject *args[2] = {a, b};
    PyObject *result = PyObject_Vectorcall(uniform, args, 2, NULL);
    Py_DECREF(uniform);
    return result;
}

int
rbc_random_random_unpatched(rbc_random_state *rs, double *out)
{
    if (rs->use_fast) {
        *out = rbc_xoshiro_double(rs->xoshiro);
        return 0;
    }
    PyObject *random = PyDict_GetItemWithError(rs->module_dict, rs->str_random);
    if (random == NULL || !is_unpatched_random(rs, random)) {
        return PyErr_Occurred() ? -1 : 1;
    }
    return call_instance_random(rs, out);
}

int
rbc_random_random_python(rbc_random_state *rs, double *out, PyObject **result)
{
    *result = NULL;
    PyObject *random = PyDict_GetItemWithError(rs->module_dict, rs->str_random);
    if (random == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_AttributeError,
                            "module 'random' has no attribute 'random'");
        }
        return -1;
    }
    if (is_unpatched_random(rs, random)) {
        return call_instance_random(rs, out);
    }
    Py_INCREF(random);
    PyObject *value = PyObject_CallNoArgs(random);
    Py_DECREF(random);
    if (value == NULL) {
        return -1;
    }
    if (PyFloat_CheckExact(value)) {
        *out = PyFloat_AS_DOUBLE(value);
        Py_DECREF(value);
        return 0;
    }
    *result = value;
    return 1;
}

/* ---- module functions ---- */

static int
seed_from_urandom(uint64_t *seed)
{
    PyObject *os = PyImport_ImportModule("os");
    if (os == NULL) {
        return -1;
    }
    PyObject *bytes = PyObject_CallMethod(os, "urandom", "i", (int)sizeof(*seed));
    Py_DECREF(os);
    if (bytes == NULL) {
        return -1;
    }
    if (!PyBytes_Check(bytes) || PyBytes_GET_SIZE(bytes) != (Py_ssize_t)sizeof(*seed)) {
        Py_DECREF(bytes);
        PyErr_SetString(PyExc_RuntimeError, "os.urandom gave an unexpected value");
        return -1;
    }
    memcpy(seed, PyBytes_AS_STRING(bytes), sizeof(*seed));
    Py_DECREF(bytes);
    return 0;
}

static const char *const set_random_source_parameters[] = {"name", "seed"};
static const rbc_signature set_random_source_signature = {"set_random_source",
                                                          set_random_source_parameters, 2, 2};

PyObject *
rbc_set_random_source(PyObject *module, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *values[2] = {NULL, Py_None};
    if (rbc_bind(&set_random_source_signature, args, nargs, kwnames, values) < 0) {
        return NULL;
    }
    PyObject *name = values[0], *seed = values[1];
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError,
                     "set_random_source() argument 'name' must be str, not %.200s", Py_TYPE(name)->tp_name);
        return NULL;
    }
    rbc_random_state *rs = &rbc_get_state(module)->random;
    if (PyUnicode_CompareWithASCIIString(name, "python") == 0) {
        if (seed != Py_None) {
            PyErr_SetString(PyExc_ValueError,
                            "set_random_source('python') takes no seed: "
                            "seed the random module with random.seed()");
            return NULL;
        }
        rs->use_fast = 0;
        Py_RETURN_NONE;
    }
    if (PyUnicode_CompareWithASCIIString(name, "fast") != 0) {
        PyErr_Format(PyExc_ValueError,
                     "set_random_source() argument 'name' must be 'python' or 'fast', not %R",
                     name);
        return NULL;
    }
    uint64_t seed_bits;
    if (seed == Py_None) {
        if (seed_from_urandom(&seed_bits) < 0) {
            return NULL;
        }
    }
    else if (PyLong_Check(seed)) {
        /* Any int: its low 64 bits, two's complement. */
        seed_bits = (uint64_t)PyLong_AsUnsignedLongLongMask(seed);
        if (seed_bits == (uint64_t)-1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    else {
        PyErr_Format(PyExc_TypeError,
                     "set_random_source() argument 'seed' must be int or None, not %.200s",
                     Py_TYPE(seed)->tp_name);
        return NULL;
    }
    xoshiro_seed(rs->xoshiro, seed_bits);
    rs->use_fast = 1;
    Py_RETURN_NONE;
}

PyObject *
rbc_get_random_source(PyObject *module, PyObject *unused)
{
    return PyUnicode_FromString(rbc_get_state(module)->random.use_fast ? "fast" : "python");
}
