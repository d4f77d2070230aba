"""Each C signature is written once, as a table beside its function
(csrc/args.h, rbc_signature), and its text form opens the docstring: here
the two are held to each other.  For every C callable, the parameters that
inspect.signature() reads from the docstring are exactly those the binder
takes by keyword, and as many may come by position."""

import inspect

import pytest
from redis.exceptions import ConnectionError as Conn

import redis_backoff_c
from redis_backoff_c import _speedups
from redis_backoff_c.asyncio.retry import Retry as AsyncRetry

STRATEGY_NAMES = [
    "ConstantBackoff",
    "NoBackoff",
    "ExponentialBackoff",
    "FullJitterBackoff",
    "EqualJitterBackoff",
    "DecorrelatedJitterBackoff",
    "ExponentialWithJitterBackoff",
]


def callables():
    retry = _speedups.Retry(_speedups.NoBackoff(), 1)
    found = [
        ("Retry", _speedups.Retry),
        ("asyncio Retry", AsyncRetry),
        ("RetryBudget", _speedups.RetryBudget),
        ("set_random_source", redis_backoff_c.set_random_source),
        ("update_retries", retry.update_retries),
        ("update_supported_errors", retry.update_supported_errors),
        ("call_with_retry", retry.call_with_retry),
    ]
    for name in STRATEGY_NAMES:
        found.append((name, getattr(_speedups, name)))
        found.append(
            (
                f"{name}.compute",
                getattr(_speedups, name)().compute
                if name != "ConstantBackoff"
                else _speedups.ConstantBackoff(1).compute,
            )
        )
    return found


CALLABLES = callables()


def raised(function, *args, **kwargs):
    try:
        function(*args, **kwargs)
    except (TypeError, ValueError, Conn) as error:
        return str(error)
    return None


@pytest.mark.parametrize(("label", "function"), CALLABLES, ids=[c[0] for c in CALLABLES])
def test_the_docstring_names_the_parameters_the_binder_takes(label, function):
    parameters = [
        p
        for p in inspect.signature(function).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    for parameter in parameters:
        if parameter.kind is parameter.POSITIONAL_ONLY:
            continue
        message = raised(function, **{parameter.name: object()})
        assert message is None or "unexpected keyword" not in message, (parameter.name, message)
    message = raised(function, not_a_parameter=1)
    assert message is not None and (
        "unexpected keyword argument 'not_a_parameter'" in message
        or "takes no arguments" in message
    )
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    message = raised(function, *[object()] * (len(positional) + 1))
    if positional:
        assert f"at most {len(positional)} positional" in message
    else:
        assert "takes no arguments" in message
