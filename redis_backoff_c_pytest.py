"""The pytest entry point of redis-backoff-c: ``pytest --redis-backoff-c``.

pytest loads every installed plugin (entry point ``pytest11``) in every run,
so this module is kept outside the ``redis_backoff_c`` package and imports
nothing but pytest: importing the package would import redis (about 0.1 s)
and, without the C extension, warn, in runs that never asked for it.  It
only declares the option and its ini twin; when either is given, it hands
over to ``redis_backoff_c.pytest_plugin``, before pytest imports the first
conftest.py, so that the suite's own imports already see the C types.
"""

from __future__ import annotations

import pytest

OPTION = "--redis-backoff-c"
INI = "redis_backoff_c"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("redis_backoff_c", "redis-backoff-c")
    group.addoption(
        OPTION,
        action="store_true",
        default=False,
        dest="redis_backoff_c",
        help="run the session with redis_backoff_c.patch() applied (redis-py's backoff "
        "and Retry classes replaced by the C ones) and report at the end whether the "
        "C types were in use",
    )
    parser.addini(INI, type="bool", default=False, help=f"as {OPTION}, from the ini file")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    if early_config.known_args_namespace.redis_backoff_c or early_config.getini(INI):
        from redis_backoff_c import pytest_plugin

        pytest_plugin.start(early_config)
