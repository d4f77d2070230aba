"""Every public name of redis.backoff, redis.retry and redis.asyncio.retry
of the installed release is importable from the module of the same name
here: the names the package reimplements are its own, every other one is
redis-py's object itself.  The public names are read from the installed
redis-py, so a name a later release adds fails here, not in a user's
import."""

import importlib

import pytest

from redis_backoff_c._namespace import public_names

MODULES = [
    ("redis.backoff", "redis_backoff_c.backoff"),
    ("redis.retry", "redis_backoff_c.retry"),
    ("redis.asyncio.retry", "redis_backoff_c.asyncio.retry"),
]
# What the C types (or the twin) replace; everything else is redis-py's own.
REIMPLEMENTED = {
    "redis.backoff": {
        "ConstantBackoff",
        "NoBackoff",
        "ExponentialBackoff",
        "FullJitterBackoff",
        "EqualJitterBackoff",
        "DecorrelatedJitterBackoff",
        "ExponentialWithJitterBackoff",
        "default_backoff",
        "DEFAULT_CAP",
        "DEFAULT_BASE",
    },
    "redis.retry": {"Retry", "sleep"},
    "redis.asyncio.retry": {"Retry", "sleep"},
}


@pytest.mark.parametrize(("theirs", "ours"), MODULES, ids=[m[0] for m in MODULES])
def test_every_public_name_is_importable(theirs, ours):
    redis_module = importlib.import_module(theirs)
    module = importlib.import_module(ours)
    names = public_names(redis_module)
    assert "Retry" in names or "ExponentialBackoff" in names  # the rule finds the API
    for name in names:
        assert hasattr(module, name), f"{ours} lacks {name}, which {theirs} has"
        if name not in REIMPLEMENTED[theirs]:
            assert getattr(module, name) is getattr(redis_module, name), name


def test_the_names_the_issue_named():
    import redis.retry

    import redis_backoff_c.retry

    assert redis_backoff_c.retry.AbstractRetry is redis.retry.AbstractRetry
    if hasattr(redis.retry, "is_retryable_connect_error"):  # redis-py 8.2
        assert (
            redis_backoff_c.retry.is_retryable_connect_error
            is redis.retry.is_retryable_connect_error
        )


def test_modules_and_typing_imports_are_not_public_api():
    import redis.retry

    names = public_names(redis.retry)
    for excluded in ("socket", "errno", "Any", "Callable", "TypeVar", "T", "E"):
        assert excluded not in names
