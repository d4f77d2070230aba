"""Under redis_backoff_c.patch(), a user's mock.patch.object on the class
redis.backoff now holds (ours) is honoured by redis-py's Retry names (ours
too), as it is without patch() (tests/contract/test_user_mocks.py)."""

import pytest
import redis.asyncio.retry
import redis.backoff
import redis.retry
from mock_scenarios import mocked_runs

import redis_backoff_c


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
@pytest.mark.parametrize("name", ["ExponentialBackoff", "NoBackoff", "DecorrelatedJitterBackoff"])
def test_class_level_mock_under_patch(name, flavor):
    with redis_backoff_c.patched():
        retry_module = redis.retry if flavor == "sync" else redis.asyncio.retry
        assert type(retry_module.Retry(redis.backoff.NoBackoff(), 1)).__module__.startswith(
            "redis_backoff_c"
        )
        assert getattr(redis.backoff, name).__module__.startswith("redis_backoff_c")
        for method in ("compute", "reset"):
            during, _ = mocked_runs(redis.backoff, retry_module, name, method, flavor)
            assert during[0] == (2 if method == "compute" else 1)
    assert not redis_backoff_c.is_patched()


def test_redis_retry_sleep_patch_reaches_the_c_retry():
    from unittest import mock

    with redis_backoff_c.patched(), mock.patch("redis.retry.sleep") as sleep:
        retry = redis.retry.Retry(redis.backoff.ConstantBackoff(0.3), 2, (ValueError,))
        assert type(retry).__module__ == "redis_backoff_c.retry"

        def down():
            raise ValueError("down")

        with pytest.raises(ValueError):
            retry.call_with_retry(down, lambda error: None)
    assert [call.args for call in sleep.call_args_list] == [(0.3,), (0.3,)]


def test_redis_asyncio_retry_sleep_patch_reaches_the_c_retry():
    import asyncio
    from unittest import mock

    async def main():
        retry = redis.asyncio.retry.Retry(redis.backoff.ConstantBackoff(0.3), 2, (ValueError,))
        assert type(retry).__module__ == "redis_backoff_c.asyncio.retry"

        async def down():
            raise ValueError("down")

        async def fail(error):
            pass

        with pytest.raises(ValueError):
            await retry.call_with_retry(down, fail)

    with redis_backoff_c.patched(), mock.patch("redis.asyncio.retry.sleep") as sleep:
        assert isinstance(sleep, mock.AsyncMock)  # as for redis-py's own tests
        asyncio.run(main())
    assert [call.args for call in sleep.call_args_list] == [(0.3,), (0.3,)]


def test_the_drop_in_sleep_patch_still_works_while_patched():
    import time
    from unittest import mock

    import redis_backoff_c.retry

    with redis_backoff_c.patched():
        with mock.patch("redis_backoff_c.retry.sleep") as sleep:
            retry = redis.retry.Retry(redis.backoff.ConstantBackoff(0.3), 1, (ValueError,))

            def down():
                raise ValueError("down")

            with pytest.raises(ValueError):
                retry.call_with_retry(down, lambda error: None)
        assert [call.args for call in sleep.call_args_list] == [(0.3,)]
    assert redis_backoff_c.retry.sleep is time.sleep
