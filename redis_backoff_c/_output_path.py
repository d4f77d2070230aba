"""The check the command lines (``python -m redis_backoff_c.plan`` and
``python -m redis_backoff_c.bench``) make of an output path before any work,
so that a run of minutes does not end in a traceback at its last step."""

from __future__ import annotations

import os

__all__ = ["output_problem"]


def output_problem(option: str, path: str | None) -> str | None:
    """Why ``path``, given to ``option``, cannot be written as a file, or None.

    The answer is one line naming the option, the path and the problem."""
    if not path:
        return None
    if os.path.isdir(path):
        return f"{option} {path}: is a directory; give a file name"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        if os.path.exists(parent):
            return f"{option} {path}: not a directory: {parent}"
        return f"{option} {path}: no such directory: {parent}"
    if not os.access(parent, os.W_OK):
        return f"{option} {path}: directory not writable: {parent}"
    return None
