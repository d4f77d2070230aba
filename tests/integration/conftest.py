"""Fixtures for the integration tests: a real redis-server per test."""

import pytest
from redis_server import RedisServer


@pytest.fixture
def redis_server(tmp_path):
    """A running redis-server (AOF, fsync always) on a free loopback port,
    data in a fresh directory; stopped after the test."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()
