"""pytest plugin for .ci/redis-py-suite.sh: `-p redis_py_suite_patch` runs
redis-py's own tests with redis_backoff_c.patch() applied.

The patch is applied when pytest imports this plugin (with -p, before any
conftest or test module is imported), so every `from redis.retry import
Retry` in redis-py's tests and every default object redis-py builds gets
the C types, as in an application that calls patch() at start-up.
"""

import redis_backoff_c

if redis_backoff_c.IMPLEMENTATION != "c":
    raise RuntimeError("redis_backoff_c has no C extension here: nothing to patch")
REPORT = redis_backoff_c.patch()
if not REPORT.active:
    raise RuntimeError(f"redis_backoff_c.patch() did not take: {REPORT}")


def _describe():
    import redis.asyncio.retry
    import redis.retry

    return (
        f"redis_backoff_c.patch(): {REPORT.count} locations replaced; "
        f"redis.retry.Retry is {redis.retry.Retry.__module__}.{redis.retry.Retry.__qualname__}, "
        f"redis.asyncio.retry.Retry is {redis.asyncio.retry.Retry.__module__}."
        f"{redis.asyncio.retry.Retry.__qualname__}"
    )


def pytest_report_header(config):
    return _describe()


def pytest_terminal_summary(terminalreporter):
    # Also under -q, which hides the header: .ci/redis-py-suite.sh looks for it.
    terminalreporter.write_line(_describe())


def pytest_sessionfinish(session, exitstatus):
    # A test that unpatched would make the rest of the run meaningless.
    if not redis_backoff_c.is_patched():
        raise RuntimeError("redis_backoff_c was unpatched during the run")
