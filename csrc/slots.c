/* __slots__ of subclasses in copies and pickles: see slots.h. */
#include "state.h"

static PyObject *
attribute_of_module(const char *module_name, const char *name)
{
    PyObject *module = PyImport_ImportModule(module_name);
    if (module == NULL) {
        return NULL;
    }
    PyObject *value = PyObject_GetAttrString(module, name);
    Py_DECREF(module);
    return value;
}

int
rbc_slots_init(rbc_slots_state *sl)
{
    sl->str_slots = PyUnicode_InternFromString("__slots__");
    sl->slotnames = attribute_of_module("copyreg", "_slotnames");
    sl->deepcopy = attribute_of_module("copy", "deepcopy");
    return sl->str_slots == NULL || sl->slotnames == NULL || sl->deepcopy == NULL ? -1 : 0;
}

int
rbc_slots_traverse(rbc_slots_state *sl, visitproc visit, void *arg)
{
    Py_VISIT(sl->slotnames);
    Py_VISIT(sl->deepcopy);
    return 0;
}

void
rbc_slots_clear(rbc_slots_state *sl)
{
    Py_CLEAR(sl->str_slots);
    Py_CLEAR(sl->slotnames);
    Py_CLEAR(sl->deepcopy);
}

/* Whether a class statement in type's MRO declared __slots__ (ours never
 * do; a static type such as object is not one). */
static int
declares_slots(rbc_slots_state *sl, PyTypeObject *type)
{
    PyObject *mro = type->tp_mro;
    for (Py_ssize_t i = 0; mro != NULL && i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *base = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (!(base->tp_flags & Py_TPFLAGS_HEAPTYPE) || base->tp_dict == NULL) {
            continue;
        }
        int found = PyDict_Contains(base->tp_dict, sl->str_slots);
        if (found != 0) {
            return found;
        }
    }
    return 0;
}

/* copyreg._slotnames(type(self)) (a list, new reference) when a subclass
 * declared __slots__, else NULL without an exception. */
static PyObject *
slot_names_of(rbc_slots_state *sl, PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    int declared = declares_slots(sl, type);
    if (declared <= 0) {
        return NULL;
    }
    PyObject *names = PyObject_CallOneArg(sl->slotnames, (PyObject *)type);
    if (names != NULL && !PyList_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "copyreg._slotnames() did not return a list");
        Py_CLEAR(names);
    }
    return names;
}

/* The value of slot `name`, a new reference; NULL without an exception
 * when the slot is empty. */
static PyObject *
slot_value(PyObject *self, PyObject *name)
{
    PyObject *value;
    if (rbc_get_optional_attr(self, name, &value) < 0) {
        return NULL;
    }
    return value;
}

int
rbc_slots_to_state(rbc_slots_state *sl, PyObject *self, PyObject *state)
{
    PyObject *names = slot_names_of(sl, self);
    if (names == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(names); i++) {
        /* Owned: reading the slot may run code that empties the list. */
        PyObject *name = Py_NewRef(PyList_GET_ITEM(names, i));
        PyObject *value = slot_value(self, name);
        if (value == NULL) {
            Py_DECREF(name);
            if (PyErr_Occurred()) {
                goto error;
            }
            continue;
        }
        int status = PyDict_SetItem(state, name, value);
        Py_DECREF(name);
        Py_DECREF(value);
        if (status < 0) {
            goto error;
        }
    }
    Py_DECREF(names);
    return 0;
error:
    Py_DECREF(names);
    return -1;
}

int
rbc_slots_copy(rbc_slots_state *sl, PyObject *self, PyObject *copy, PyObject *memo)
{
    PyObject *names = slot_names_of(sl, self);
    if (names == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(names); i++) {
        /* Owned: reading and deep-copying the slot may run code that
         * empties the list. */
        PyObject *name = Py_NewRef(PyList_GET_ITEM(names, i));
        PyObject *value = slot_value(self, name);
        if (value == NULL) {
            Py_DECREF(name);
            if (PyErr_Occurred()) {
                goto error;
            }
            continue;
        }
        if (memo != NULL) {
            Py_SETREF(value, PyObject_CallFunctionObjArgs(sl->deepcopy, value, memo, NULL));
            if (value == NULL) {
                Py_DECREF(name);
                goto error;
            }
        }
        int status = PyObject_SetAttr(copy, name, value);
        Py_DECREF(name);
        Py_DECREF(value);
        if (status < 0) {
            goto error;
        }
    }
    Py_DECREF(names);
    return 0;
error:
    Py_DECREF(names);
    return -1;
}
