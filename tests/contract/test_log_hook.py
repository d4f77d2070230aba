"""redis_backoff_c.log.RetryLogger, the ready logging hook (issue 32): the
line and the record's fields for a retry and for each give-up, the levels
and the logger, the rate limit, and that logging never breaks a retry loop.

Every test drives real call_with_retry loops, so the hook is given the
events the loop makes; it runs over the C types and their pure-Python twin
through the `extras` fixture of conftest.py (the hook reads the events by
attribute only: the twin's RetryEvent and the C one alike)."""

import asyncio
import logging
import pickle
import sys
import threading

import pytest
import redis.exceptions

from redis_backoff_c.backoff import ConstantBackoff, NoBackoff
from redis_backoff_c.log import DEFAULT_RATE_LIMIT, EXTRA_FIELDS, RateLimit, RetryLogger

CE = redis.exceptions.ConnectionError
REFUSED = "Error 111 connecting to localhost:6379. Connection refused."
LOGGER = "redis_backoff_c"
# One interval far longer than any test: no token comes back unless the
# test moves its clock.
FOREVER = 1e9


class Clock:
    """The rate limit's clock, moved by the test: nothing sleeps."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def failing(times, error_type=CE, text=REFUSED):
    """do(): raises error_type(text) `times` times, then returns "ok"."""

    def do():
        do.attempts += 1
        if do.attempts <= times:
            raise error_type(text)
        return "ok"

    do.attempts = 0
    return do


def run(retry, do):
    """retry.call_with_retry(do, fail) to its end: the value, or the error
    the loop raised."""
    try:
        return retry.call_with_retry(do, lambda error: None)
    except Exception as error:  # noqa: BLE001 - the outcome is what is checked
        return error


def fields(record):
    return {name: getattr(record, name) for name in EXTRA_FIELDS}


def mine(caplog, name=LOGGER):
    """The records the hook wrote on `name` (not the loop's own reports)."""
    return [r for r in caplog.records if r.name == name and hasattr(r, "retry_event")]


@pytest.fixture
def caplog(caplog):
    # Every level reaches caplog, whatever the logger's configuration.
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    return caplog


# ------------------------------------------------------------ the lines


def test_a_retry_line_and_its_fields(extras, caplog):
    log = RetryLogger()
    retry = extras.Retry(NoBackoff(), 3, on_retry=log, on_give_up=log)
    assert run(retry, failing(1)) == "ok"
    [record] = mine(caplog)
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        f"retry after attempt 1 failed, in 0.000 s: redis.exceptions.ConnectionError: {REFUSED}"
    )
    assert fields(record) == {
        "retry_event": "retry",
        "retry_attempt": 1,
        "retry_delay": 0.0,
        "retry_reason": None,
        "retry_error_type": "redis.exceptions.ConnectionError",
        "retry_error": REFUSED,
        "retry_suppressed": 0,
        "retry_suppressed_seconds": 0.0,
    }


def test_the_delay_is_the_one_about_to_be_slept(extras, caplog, monkeypatch):
    import redis_backoff_c.retry as retry_module

    monkeypatch.setattr(retry_module, "sleep", lambda delay: None)
    log = RetryLogger()
    retry = extras.Retry(ConstantBackoff(0.25), 3, on_retry=log, on_give_up=log)
    assert run(retry, failing(2)) == "ok"
    records = mine(caplog)
    assert [r.retry_delay for r in records] == [0.25, 0.25]
    assert [r.retry_attempt for r in records] == [1, 2]
    assert "retry after attempt 2 failed, in 0.250 s: " in records[1].getMessage()


def give_up_budget(extras):
    # Two tokens: the first failure takes one, and a retry needs more than one.
    return {"budget": extras.RetryBudget(max_tokens=2, token_ratio=0.1)}


# reason: (the Retry's backoff and keywords, its retries, the attempt
# that gives up, the retry lines before it)
GIVE_UPS = {
    "exhausted": (lambda extras: (NoBackoff(), {}), 2, 3, 2),
    "not_retryable": (lambda extras: (NoBackoff(), {"is_retryable": lambda e: False}), 2, 1, 0),
    "budget": (lambda extras: (NoBackoff(), give_up_budget(extras)), 2, 1, 0),
    # A delay that would end past the deadline: given up before sleeping.
    "deadline": (lambda extras: (ConstantBackoff(60), {"deadline": 1.0}), 2, 1, 0),
    # A `do` that is not redis-py's may have run on the server.
    "may_have_run": (lambda extras: (NoBackoff(), {"writes": "at-most-once"}), 2, 1, 0),
}


@pytest.mark.parametrize("reason", list(GIVE_UPS))
def test_a_give_up_line_and_its_fields(extras, caplog, reason):
    make, retries, attempt, retry_lines = GIVE_UPS[reason]
    backoff, keywords = make(extras)
    log = RetryLogger()
    retry = extras.Retry(backoff, retries, on_retry=log, on_give_up=log, **keywords)
    error = run(retry, failing(10))
    assert isinstance(error, CE)
    *retried, record = mine(caplog)
    assert len(retried) == retry_lines
    assert record.levelno == logging.ERROR
    assert record.getMessage() == (
        f"gave up after attempt {attempt} ({reason}): redis.exceptions.ConnectionError: {REFUSED}"
    )
    assert fields(record) == {
        "retry_event": "give_up",
        "retry_attempt": attempt,
        "retry_delay": None,
        "retry_reason": reason,
        "retry_error_type": "redis.exceptions.ConnectionError",
        "retry_error": REFUSED,
        "retry_suppressed": 0,
        "retry_suppressed_seconds": 0.0,
    }


def test_levels_and_logger_are_configurable(extras, caplog):
    caplog.set_level(logging.DEBUG, logger="app.redis")
    log = RetryLogger("app.redis", retry_level=logging.INFO, give_up_level=logging.CRITICAL)
    assert log.logger is logging.getLogger("app.redis")
    retry = extras.Retry(NoBackoff(), 1, on_retry=log, on_give_up=log)
    run(retry, failing(5))
    assert [r.levelno for r in mine(caplog, "app.redis")] == [logging.INFO, logging.CRITICAL]
    assert mine(caplog) == []
    # A Logger object too.
    other = logging.getLogger("app.other")
    assert RetryLogger(other).logger is other


def test_levels_by_name():
    log = RetryLogger(retry_level="INFO", give_up_level="CRITICAL")
    assert (log.retry_level, log.give_up_level) == (logging.INFO, logging.CRITICAL)
    with pytest.raises(ValueError, match="retry_level"):
        RetryLogger(retry_level="LOUD")
    with pytest.raises(TypeError, match="give_up_level"):
        RetryLogger(give_up_level=40.0)


def test_the_defaults():
    log = RetryLogger()
    assert log.logger is logging.getLogger("redis_backoff_c")
    assert (log.retry_level, log.give_up_level) == (logging.WARNING, logging.ERROR)
    assert log.rate_limit is DEFAULT_RATE_LIMIT == RateLimit(burst=5, interval=10.0)


def test_a_builtin_error_is_named_without_builtins_and_text_stays_one_line(extras, caplog):
    log = RetryLogger()
    retry = extras.Retry(NoBackoff(), 1, (TimeoutError,), on_retry=log, on_give_up=log)
    run(retry, failing(1, TimeoutError, "first\nsecond"))
    [record] = mine(caplog)
    assert record.retry_error_type == "TimeoutError"
    assert record.retry_error == "first\nsecond"  # the field keeps the text as it is
    assert record.getMessage().endswith(": TimeoutError: first\\nsecond")


def test_an_error_without_text_is_named_alone(extras, caplog):
    log = RetryLogger()
    retry = extras.Retry(NoBackoff(), 0, on_retry=log, on_give_up=log)
    run(retry, failing(1, text=""))
    [record] = mine(caplog)
    assert (
        record.getMessage()
        == "gave up after attempt 1 (exhausted): redis.exceptions.ConnectionError"
    )


def test_asyncio_retry_writes_the_same_lines(extras, caplog):
    log = RetryLogger()
    retry = extras.AsyncRetry(NoBackoff(), 1, on_retry=log, on_give_up=log)

    async def do():
        raise CE(REFUSED)

    async def fail(error):
        pass

    async def main():
        with pytest.raises(CE):
            await retry.call_with_retry(do, fail)

    asyncio.run(main())
    assert [(r.retry_event, r.retry_attempt, r.retry_reason) for r in mine(caplog)] == [
        ("retry", 1, None),
        ("give_up", 2, "exhausted"),
    ]


# ------------------------------------------------------------ the rate limit


def test_a_burst_then_suppressed_then_counted_on_the_next_line(extras, caplog):
    clock = Clock()
    log = RetryLogger(rate_limit=RateLimit(burst=3, interval=10.0), clock=clock)
    retry = extras.Retry(NoBackoff(), 9, on_retry=log, on_give_up=log)
    run(retry, failing(20))
    retries = [r for r in mine(caplog) if r.retry_event == "retry"]
    assert [r.retry_attempt for r in retries] == [1, 2, 3]  # 6 more suppressed
    assert all(r.retry_suppressed == 0 for r in retries)
    caplog.clear()
    # 25 s later: two tokens back (one each 10 s).
    clock.now += 25.0
    run(retry, failing(20))
    retries = [r for r in mine(caplog) if r.retry_event == "retry"]
    assert [r.retry_attempt for r in retries] == [1, 2]
    first = retries[0]
    assert (first.retry_suppressed, first.retry_suppressed_seconds) == (6, 25.0)
    assert first.getMessage().endswith(f"{REFUSED} [6 more like this suppressed over 25.0 s]")
    assert retries[1].retry_suppressed == 0


def test_give_ups_have_their_own_bucket(extras, caplog):
    """A flood of retries does not hide the give-ups."""
    log = RetryLogger(rate_limit=RateLimit(burst=2, interval=FOREVER), clock=Clock())
    retry = extras.Retry(NoBackoff(), 5, on_retry=log, on_give_up=log)
    for _ in range(2):
        run(retry, failing(20))
    events = [r.retry_event for r in mine(caplog)]
    assert events.count("retry") == 2
    assert events.count("give_up") == 2


def test_each_reason_and_error_type_has_its_own_bucket(extras, caplog):
    log = RetryLogger(rate_limit=RateLimit(burst=1, interval=FOREVER), clock=Clock())
    plain = extras.Retry(NoBackoff(), 3, (CE, TimeoutError), on_retry=log, on_give_up=log)
    refusing = extras.Retry(NoBackoff(), 3, is_retryable=lambda e: False, on_give_up=log)
    for _ in range(3):
        run(plain, failing(20))
        run(plain, failing(20, TimeoutError, "timed out"))
        run(refusing, failing(20))
    assert sorted((r.retry_event, r.retry_reason, r.retry_error_type) for r in mine(caplog)) == [
        ("give_up", "exhausted", "TimeoutError"),
        ("give_up", "exhausted", "redis.exceptions.ConnectionError"),
        ("give_up", "not_retryable", "redis.exceptions.ConnectionError"),
        ("retry", None, "TimeoutError"),
        ("retry", None, "redis.exceptions.ConnectionError"),
    ]


def test_without_the_limit_every_event_is_a_line(extras, caplog):
    log = RetryLogger(rate_limit=None)
    assert log.rate_limit is None
    retry = extras.Retry(NoBackoff(), 9, on_retry=log, on_give_up=log)
    for _ in range(10):
        run(retry, failing(20))
    records = mine(caplog)
    assert len(records) == 10 * (9 + 1)
    assert all(r.retry_suppressed == 0 for r in records)


def test_a_suppressed_line_formats_nothing(extras, caplog):
    class CountingError(CE):
        strs = 0

        def __str__(self):
            CountingError.strs += 1
            return "counted"

    log = RetryLogger(rate_limit=RateLimit(burst=1, interval=FOREVER), clock=Clock())
    retry = extras.Retry(NoBackoff(), 50, on_retry=log)
    run(retry, failing(20, CountingError))
    assert len(mine(caplog)) == 1
    assert CountingError.strs == 1  # the one line written; 19 retries suppressed unread


def test_a_level_nobody_listens_to_takes_no_token(extras, caplog):
    clock = Clock()
    log = RetryLogger(rate_limit=RateLimit(burst=1, interval=FOREVER), clock=clock)
    retry = extras.Retry(NoBackoff(), 5, on_retry=log, on_give_up=log)
    caplog.set_level(logging.ERROR, logger=LOGGER)
    run(retry, failing(20))
    assert [r.retry_event for r in mine(caplog)] == ["give_up"]
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    run(retry, failing(1))
    [record] = mine(caplog)[1:]
    assert (record.retry_event, record.retry_suppressed) == ("retry", 0)


def test_the_table_of_buckets_stays_bounded(extras, caplog):
    """Errors of ever new classes: full buckets with nothing suppressed are
    swept (they are the same as fresh ones)."""
    clock = Clock()
    log = RetryLogger(rate_limit=RateLimit(burst=1, interval=1.0), clock=clock)
    retry = extras.Retry(NoBackoff(), 0, (Exception,), on_give_up=log)
    for index in range(3000):
        run(retry, failing(1, type(f"E{index}", (CE,), {})))
        clock.now += 1.0  # each bucket is full again a second later
    assert len(mine(caplog)) == 3000  # each class its own line
    assert len(log._limiter.buckets) <= 1024


@pytest.mark.parametrize(
    ("interval", "error"),
    [(0, ValueError), (-1.0, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
     ("1", TypeError), (True, TypeError), (None, TypeError)],
)  # fmt: skip
def test_a_bad_interval_is_refused(interval, error):
    with pytest.raises(error, match="interval"):
        RateLimit(burst=1, interval=interval)


@pytest.mark.parametrize(
    ("burst", "error"),
    [(0, ValueError), (-1, ValueError), (1.5, TypeError), ("5", TypeError), (True, TypeError)],
)
def test_a_bad_burst_is_refused(burst, error):
    with pytest.raises(error, match="burst"):
        RateLimit(burst=burst)


def test_rate_limit_must_be_a_rate_limit():
    with pytest.raises(TypeError, match="rate_limit"):
        RetryLogger(rate_limit=(5, 10.0))


# ------------------------------------------------------------ threads


@pytest.fixture
def switch_often():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


def hammer(retry, threads=6, calls=50):
    """`calls` failing calls on each of `threads` threads at once."""
    start = threading.Barrier(threads)

    def work():
        start.wait()
        for _ in range(calls):
            run(retry, failing(20))

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return threads * calls


def test_threads_share_one_limit_and_no_count_is_lost(extras, caplog, switch_often):
    clock = Clock()
    burst = 40
    log = RetryLogger(rate_limit=RateLimit(burst=burst, interval=10.0), clock=clock)
    retry = extras.Retry(NoBackoff(), 3, on_retry=log, on_give_up=log)
    calls = hammer(retry)
    records = mine(caplog)
    assert sum(r.retry_event == "retry" for r in records) == burst
    assert sum(r.retry_event == "give_up" for r in records) == burst
    caplog.clear()
    # One interval later, one line of each kind, counting all the others.
    clock.now += 10.0
    run(extras.Retry(NoBackoff(), 1, on_retry=log, on_give_up=log), failing(20))
    retried, gave_up = mine(caplog)
    assert retried.retry_suppressed == calls * 3 - burst
    assert gave_up.retry_suppressed == calls - burst


def test_threads_without_the_limit_lose_no_line(extras, caplog, switch_often):
    log = RetryLogger(rate_limit=None)
    retry = extras.Retry(NoBackoff(), 3, on_retry=log, on_give_up=log)
    calls = hammer(retry)
    assert len(mine(caplog)) == calls * 4


# ------------------------------------------------------------ logging that fails


class BrokenHandler(logging.Handler):
    def emit(self, record):
        raise OSError("disk full")


class BrokenFilter(logging.Filter):
    def filter(self, record):
        raise RuntimeError("a filter with a bug")


@pytest.fixture
def broken_logger():
    """A logger of its own (not propagating to caplog), for a broken part."""
    logger = logging.getLogger("redis_backoff_c.tests.broken")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    yield logger
    logger.handlers.clear()
    logger.filters.clear()


@pytest.mark.parametrize("broken", ["handler", "filter"])
def test_failing_logging_does_not_break_the_loop(extras, broken_logger, capsys, broken):
    # A handler's error logging catches itself (Handler.handleError); a
    # filter's escapes logger.log, and the hook catches it.
    if broken == "handler":
        broken_logger.addHandler(BrokenHandler())
    else:
        broken_logger.addFilter(BrokenFilter())
    log = RetryLogger(broken_logger, rate_limit=None)
    retry = extras.Retry(NoBackoff(), 3, on_retry=log, on_give_up=log)
    do = failing(2)
    assert run(retry, do) == "ok"
    assert do.attempts == 3
    do = failing(10)
    error = run(retry, do)
    assert isinstance(error, CE) and str(error) == REFUSED
    assert do.attempts == 4
    err = capsys.readouterr().err
    assert ("disk full" if broken == "handler" else "a filter with a bug") in err


# ------------------------------------------------------------ copies


def test_a_pickled_retry_keeps_its_logger(extras, caplog):
    log = RetryLogger(rate_limit=RateLimit(burst=1, interval=FOREVER))
    retry = extras.Retry(NoBackoff(), 2, on_retry=log, on_give_up=log)
    run(retry, failing(10))
    copy = pickle.loads(pickle.dumps(retry))
    assert repr(copy.on_retry) == repr(log)
    caplog.clear()
    # A copy starts with full buckets: it logs where the original is silent.
    run(copy, failing(10))
    assert [r.retry_event for r in mine(caplog)] == ["retry", "give_up"]
