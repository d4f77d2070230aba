/* __slots__ of subclasses in copies and pickles: see slots.h. */
#include "slots.h"
#include "args.h"

int
rbc_slots_init(rbc_slots_state *sl)
{
    sl->str_slots = PyUnicode_InternFromString("__slots__");
    sl->slotnames = rbc_import_attr("copyreg", "_slotnames");
    return sl->str_slots == NULL || sl->slotnames == NULL ? -1 : 0;
}

int
rbc_slots_traverse(rbc_slots_state *sl, visitproc visit, void *arg)
{
    Py_VISIT(sl->slotnames);
    return 0;
}

void
rbc_slots_clear(rbc_slots_state *sl)
{
    Py_CLEAR(sl->str_slots);
    Py_CLEAR(sl->slotnames);
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

/* [(name, value), ...] for each slot of `self` that holds a value: a new
 * list that no other code can reach, so its items stay put whatever the
 * code run later does.  NULL without an exception when no class declared
 * __slots__. */
static PyObject *
slot_items(rbc_slots_state *sl, PyObject *self)
{
    PyObject *names = slot_names_of(sl, self);
    if (names == NULL) {
        return NULL;
    }
    PyObject *items = PyList_New(0);
    for (Py_ssize_t i = 0; items != NULL && i < PyList_GET_SIZE(names); i++) {
        /* Owned: reading the slot may run code that empties the list. */
        PyObject *name = Py_NewRef(PyList_GET_ITEM(names, i));
        PyObject *value;
        int found = rbc_get_optional_attr(self, name, &value);
        PyObject *item = found > 0 ? PyTuple_Pack(2, name, value) : NULL;
        Py_DECREF(name);
        Py_XDECREF(value);
        if (found < 0 || (found > 0 && (item == NULL || PyList_Append(items, item) < 0))) {
            Py_CLEAR(items);
        }
        Py_XDECREF(item);
    }
    Py_DECREF(names);
    return items;
}

int
rbc_slots_to_state(rbc_slots_state *sl, PyObject *self, PyObject *state)
{
    PyObject *items = slot_items(sl, self);
    if (items == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    int status = 0;
    for (Py_ssize_t i = 0; status == 0 && i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        status = PyDict_SetItem(state, PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1));
    }
    Py_DECREF(items);
    return status;
}

int
rbc_slots_copy(rbc_state *st, PyObject *self, PyObject *copy, PyObject *memo)
{
    PyObject *items = slot_items(&st->slots, self);
    if (items == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    int status = 0;
    for (Py_ssize_t i = 0; status == 0 && i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        PyObject *value = PyTuple_GET_ITEM(item, 1);
        value = memo == NULL
                    ? Py_NewRef(value)
                    : PyObject_CallFunctionObjArgs(st->common.copy_deepcopy, value, memo, NULL);
        status = value == NULL ? -1 : PyObject_SetAttr(copy, PyTuple_GET_ITEM(item, 0), value);
        Py_XDECREF(value);
    }
    Py_DECREF(items);
    return status;
}
