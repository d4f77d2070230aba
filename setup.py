"""Declares the C extension; the metadata lives in pyproject.toml."""

import glob
import os

from setuptools import Extension, setup

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

setup(
    ext_modules=[
        Extension(
            "redis_backoff_c._speedups",
            sources=sorted(glob.glob("csrc/*.c")),
            depends=sorted(glob.glob("csrc/*.h")),
            include_dirs=["csrc"],
            extra_compile_args=extra_compile_args,
            extra_link_args=extra_link_args,
        )
    ],
)
