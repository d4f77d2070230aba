"""The installed package: which implementation, from where, with what files."""

import importlib.metadata
import os
import sysconfig
from pathlib import Path

import pytest
import redis.backoff

import redis_backoff_c
import redis_backoff_c.backoff

PACKAGE_DIR = Path(redis_backoff_c.__file__).resolve().parent
SOURCE_TREE = Path(__file__).resolve().parents[2] / "redis_backoff_c"

BACKOFF_NAMES = [
    "ConstantBackoff",
    "NoBackoff",
    "ExponentialBackoff",
    "FullJitterBackoff",
    "EqualJitterBackoff",
    "DecorrelatedJitterBackoff",
    "ExponentialWithJitterBackoff",
]


@pytest.mark.skipif(
    os.environ.get("REDIS_BACKOFF_C_DISABLE", "") not in ("", "0"),
    reason="REDIS_BACKOFF_C_DISABLE is set: the fallback is under test",
)
def test_the_c_extension_is_in_use():
    from redis_backoff_c import _speedups

    assert redis_backoff_c.IMPLEMENTATION == "c"
    for name in BACKOFF_NAMES:
        c_type = getattr(_speedups, name)
        assert getattr(redis_backoff_c, name) is c_type
        assert getattr(redis_backoff_c.backoff, name) is c_type
        assert issubclass(c_type, getattr(redis.backoff, name))
    assert redis_backoff_c.AbstractBackoff is redis.backoff.AbstractBackoff
    assert type(redis_backoff_c.default_backoff()) is _speedups.EqualJitterBackoff


def test_extension_sits_beside_the_package():
    """No stale build of the extension shadows or is shadowed by another copy."""
    from redis_backoff_c import _speedups

    assert Path(_speedups.__file__).resolve().parent == PACKAGE_DIR


@pytest.mark.skipif(
    os.environ.get("REDIS_BACKOFF_C_EXPECT_INSTALLED") != "1",
    reason="only under scripts/test.sh, which installs the package non-editable",
)
def test_imported_from_site_packages_not_the_source_tree():
    from redis_backoff_c import _speedups

    site_dirs = {Path(sysconfig.get_path(key)).resolve() for key in ("purelib", "platlib")}
    for path in (redis_backoff_c.__file__, _speedups.__file__):
        resolved = Path(path).resolve()
        assert any(resolved.is_relative_to(d) for d in site_dirs), (path, site_dirs)
        assert not resolved.is_relative_to(SOURCE_TREE), path


def test_version_matches_the_distribution_metadata():
    assert redis_backoff_c.__version__ == importlib.metadata.version("redis-backoff-c")


@pytest.mark.parametrize(
    "relative",
    ["py.typed", "_speedups.pyi", "backoff.pyi", "retry.pyi", "asyncio/retry.pyi"],
)
def test_type_information_is_installed(relative):
    assert (PACKAGE_DIR / relative).is_file()
