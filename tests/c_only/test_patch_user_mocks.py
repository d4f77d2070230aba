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
