"""Declares the C extension; the metadata lives in pyproject.toml.

The extension is optional, as MarkupSafe's is: when it cannot be built (no
compiler, no Python headers), the build says so in a warning and installs
the pure-Python fallback, which gives redis-py's own classes under the same
names (see the README).  REDIS_BACKOFF_C_REQUIRE_EXTENSION=1 makes a failed
build an error instead; CI and scripts/test.sh set it.
"""

import glob
import os
import sys
import traceback

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

extra_compile_args = [
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
    "-Wno-cast-function-type",
    # Bit-identical delays: no fused multiply-add, no value-changing
    # optimisations of the floating-point formulas.
    "-ffp-contract=off",
    "-fno-fast-math",
]
extra_compile_args += os.environ.get("REDIS_BACKOFF_C_CFLAGS", "").split()
extra_link_args = os.environ.get("REDIS_BACKOFF_C_LDFLAGS", "").split()

SPEEDUPS = Extension(
    "redis_backoff_c._speedups",
    sources=sorted(glob.glob("csrc/*.c")),
    depends=sorted(glob.glob("csrc/*.h")),
    include_dirs=["csrc"],
    extra_compile_args=extra_compile_args,
    extra_link_args=extra_link_args,
)


class BuildFailed(Exception):
    """The C extension could not be built."""


class OptionalBuildExt(build_ext):
    """build_ext whose every failure is one BuildFailed, so that setup can
    fall back to the pure-Python package."""

    def run(self):
        try:
            super().run()
        except Exception as error:  # setuptools raises several kinds here
            raise BuildFailed() from error

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as error:
            raise BuildFailed() from error


def extension_required():
    return os.environ.get("REDIS_BACKOFF_C_REQUIRE_EXTENSION", "") not in ("", "0")


def run_setup(with_extension):
    if with_extension:
        setup(ext_modules=[SPEEDUPS], cmdclass={"build_ext": OptionalBuildExt})
    else:
        setup(ext_modules=[])


def warn_fallback(error):
    cause = error.__cause__ if error.__cause__ is not None else error
    bar = "=" * 74
    print(bar, file=sys.stderr)
    print("WARNING: the C extension of redis-backoff-c could not be built:", file=sys.stderr)
    traceback.print_exception(type(cause), cause, cause.__traceback__, limit=0, file=sys.stderr)
    print(
        "Installing the pure-Python fallback: `import redis_backoff_c` gives\n"
        "redis-py's own classes, with one RuntimeWarning saying why.  Set\n"
        "REDIS_BACKOFF_C_REQUIRE_EXTENSION=1 to make this an error.",
        file=sys.stderr,
    )
    print(bar, file=sys.stderr)


try:
    run_setup(with_extension=True)
except BuildFailed as error:
    if extension_required():
        raise
    warn_fallback(error)
    run_setup(with_extension=False)
