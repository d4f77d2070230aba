/* The __slots__ of a Python subclass of our types, in copies and pickles.
 *
 * Our __reduce__, __copy__ and __deepcopy__ write out our fields and the
 * instance __dict__; a subclass's slot values live in neither, and
 * copy.copy, copy.deepcopy and pickle must keep them as they do for
 * redis-py's classes (copyreg's default reduce does).  The slot names are
 * copyreg._slotnames(type), cached by copyreg on the class; for our own
 * seven strategies and two Retry types there are none and nothing is
 * looked up.
 */
#ifndef RBC_SLOTS_H
#define RBC_SLOTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "state.h"

int rbc_slots_init(rbc_slots_state *sl);
int rbc_slots_traverse(rbc_slots_state *sl, visitproc visit, void *arg);
void rbc_slots_clear(rbc_slots_state *sl);

/* Add each slot of `self` that holds a value to `state` (a dict that
 * __setstate__ will setattr item by item).  0, or -1 with an exception. */
int rbc_slots_to_state(rbc_slots_state *sl, PyObject *self, PyObject *state);

/* Set on `copy` each slot of `self` that holds a value: the value itself
 * (memo NULL, copy.copy) or copy.deepcopy(value, memo).  0, or -1. */
int rbc_slots_copy(rbc_state *st, PyObject *self, PyObject *copy, PyObject *memo);

#endif
