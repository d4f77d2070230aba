"""redis-py clients with redis_backoff_c.patch() applied, against a real
redis-server: the C types are the ones in use, commands work, and redis-py's
retry behaviour (retry_on_error, retry_on_timeout, set_retry/get_retry, a
response that fails once, the retry count) is what it is without the patch.

Faults are real where a server can make them (a killed connection, a paused
server for timeouts) and injected where it cannot be timed (an error raised
once by the connection's read_response or the client's parse_response).
Every test leaves redis-py unpatched.
"""

import asyncio
import functools
import importlib

import pytest
import redis
import redis.asyncio
import redis.asyncio.retry
import redis.backoff
import redis.connection
import redis.exceptions
import redis.retry
from redis_server import RedisServer
from support import ORIGINAL_ASYNC_RETRY, ORIGINAL_RETRY

import redis_backoff_c
import redis_backoff_c.backoff

pytestmark = pytest.mark.skipif(
    redis_backoff_c.IMPLEMENTATION != "c", reason="patch() is a no-op without the C extension"
)


def _c_retry(module_name, original):
    try:
        cls = importlib.import_module(module_name).Retry
    except ImportError:
        return None
    return None if cls is original else cls


C_RETRY = _c_retry("redis_backoff_c.retry", ORIGINAL_RETRY)
C_ASYNC_RETRY = _c_retry("redis_backoff_c.asyncio.retry", ORIGINAL_ASYNC_RETRY)


HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One redis-server (tests/redis_server.py) for the module: these tests
    never kill it."""
    running = RedisServer(tmp_path_factory.mktemp("patch-redis"))
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def patched():
    assert not redis_backoff_c.is_patched()
    before = redis.Redis().get_retry()  # what unpatched redis-py builds
    report = redis_backoff_c.patch()
    assert report.active
    try:
        yield before
    finally:
        redis_backoff_c.unpatch()
    assert redis.retry.Retry is ORIGINAL_RETRY


@pytest.fixture
def client(server, patched):
    made = []

    def make(**kwargs):
        made.append(redis.Redis(host=HOST, port=server.port, **kwargs))
        return made[-1]

    yield make
    for one in made:
        one.close()


@pytest.fixture
def admin(server):
    connection = redis.Redis(host=HOST, port=server.port)
    yield connection
    connection.client_unpause()
    connection.close()


class Flaky:
    """Wraps a callable: raises ``error`` on the calls numbered in ``fail_on``
    (1-based; "all" for every call), counts calls and failures. Set on a
    class, it binds as a method does."""

    def __init__(self, wrapped, error, fail_on=(1,)):
        self.wrapped, self.error, self.fail_on = wrapped, error, fail_on
        self.calls = self.failures = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.fail_on == "all" or self.calls in self.fail_on:
            self.failures += 1
            raise self.error(f"injected failure {self.failures}")
        return self.wrapped(*args, **kwargs)

    def __get__(self, instance, owner=None):
        return self if instance is None else functools.partial(self, instance)


def _strategy(name, *args):
    """A strategy built through redis.backoff, as redis-py code builds one."""
    return getattr(redis.backoff, name)(*args)


# --- The C types are in use, and commands work ------------------------------


def test_commands_with_the_default_retry(client):
    r = client()
    assert type(r.get_retry()._backoff) is redis_backoff_c.backoff.ExponentialWithJitterBackoff
    assert r.set("patch:key", "value") is True
    assert r.get("patch:key") == b"value"
    assert r.incr("patch:counter") == 1
    connection = r.connection_pool.get_connection()
    try:
        assert type(connection.retry._backoff) is type(r.get_retry()._backoff)
        assert connection.retry == r.get_retry()
    finally:
        r.connection_pool.release(connection)


def test_default_retry_is_c_and_equal_to_redis_py_default(client, patched):
    r = client()
    assert type(r.get_retry()) is C_RETRY
    assert r.get_retry() == patched and patched == r.get_retry()
    assert r.ping() is True
    connection = r.connection_pool.get_connection()
    try:
        assert type(connection.retry) is C_RETRY
        assert connection.retry == patched
    finally:
        r.connection_pool.release(connection)


def test_a_killed_connection_is_retried_transparently(client, admin):
    r = client()
    assert r.set("patch:kill", "1")
    ids = [c["id"] for c in admin.client_list() if c["id"] != str(admin.client_id())]
    for client_id in ids:
        admin.client_kill_filter(_id=client_id)
    assert r.get("patch:kill") == b"1"


def test_asyncio_client_commands(server, patched):
    async def main():
        r = redis.asyncio.Redis(host=HOST, port=server.port)
        try:
            backoff = r.get_retry()._backoff
            assert type(backoff) is redis_backoff_c.backoff.ExponentialWithJitterBackoff
            assert await r.set("patch:async", "v")
            return await r.get("patch:async")
        finally:
            await r.aclose()

    assert asyncio.run(main()) == b"v"


def test_asyncio_client_runs_a_c_retry(server, patched):
    async def main():
        r = redis.asyncio.Redis(host=HOST, port=server.port)
        try:
            assert type(r.get_retry()) is C_ASYNC_RETRY
            assert await r.ping()
            return type(r.connection_pool.make_connection().retry)
        finally:
            await r.aclose()

    assert asyncio.run(main()) is C_ASYNC_RETRY


def test_asyncio_parse_response_fails_once(server, patched):
    async def main():
        r = redis.asyncio.Redis(
            host=HOST,
            port=server.port,
            retry=redis.asyncio.retry.Retry(_strategy("NoBackoff"), 3),
        )
        try:
            await r.set("patch:async-once", "ok")
            original = r.parse_response
            calls = []

            async def parse_response(*args, **kwargs):
                calls.append(None)
                if len(calls) == 1:
                    raise redis.exceptions.ConnectionError("injected")
                return await original(*args, **kwargs)

            r.parse_response = parse_response
            value = await r.get("patch:async-once")
            return value, len(calls)
        finally:
            await r.aclose()

    assert asyncio.run(main()) == (b"ok", 2)


# --- redis-py's retry behaviour, patched --------------------------------------


def test_retries_are_c_objects_built_by_redis_py(client):
    r = client(retry=redis.retry.Retry(_strategy("ConstantBackoff", 0.001), 2))
    assert type(r.get_retry()) is C_RETRY
    assert type(redis.connection.Connection(retry_on_timeout=True).retry) is C_RETRY


def test_retry_on_error(client, monkeypatch):
    # ReadOnlyError is not a ConnectionError: only retry_on_error makes it retried.
    retried = client(
        retry=redis.retry.Retry(_strategy("NoBackoff"), 3),
        retry_on_error=[redis.exceptions.ReadOnlyError],
    )
    plain = client(retry=redis.retry.Retry(_strategy("NoBackoff"), 3))
    assert retried.set("patch:roe", "x")
    connection = retried.connection_pool.get_connection()
    assert redis.exceptions.ReadOnlyError in connection.retry._supported_errors
    retried.connection_pool.release(connection)

    flaky = Flaky(redis.connection.Connection.read_response, redis.exceptions.ReadOnlyError)
    monkeypatch.setattr(redis.connection.Connection, "read_response", flaky)
    assert retried.get("patch:roe") == b"x"
    assert flaky.failures == 1

    flaky.calls = flaky.failures = 0
    with pytest.raises(redis.exceptions.ReadOnlyError):
        plain.get("patch:roe")
    assert flaky.calls == flaky.failures == 1


def test_retry_on_timeout(server, patched, admin):
    """A real timeout: the server is paused longer than the socket timeout.
    retry_on_timeout is a Connection parameter (redis.Redis deprecates it)."""

    def pool(retry_on_timeout):
        retry = redis.retry.Retry(
            _strategy("ConstantBackoff", 0.05),
            40,
            supported_errors=(redis.exceptions.ConnectionError,),
        )
        return redis.ConnectionPool(
            host=HOST,
            port=server.port,
            socket_timeout=0.2,
            retry=retry,
            retry_on_timeout=retry_on_timeout,
        )

    patient = redis.Redis(connection_pool=pool(True))
    impatient = redis.Redis(connection_pool=pool(False))
    try:
        for r, retried in ((patient, True), (impatient, False)):
            assert r.set("patch:rot", "y")
            connection = r.connection_pool.get_connection()
            assert type(connection.retry._backoff) is redis_backoff_c.backoff.ConstantBackoff
            errors = connection.retry._supported_errors
            assert (redis.exceptions.TimeoutError in errors) is retried
            r.connection_pool.release(connection)

        admin.client_pause(600, all=True)
        with pytest.raises(redis.exceptions.TimeoutError):
            impatient.get("patch:rot")
        admin.client_unpause()
        admin.client_pause(600, all=True)
        assert patient.get("patch:rot") == b"y"
    finally:
        admin.client_unpause()
        patient.close()
        impatient.close()


def test_redis_retry_on_timeout_is_deprecated_and_timeouts_are_retried(client):
    """As redis-py 8 does: a DeprecationWarning, and the default retry,
    which retries TimeoutError anyway."""
    with pytest.warns(DeprecationWarning, match="retry_on_timeout"):
        r = client(retry_on_timeout=True)
    assert redis.exceptions.TimeoutError in r.get_retry()._supported_errors
    assert r.ping()


def test_set_retry_and_get_retry_on_a_client_and_its_connections(client, monkeypatch):
    r = client()
    assert r.ping()  # a connection now waits in the pool
    existing = list(r.connection_pool._available_connections)
    assert existing
    new_retry = redis.retry.Retry(_strategy("ConstantBackoff", 0.001), 2)
    r.set_retry(new_retry)
    assert r.get_retry() is new_retry
    assert all(connection.retry is new_retry for connection in existing)
    assert type(new_retry._backoff) is redis_backoff_c.backoff.ConstantBackoff

    flaky = Flaky(
        redis.connection.Connection.read_response, redis.exceptions.ConnectionError, "all"
    )
    monkeypatch.setattr(redis.connection.Connection, "read_response", flaky)
    with pytest.raises(redis.exceptions.ConnectionError):
        r.get("patch:set-retry")
    assert flaky.calls == 3  # the new retry's 2 retries, on the existing connection
    monkeypatch.undo()
    assert r.set("patch:set-retry", "z") and r.get("patch:set-retry") == b"z"


def test_parse_response_fails_once_then_succeeds(client):
    r = client(retry=redis.retry.Retry(_strategy("NoBackoff"), 3))
    assert r.set("patch:once", "ok")
    flaky = Flaky(r.parse_response, redis.exceptions.ConnectionError)
    r.parse_response = flaky
    assert r.get("patch:once") == b"ok"
    assert flaky.calls == 2


def test_read_response_fails_once_then_succeeds(client, monkeypatch):
    r = client(retry=redis.retry.Retry(_strategy("NoBackoff"), 1), single_connection_client=True)
    assert r.set("patch:read-once", "ok")
    connection = r.connection
    flaky = Flaky(connection.read_response, redis.exceptions.ConnectionError)
    monkeypatch.setattr(connection, "read_response", flaky)
    assert r.get("patch:read-once") == b"ok"
    assert flaky.failures == 1
    assert flaky.calls >= 2  # the retried GET, after the reconnect's handshake


@pytest.mark.parametrize("retries", [0, 1, 4])
def test_the_retry_count_is_honoured_exactly(client, monkeypatch, retries):
    r = client(retry=redis.retry.Retry(_strategy("NoBackoff"), retries))
    assert r.ping()
    failures = []
    close = r._close_connection

    def counting_close(conn, error=None, failure_count=None, *args, **kwargs):
        if error is not None:
            failures.append(failure_count)
        return close(conn, error, failure_count, *args, **kwargs)

    r._close_connection = counting_close
    flaky = Flaky(
        redis.connection.Connection.read_response, redis.exceptions.ConnectionError, "all"
    )
    monkeypatch.setattr(redis.connection.Connection, "read_response", flaky)
    with pytest.raises(redis.exceptions.ConnectionError, match=f"injected failure {retries + 1}"):
        r.get("patch:count")
    assert flaky.calls == retries + 1
    assert failures == list(range(1, retries + 2))


def test_a_client_built_before_patch_keeps_working(server):
    r = redis.Redis(host=HOST, port=server.port)
    try:
        assert r.set("patch:before", "1")
        with redis_backoff_c.patched():
            assert type(r.get_retry()) is ORIGINAL_RETRY
            assert r.get("patch:before") == b"1"
            r.set_retry(redis.retry.Retry(_strategy("NoBackoff"), 1))
            assert r.get("patch:before") == b"1"
        assert r.get("patch:before") == b"1"
    finally:
        r.close()
