"""The opt-in fast random source (C side only)."""

import random

import pytest
from support import JITTERED

import redis_backoff_c
import redis_backoff_c.backoff as backoff


def draws(name, count=50):
    strategy = getattr(backoff, name)()
    return [strategy.compute(n % 12) for n in range(count)]


def test_default_is_the_random_module():
    assert redis_backoff_c.get_random_source() == "python"


@pytest.mark.parametrize("name", JITTERED)
def test_fast_source_is_reproducible_with_a_seed(name):
    redis_backoff_c.set_random_source("fast", seed=12345)
    assert redis_backoff_c.get_random_source() == "fast"
    first = draws(name)
    redis_backoff_c.set_random_source("fast", 12345)
    assert draws(name) == first
    redis_backoff_c.set_random_source("fast", seed=54321)
    assert draws(name) != first


@pytest.mark.parametrize("name", JITTERED)
def test_fast_source_ignores_the_random_module(name):
    redis_backoff_c.set_random_source("fast", seed=1)
    random.seed(0)
    first = draws(name)
    redis_backoff_c.set_random_source("fast", seed=1)
    random.seed(99)
    assert draws(name) == first


def test_fast_source_stays_in_each_formula_range():
    redis_backoff_c.set_random_source("fast", seed=None)
    full, equal = backoff.FullJitterBackoff(), backoff.EqualJitterBackoff()
    with_jitter = backoff.ExponentialWithJitterBackoff()
    decorrelated = backoff.DecorrelatedJitterBackoff()
    for failures in range(2000):
        top = min(0.512, 0.008 * 2 ** min(failures, 20))
        assert 0 <= full.compute(failures) <= top
        assert top / 2 <= equal.compute(failures) <= top
        assert 0 <= with_jitter.compute(failures) <= top
        assert 0.008 <= decorrelated.compute(failures) <= 0.512


def test_fast_draws_look_uniform():
    redis_backoff_c.set_random_source("fast", seed=2024)
    strategy = backoff.FullJitterBackoff(cap=1.0, base=1.0)
    values = [strategy.compute(0) for _ in range(20000)]
    assert 0.48 < sum(values) / len(values) < 0.52
    buckets = [0] * 10
    for value in values:
        buckets[int(value * 10)] += 1
    assert min(buckets) > 1700 and max(buckets) < 2300


def test_switching_back_follows_random_seed():
    redis_backoff_c.set_random_source("fast", seed=3)
    redis_backoff_c.set_random_source("python")
    assert redis_backoff_c.get_random_source() == "python"
    random.seed(8)
    delay = backoff.FullJitterBackoff().compute(2)
    random.seed(8)
    assert delay == random.uniform(0, 0.032)


def test_bad_arguments():
    with pytest.raises(ValueError, match="name"):
        redis_backoff_c.set_random_source("secure")
    with pytest.raises(TypeError, match="name"):
        redis_backoff_c.set_random_source(1)
    with pytest.raises(TypeError, match="seed"):
        redis_backoff_c.set_random_source("fast", seed="abc")
    with pytest.raises(ValueError, match="seed"):
        redis_backoff_c.set_random_source("python", seed=1)
    with pytest.raises(TypeError):
        redis_backoff_c.set_random_source()
    assert redis_backoff_c.get_random_source() == "python"


def test_any_int_seeds():
    for seed in (0, -1, 2**64 + 5, 10**50, True):
        redis_backoff_c.set_random_source("fast", seed=seed)
        assert 0 <= backoff.FullJitterBackoff().compute(3) <= 0.064
