"""A pytest switch: any test suite run with the C types, and a report of it.

``pytest --redis-backoff-c`` (or ``redis_backoff_c = true`` in the
``[pytest]`` ini section) applies :func:`redis_backoff_c.patch` before pytest
imports the first conftest.py, keeps it for the whole session, and reports at
the end of the run (also under ``-q``) whether the C types were in use: what
patch() replaced (every location with ``-v``), or why it could not (the C
extension is not in use), or that something undid it during the run.  At
exit it calls :func:`redis_backoff_c.unpatch`, if it was the one to patch.

The option is declared by the ``redis_backoff_c_pytest`` module (the
``pytest11`` entry point), which imports this module only when the option is
given: a run without it imports neither this package nor redis.
"""

from __future__ import annotations

import pytest

import redis_backoff_c
from redis_backoff_c._patch import PatchReport

__all__ = ["SessionPatch", "start"]

PREFIX = "redis_backoff_c:"


class SessionPatch:
    """The plugin object of one session: its patch() report and verdict."""

    def __init__(self, report: PatchReport) -> None:
        self.report = report
        #: is_patched() when the session finished (None before).
        self.patched_at_end: bool | None = None

    @property
    def in_use(self) -> bool:
        """The C types were in use for the whole session (so far)."""
        still = redis_backoff_c.is_patched() if self.patched_at_end is None else self.patched_at_end
        return self.report.active and still

    def lines(self, verbose: bool) -> list[str]:
        report = self.report
        if not report.active:
            reasons = sorted(set(report.missing.values()))
            return [f"{PREFIX} the C types were NOT in use: patch() could not apply them: "
                    + "; ".join(reasons)]  # fmt: skip
        if not self.in_use:
            verdict = (
                "the C types were NOT in use for the whole session: redis_backoff_c.unpatch() "
                "was called during the run"
            )
        else:
            verdict = "the C types were in use for the whole session"
        classes = ", ".join(f"{old} -> {new}" for old, new in sorted(report.classes.items()))
        count = f"{report.count} locations" if not report.already_patched else "nothing new"
        lines = [
            f"{PREFIX} {verdict}",
            f"{PREFIX} patch() replaced {count} in redis-py"
            + ("" if verbose or not report.replaced else " (-v lists them)"),
            f"{PREFIX} classes: {classes}",
        ]
        for name, reason in sorted(report.missing.items()):
            lines.append(f"{PREFIX} not replaced: {name} ({reason})")
        if verbose:
            lines.extend(f"{PREFIX}   {location}" for location in report.replaced)
        return lines

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        report = self.report
        if not report.active:
            return [f"{PREFIX} patch() could not apply the C types: see the end of the run"]
        return [f"{PREFIX} patch() applied for the session ({report.count} locations replaced)"]

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.patched_at_end = redis_backoff_c.is_patched()

    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter, config: pytest.Config
    ) -> None:
        terminalreporter.section("redis_backoff_c", sep="-")
        for line in self.lines(verbose=config.get_verbosity() > 0):
            terminalreporter.write_line(line)

    def finish(self) -> None:
        """At exit: unpatch() if this session patched."""
        if self.report.active and not self.report.already_patched:
            redis_backoff_c.unpatch()


def start(config: pytest.Config) -> SessionPatch:
    """patch() now, and report on it at the end of the session."""
    plugin = SessionPatch(redis_backoff_c.patch())
    config.pluginmanager.register(plugin, "redis_backoff_c.session")
    config.add_cleanup(plugin.finish)
    return plugin
