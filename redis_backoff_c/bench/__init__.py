"""The benchmark: ``python -m redis_backoff_c.bench --help``.

Times every operation of the compatibility contract for redis-py and for
redis_backoff_c in one process, interleaved, against the project's
performance targets (docs/performance.md); also redis-py
against other retry libraries (tenacity, stamina, backoff) and end to end
through a real redis-server.
"""

from ._cli import main

__all__ = ["main"]
