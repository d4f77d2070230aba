"""Sphinx configuration of the redis-backoff-c documentation.

Built by ``bash scripts/docs.sh`` (HTML with -W --keep-going -n, then the
doctest builder, against a redis-server it starts).  The API reference is
generated from the *installed* package: this file never puts the checkout on
sys.path, and refuses to build from a checkout's unbuilt redis_backoff_c/.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import sys

import redis_backoff_c

HERE = pathlib.Path(__file__).resolve().parent
_package = pathlib.Path(redis_backoff_c.__file__).resolve().parent
if _package.parent == HERE.parent:
    raise RuntimeError(
        f"Sphinx imported redis_backoff_c from the checkout ({_package}), not an "
        "installed build: run bash scripts/docs.sh (it installs the package)"
    )

project = "redis-backoff-c"
author = "redis-backoff-c developers"
copyright = "redis-backoff-c developers, MIT License"
release = importlib.metadata.version("redis-backoff-c")
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = f"redis-backoff-c {release}"

# autodoc: the installed package's C types (their docstrings and text
# signatures) and Python modules; members in source order.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"

# Nitpicky (-n): every cross-reference must resolve.  The docs of CPython and
# redis-py cannot be fetched here (no intersphinx), so references to their
# names are listed, and only those.
nitpick_ignore_regex = [
    ("py:class", r"(int|float|str|bool|object|bytes|type|tuple|list|dict|frozenset|None)"),
    ("py:class", r"(BaseException|Exception|collections\.abc\..*|typing\..*|types\..*)"),
    ("py:class", r"(Callable|Iterator|Awaitable|Coroutine|Iterable|Mapping|Sequence|Any)"),
    ("py:class", r"redis\..*"),
    ("py:class", r"(AbstractBackoff|AbstractRetry)"),
    ("py:obj", r"redis\..*"),
    # The standard library's logging, and the exporters' libraries
    # (prometheus_client, OpenTelemetry), for redis_backoff_c.log and .metrics.
    ("py:(class|mod|meth|func)", r"logging(\..*)?"),
    ("py:class", r"(CounterMetricFamily|prometheus_client\..*|opentelemetry\..*)"),
    # redis_backoff_c.metrics' type aliases and its private instruments.
    ("py:class", r"(AttributeValue|StatsArgument|_MeterInstruments)"),
]

# doctest: the examples run against the redis-server scripts/docs.sh
# started, on the loopback port it exports.
doctest_global_setup = """
import os
PORT = int(os.environ.get("REDIS_PORT", "6379"))
"""
doctest_default_flags = (
    __import__("doctest").ELLIPSIS
    | __import__("doctest").NORMALIZE_WHITESPACE
    | __import__("doctest").DONT_ACCEPT_TRUE_FOR_1
)


def _performance_tables() -> None:
    """docs/_generated/per-version.md from docs/bench-3.X.json, with the
    script the README's table comes from (scripts/bench_matrix_table.py)."""
    out = HERE / "_generated"
    out.mkdir(exist_ok=True)
    sys.path.insert(0, str(HERE.parent / "scripts"))
    try:
        import contextlib
        import io

        import bench_matrix_table
    finally:
        sys.path.pop(0)
    paths = sorted(str(p) for p in HERE.glob("bench-3.*.json"))
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        bench_matrix_table.main(paths)
    (out / "per-version.md").write_text(buffer.getvalue(), encoding="utf-8")
    with open(HERE / "bench.json", encoding="utf-8") as handle:
        full = json.load(handle)
    (out / "full.md").write_text(bench_matrix_table.full_table(full), encoding="utf-8")


_performance_tables()
os.environ.setdefault("REDIS_BACKOFF_C_DOCS", "1")
