"""A subclass's own state protocol on the C types, as redis-py's classes
honour it.

redis-py's strategies and Retry keep their fields in the instance
``__dict__``, so copy.copy, copy.deepcopy and pickle go through the object's
``__getstate__`` and ``__setstate__``: a subclass that overrides them (to
leave out a lock and build it again, say, with ``self.__dict__.update(state)``)
gets them called, and a subclass may put a field in ``__slots__``.  The C
types keep their fields in C, behind data descriptors, and copy and pickle
them in C.  So that a subclass's protocol works as on redis-py:

- the C types' ``__getstate__`` gives redis-py's state: the fields, the
  instance ``__dict__`` and the slots, in one dict (``super().__getstate__()``
  in a subclass included);
- a subclass that overrides ``__getstate__`` or ``__setstate__`` gets
  ``__copy__``, ``__deepcopy__`` and ``__reduce__`` that call them as copy
  and pickle would, after putting the C fields in place; any field the
  subclass's ``__setstate__`` left in the instance ``__dict__`` (where
  redis-py keeps it, and where the C descriptor would hide it) is moved into
  the field;
- a subclass that names a field in ``__slots__`` gets no slot for it: the C
  field serves the name, as the slot serves it on redis-py's class.

:func:`install` puts this on the C types at import (their
``__init_subclass__`` runs for every subclass); a subclass whose protocol is
assigned after its class statement is not seen.  The C fields always reach
the copy, even where a subclass's ``__getstate__`` leaves them out (redis-py's
copy would lack them).
"""

from __future__ import annotations

import copy
import types
from typing import Any

__all__ = ["install"]

#: The C types install() was given.
_C_TYPES: set[type] = set()
_DESCRIPTORS: tuple[type, ...] = (types.GetSetDescriptorType, types.MemberDescriptorType)


def _c_base(cls: type) -> Any:
    """The C type `cls` derives from."""
    return next(base for base in cls.__mro__ if base in _C_TYPES)


def _field_names(c_type: Any) -> tuple[str, ...]:
    """The attributes the C type keeps in C (its data descriptors)."""
    return tuple(
        name
        for name, value in vars(c_type).items()
        if isinstance(value, _DESCRIPTORS) and not name.startswith("__")
    )


def _getstate(self: Any) -> dict[str, Any]:
    """The state redis-py's object would give: the fields, the instance
    ``__dict__`` and the slots, in one dict."""
    state: dict[str, Any] = _c_base(type(self)).__reduce__(self)[2]
    return state


def _own_fields(obj: Any, c_type: Any) -> dict[str, Any]:
    """The C fields of `obj`, as its C type's ``__setstate__`` takes them."""
    names = _field_names(c_type)
    state = c_type.__reduce__(obj)[2]
    return {name: value for name, value in state.items() if name in names}


def _rebuild(cls: Any, fields: dict[str, Any]) -> Any:
    """A new object of `cls` (``cls.__new__``, as copy and pickle make it)
    with the C fields given."""
    made = cls.__new__(cls)
    c_type: Any = _c_base(cls)
    c_type.__setstate__(made, fields)
    return made


def _apply(obj: Any, state: Any) -> None:
    """What copy and pickle do with a state (the object's ``__setstate__``),
    then the C fields that it left in the instance ``__dict__`` moved into
    place."""
    c_type: Any = _c_base(type(obj))
    if type(obj).__setstate__ is c_type.__setstate__ and not isinstance(state, dict):
        # No __setstate__ of the subclass's: the default protocol's
        # (dict, slots) pair, as object.__getstate__ may give it.
        state, slots = state if isinstance(state, tuple) and len(state) == 2 else (state, None)
        merged = dict(state or {})
        merged.update(slots or {})
        state = merged
    obj.__setstate__(state)
    instance = getattr(obj, "__dict__", None)
    if not instance:
        return
    for name in _field_names(c_type):
        if name in instance:
            setattr(obj, name, instance.pop(name))


def _reconstruct(obj: Any, memo: dict[int, Any] | None) -> Any:
    """copy.copy (memo None) or copy.deepcopy of `obj`, as copy's
    ``_reconstruct`` makes it from ``__getstate__``, with the C fields."""
    c_type: Any = _c_base(type(obj))
    fields = _own_fields(obj, c_type)
    cls: Any = type(obj)
    made = cls.__new__(cls)
    if memo is not None:
        memo[id(obj)] = made
        fields = copy.deepcopy(fields, memo)
    c_type.__setstate__(made, fields)
    state = obj.__getstate__()
    if memo is not None:
        state = copy.deepcopy(state, memo)
    if state is not None:
        _apply(made, state)
    return made


def _copy(self: Any) -> Any:
    return _reconstruct(self, None)


def _deepcopy(self: Any, memo: dict[int, Any]) -> Any:
    return _reconstruct(self, memo)


def _reduce(self: Any) -> tuple[Any, ...]:
    """For pickle: the object rebuilt with its C fields, then its state
    given to ``_apply`` (pickle's state setter)."""
    fields = _own_fields(self, _c_base(type(self)))
    return (_rebuild, (type(self), fields), self.__getstate__(), None, None, _apply)


def _init_subclass(cls: Any, /, **kwargs: Any) -> None:
    c_type: Any = _c_base(cls)
    # On past the C types (NoBackoff derives from ConstantBackoff): one call.
    topmost = [base for base in cls.__mro__ if base in _C_TYPES][-1]
    super(topmost, cls).__init_subclass__(**kwargs)
    fields = _field_names(c_type)
    for name in fields:
        # A slot named after a field would hide the C field: the C field
        # serves the name, as the slot would on redis-py's class.
        if isinstance(vars(cls).get(name), types.MemberDescriptorType):
            delattr(cls, name)
    overrides = cls.__getstate__ is not _getstate or cls.__setstate__ is not c_type.__setstate__
    if overrides and "__reduce__" not in vars(cls):
        cls.__copy__ = _copy
        cls.__deepcopy__ = _deepcopy
        cls.__reduce__ = _reduce


def install(c_types: list[Any]) -> None:
    """Give the C types redis-py's ``__getstate__`` and a subclass hook."""
    for c_type in c_types:
        _C_TYPES.add(c_type)
        c_type.__getstate__ = _getstate
        c_type.__init_subclass__ = classmethod(_init_subclass)
