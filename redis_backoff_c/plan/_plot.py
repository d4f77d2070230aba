"""Charts for the planner (matplotlib, from the ``bench`` extra)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis_backoff_c.plan._describe import Description, sample_totals
from redis_backoff_c.plan._herd import BIN, HerdReport

__all__ = ["plot_descriptions", "plot_herd"]


#: What to install for the charts.
INSTALL_HINT = "pip install 'redis-backoff-c[bench]' (or pip install matplotlib)"


def matplotlib_missing() -> str | None:
    """One line saying that the charts need matplotlib, or None when it is there."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"--plot needs matplotlib, which is not installed: {INSTALL_HINT}"
    return None


def _pyplot() -> Any:
    missing = matplotlib_missing()
    if missing is not None:
        raise RuntimeError(missing)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_descriptions(
    results: Sequence[Description],
    path: str,
    *,
    policies: Sequence[object],
    samples: int = 20_000,
    seed: int | None = None,
) -> None:
    """Per policy: each failure's delay (min-max band, p50 to p99, mean) and
    a histogram of the total a failing call blocks."""
    plt = _pyplot()
    rows = len(results)
    figure, axes = plt.subplots(rows, 2, figsize=(11, 3.2 * rows), squeeze=False)
    for row, (result, retry) in enumerate(zip(results, policies)):
        left, right = axes[row]
        failures = [entry.failure for entry in result.per_failure]
        if failures:
            low = [entry.delay.min for entry in result.per_failure]
            high = [entry.delay.max for entry in result.per_failure]
            left.fill_between(failures, low, high, alpha=0.2, step="mid", label="min-max")
            left.plot(failures, [e.delay.p50 for e in result.per_failure], "o-", label="p50")
            left.plot(failures, [e.delay.p99 for e in result.per_failure], "^--", label="p99")
            left.plot(failures, [e.delay.mean for e in result.per_failure], "x:", label="mean")
            left.legend(fontsize=8)
        left.set_xlabel("failure n")
        left.set_ylabel("delay (s)")
        left.set_title(result.policy, fontsize=8)
        totals = sample_totals(
            retry,
            attempt_time=result.attempt_time,
            samples=samples,
            seed=seed,
            horizon=result.failures,
            deadline=result.deadline,
        )
        right.hist(totals, bins=60)
        for name, style in (("p50", "-"), ("p99", "--"), ("max", ":")):
            right.axvline(getattr(result.total, name), color="k", linestyle=style, label=name)
        right.set_xlabel("total blocked by a failing call (s)")
        right.set_ylabel("calls")
        right.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_herd(reports: Sequence[HerdReport], path: str) -> None:
    """Attempts per 100 ms over time, one line per policy."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(10, 4.5 + 0.22 * len(reports)))
    for report in reports:
        times = [index * BIN for index in range(len(report.attempts_per_bin))]
        axis.step(
            times,
            report.attempts_per_bin,
            where="post",
            label=f"{report.policy} ({report.total_attempts:,} attempts, "
            f"{report.gave_up:,} gave up)",
        )
    first = reports[0]
    axis.axvline(first.outage, color="k", linestyle="--", linewidth=1, label="server back")
    axis.axhline(
        first.capacity * BIN,
        color="r",
        linestyle=":",
        linewidth=1,
        label=f"capacity ({first.capacity:g}/s)",
    )
    axis.set_yscale("symlog", linthresh=10)
    axis.set_ylim(bottom=0)
    axis.set_xlabel("time (s)")
    axis.set_ylabel("attempts per 100 ms")
    axis.set_title(
        f"{first.clients:,} clients, outage {first.outage:g} s, capacity {first.capacity:g}/s",
        fontsize=10,
    )
    # Below the axes: the lines fill the whole chart.
    axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
