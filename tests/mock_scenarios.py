"""One failing call_with_retry under a class-level mock of a strategy's
compute or reset, for the tests of users' mocks (tests/contract/
test_user_mocks.py, and under patch() tests/c_only/test_patch_user_mocks.py)."""

import asyncio
from unittest import mock

import pytest

ARGS = {"ConstantBackoff": (0.01,), "NoBackoff": ()}


def new_strategy(cls):
    return cls(*ARGS.get(cls.__name__, (0.5, 0.01)))


class Down(Exception):
    pass


def always_down():
    raise Down("down")


async def always_down_async():
    raise Down("down")


def run_sync(retry_module, strategy, retries=2):
    with pytest.raises(Down):
        retry_module.Retry(strategy, retries, (Down,)).call_with_retry(always_down, lambda e: None)


def run_async(retry_module, strategy, retries=2):

    async def fail(error):
        pass

    async def main():
        retry = retry_module.Retry(strategy, retries, (Down,))
        with pytest.raises(Down):
            await retry.call_with_retry(always_down_async, fail)

    asyncio.run(main())


def mocked_runs(backoff_module, retry_module, name, method, flavor):
    """(calls of the mocked method, sleeps) for one failing call_with_retry
    under mock.patch.object(<class>, method), and the same after the mock."""
    cls = getattr(backoff_module, name)
    run = run_sync if flavor == "sync" else run_async
    sleeps = []

    def record(delay):
        sleeps.append(delay)

    async def record_async(delay):
        sleeps.append(delay)

    sleep = record if flavor == "sync" else record_async
    with mock.patch.object(retry_module, "sleep", sleep):
        kwargs = {"return_value": 0} if method == "compute" else {}
        with mock.patch.object(cls, method, **kwargs) as mocked:
            run(retry_module, new_strategy(cls))
        during = (mocked.call_count, list(sleeps))
        del sleeps[:]
        run(retry_module, new_strategy(cls))
        after = list(sleeps)
    return during, after
