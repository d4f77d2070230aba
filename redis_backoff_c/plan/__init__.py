"""What a retry policy costs, before it meets an outage.

- :func:`describe`: how long one call that fails every attempt blocks (each
  delay and the total: min, mean, max, p50, p99), exact where a closed form
  exists, sampled from the strategy objects themselves elsewhere.
- :func:`simulate_herd`: N clients, an outage, a server with a capacity.
- :func:`parse_policy`: a POLICY expression, parsed with ``ast``, never evaluated.
- ``python -m redis_backoff_c.plan --help``: the command line.
"""

from redis_backoff_c.plan._cli import aws_finding, main, redis_defaults
from redis_backoff_c.plan._describe import (
    DEFAULT_HORIZON,
    Description,
    FailureFigures,
    describe,
    sample_totals,
    seeded_sources,
)
from redis_backoff_c.plan._herd import HerdReport, simulate_herd
from redis_backoff_c.plan._parse import PolicyError, parse_policy
from redis_backoff_c.plan._stats import Figures

__all__ = [
    "DEFAULT_HORIZON",
    "Description",
    "FailureFigures",
    "Figures",
    "HerdReport",
    "PolicyError",
    "aws_finding",
    "describe",
    "main",
    "parse_policy",
    "redis_defaults",
    "sample_totals",
    "seeded_sources",
    "simulate_herd",
]
