"""unittest.mock the way a user's test suite uses it on redis-py: patching
the random module, classes and module attributes, before and after the
first import.  Every test runs on both implementations and, where a value
is drawn, compares the two."""

import json
import subprocess
import sys
from unittest import mock

import pytest
from mock_scenarios import mocked_runs
from support import ALL, IMPLEMENTATIONS, JITTERED

# A fresh interpreter that imports `side`'s backoff module for the first
# time while random.random and random.uniform are mocked, draws once inside
# the mock and again after it, seeded: the values, as JSON.
FIRST_IMPORT_UNDER_MOCK = """
import importlib, json, random, sys
from unittest import mock

module = {"redis-py": "redis.backoff", "c": "redis_backoff_c.backoff"}[sys.argv[1]]
with mock.patch("random.random", return_value=0.5), \\
        mock.patch("random.uniform", return_value=0.25):
    backoff = importlib.import_module(module)
    during = [
        backoff.FullJitterBackoff(10, 1).compute(3),
        backoff.EqualJitterBackoff(10, 1).compute(3),
        backoff.DecorrelatedJitterBackoff(10, 1).compute(3),
        backoff.ExponentialWithJitterBackoff(10, 1).compute(3),
    ]
random.seed(7)
after = [
    backoff.FullJitterBackoff(10, 1).compute(3),
    backoff.EqualJitterBackoff(10, 1).compute(3),
    backoff.DecorrelatedJitterBackoff(10, 1).compute(3),
    backoff.ExponentialWithJitterBackoff(10, 1).compute(3),
]
print(json.dumps({"during": during, "after": after}))
"""


def first_import_under_mock(side):
    result = subprocess.run(
        [sys.executable, "-I", "-c", FIRST_IMPORT_UNDER_MOCK, side],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout)


def test_random_mocked_at_first_import_is_used_then_released():
    ours, theirs = first_import_under_mock("c"), first_import_under_mock("redis-py")
    # Inside the mocks: uniform's value for the three uniform draws
    # (EqualJitter adds it to half its bound), random()'s for the last.
    assert theirs["during"] == [0.25, 4.25, 0.25, 4.0]
    assert ours == theirs


@pytest.mark.parametrize(
    "name", ["FullJitterBackoff", "EqualJitterBackoff", "DecorrelatedJitterBackoff"]
)
def test_uniform_patched_after_import(impl, name):
    calls = []

    def uniform(a, b):
        calls.append((a, b))
        return b

    strategy = getattr(impl.backoff, name)(10, 1)
    with mock.patch("random.uniform", side_effect=uniform):
        delay = strategy.compute(2)
    reference = getattr(IMPLEMENTATIONS["redis-py"].backoff, name)(10, 1)
    expected_calls = []
    with mock.patch("random.uniform", side_effect=lambda a, b: expected_calls.append((a, b)) or b):
        assert delay == reference.compute(2)
    assert calls == expected_calls and calls


def test_random_patched_after_import(impl):
    strategy = impl.backoff.ExponentialWithJitterBackoff(10, 1)
    with mock.patch("random.random", return_value=0.75) as random_mock:
        assert strategy.compute(3) == 0.75 * 8
    assert random_mock.call_count == 1


@pytest.mark.parametrize(
    "name", ["FullJitterBackoff", "EqualJitterBackoff", "DecorrelatedJitterBackoff"]
)
def test_uniform_keeps_the_generators_random_when_only_random_is_patched(impl, name):
    # random.uniform calls self.random() on the module's generator, not the
    # module attribute: mocking random.random alone leaves uniform's draws be.
    import random

    strategy = getattr(impl.backoff, name)(10, 1)
    reference = getattr(IMPLEMENTATIONS["redis-py"].backoff, name)(10, 1)
    with mock.patch("random.random", return_value=0.0) as random_mock:
        random.seed(11)
        ours = [strategy.compute(n) for n in range(1, 6)]
        random.seed(11)
        theirs = [reference.compute(n) for n in range(1, 6)]
    assert ours == theirs
    assert random_mock.call_count == 0


# --- class-level mocks of compute and reset, honoured by Retry ------------


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
@pytest.mark.parametrize("method", ["compute", "reset"])
@pytest.mark.parametrize("name", ALL)
def test_class_level_mock_is_called_by_retry(impl, name, method, flavor):
    retry_module = impl.retry if flavor == "sync" else impl.asyncio_retry
    during, after = mocked_runs(impl.backoff, retry_module, name, method, flavor)
    reference = IMPLEMENTATIONS["redis-py"]
    reference_retry = reference.retry if flavor == "sync" else reference.asyncio_retry
    if name in JITTERED:  # the draws differ: compare what is not random
        expected = mocked_runs(reference.backoff, reference_retry, name, method, flavor)
        assert during[0] == expected[0][0] and len(after) == len(expected[1])
    else:
        assert (during, after) == mocked_runs(
            reference.backoff, reference_retry, name, method, flavor
        )
    # compute is called once per failure that is retried; reset once per call.
    assert during[0] == (2 if method == "compute" else 1)
    if method == "compute":
        assert during[1] == []  # the mock's 0 is never slept


# --- __slots__ subclasses in copy, deepcopy and pickle --------------------


def slotted_subclasses(impl):
    """A __slots__ subclass of each strategy and of both Retry types, with
    a slot holding a value, another left empty, and a private (mangled) one."""
    made = []
    bases = [getattr(impl.backoff, name) for name in ALL]
    bases += [impl.retry.Retry, impl.asyncio_retry.Retry]
    for index, base in enumerate(bases):
        # Named uniquely and published here, so that pickle finds the class.
        name = f"Slotted{index}{base.__name__}_{impl.name.replace('-', '_')}"
        cls = type(name, (base,), {"__slots__": ("extra", "empty", "__own")})
        cls.__module__ = __name__
        globals()[name] = cls
        if "Retry" in base.__name__:
            obj = cls(impl.backoff.ConstantBackoff(0.25), 3)
        else:
            obj = new_strategy_of(cls, base)
        obj.extra = [7]
        setattr(obj, f"_{name}__own", "mine")
        made.append(obj)
    return made


def new_strategy_of(cls, base):
    return cls(*{"ConstantBackoff": (0.01,), "NoBackoff": ()}.get(base.__name__, (0.5, 0.01)))


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_slot_values_survive(impl, how):
    import copy
    import pickle

    for obj in slotted_subclasses(impl):
        if how == "copy":
            twin = copy.copy(obj)
        elif how == "deepcopy":
            twin = copy.deepcopy(obj)
        else:
            twin = pickle.loads(pickle.dumps(obj))
        name = type(obj).__name__
        assert type(twin) is type(obj)
        assert twin.extra == [7], name
        assert (twin.extra is obj.extra) == (how == "copy"), name
        assert getattr(twin, f"_{name}__own") == "mine", name
        assert not hasattr(twin, "empty"), name
        assert twin == obj, name
