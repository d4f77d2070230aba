"""python -m redis_backoff_c.plan: the command line."""

from __future__ import annotations

import argparse
import inspect
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from redis_backoff_c._output_path import output_problem
from redis_backoff_c.plan._describe import Description, describe, format_seconds
from redis_backoff_c.plan._herd import HerdReport, simulate_herd
from redis_backoff_c.plan._parse import PolicyError, parse_policy
from redis_backoff_c.plan._policy import describe_policy
from redis_backoff_c.plan._stats import FIELDS, Figures

__all__ = ["aws_finding", "main", "redis_defaults"]

EPILOG = """\
POLICY is an expression of the package's constructors and numbers, e.g.
  "Retry(ExponentialWithJitterBackoff(base=0.01, cap=1), 10)"
It is parsed, never evaluated. Figures marked ~ are sampled; the others are exact.
In the herd table, peak/100ms* is the most attempts in one 100 ms bin from the
end of the outage on (the burst the server meets when it comes back).
Exit status: 0 done, 2 a bad argument, policy or output path (one line on stderr).
"""


def redis_defaults() -> tuple[Any, float | None, float | None, str]:
    """The installed redis-py's redis.Redis defaults, read at run time:
    (retry, socket_connect_timeout, socket_timeout, redis-py version)."""
    import redis

    parameters = inspect.signature(redis.Redis.__init__).parameters
    retry = parameters["retry"].default
    connect = parameters["socket_connect_timeout"].default
    socket_timeout = parameters["socket_timeout"].default
    return retry, connect, socket_timeout, str(redis.__version__)


def _parse_budget(text: str) -> tuple[float, float]:
    try:
        tokens, ratio = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--budget takes MAX_TOKENS,TOKEN_RATIO (e.g. 10,0.1), not {text!r}"
        ) from None
    if not (tokens > 0 and ratio >= 0 and math.isfinite(tokens) and math.isfinite(ratio)):
        raise argparse.ArgumentTypeError("--budget needs MAX_TOKENS > 0 and TOKEN_RATIO >= 0")
    return tokens, ratio


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"seconds must be finite and >= 0, not {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m redis_backoff_c.plan",
        description="What a retry policy costs: how long one call can block, "
        "and what a herd of clients does to a server that comes back.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("policy", nargs="?", metavar="POLICY", help="a Retry(...) expression")
    parser.add_argument(
        "--compare", nargs="+", metavar="POLICY", default=[], help="more policies, side by side"
    )
    parser.add_argument(
        "--redis-defaults",
        action="store_true",
        help="the installed redis-py's redis.Redis default Retry and timeouts",
    )
    parser.add_argument(
        "--attempt-time",
        type=_seconds,
        default=None,
        metavar="S",
        help="seconds one failed attempt takes (describe: 0; herd: 0.001)",
    )
    parser.add_argument(
        "--deadline",
        type=_seconds,
        default=None,
        metavar="S",
        help="give up a call after S seconds, as Retry(deadline=S) does",
    )
    parser.add_argument(
        "--samples", type=int, default=100_000, metavar="N", help="runs sampled (default 100,000)"
    )
    parser.add_argument(
        "--seed", type=int, default=None, metavar="N", help="seed the sampled draws and the herd"
    )
    parser.add_argument(
        "--horizon",
        type=int,
        default=20,
        metavar="N",
        help="failures described for a policy that retries forever",
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    parser.add_argument("--plot", metavar="PATH", help="draw a chart (matplotlib) to PATH")
    herd = parser.add_argument_group("herd simulator")
    herd.add_argument("--herd", type=int, metavar="N", help="simulate N clients")
    herd.add_argument("--outage", type=_seconds, metavar="S", help="the server refuses for S s")
    herd.add_argument(
        "--capacity",
        type=_seconds,
        metavar="PER_S",
        help="then serves at most PER_S attempts a second (10 ms bins)",
    )
    herd.add_argument(
        "--spread",
        type=_seconds,
        default=0.0,
        metavar="S",
        help="calls start uniformly over the first S s (default 0: all at once)",
    )
    herd.add_argument(
        "--budget",
        type=_parse_budget,
        metavar="MAX_TOKENS,RATIO",
        help="one gRFC A6 retry budget shared by all clients",
    )
    herd.add_argument(
        "--until",
        type=_seconds,
        metavar="S",
        help="stop the simulation at S s (default outage + 120)",
    )
    return parser


def _cell(figures: Figures, name: str) -> str:
    value = getattr(figures, name)
    mark = "" if name in figures.exact else "~"
    return mark + format_seconds(value)


def format_description(result: Description) -> str:
    lines = [f"policy: {result.policy}" if not result.label else f"{result.label}: {result.policy}"]
    setting = f"attempt time {format_seconds(result.attempt_time)}"
    if result.deadline is not None:
        setting += f", deadline {format_seconds(result.deadline)}"
    if result.samples:
        setting += f", {result.samples:,} samples"
    lines.append(setting)
    header = f"{'failure':>8}" + "".join(f"{name:>11}" for name in FIELDS)
    lines.append(header)
    for entry in result.per_failure:
        lines.append(
            f"{entry.failure:>8}" + "".join(f"{_cell(entry.delay, n):>11}" for n in FIELDS)
        )
    lines.append(f"{'total':>8}" + "".join(f"{_cell(result.total, n):>11}" for n in FIELDS))
    for note in result.notes:
        lines.append(f"note: {note}")
    lines.append("verdict: " + result.verdict())
    return "\n".join(lines)


def format_summary(results: Sequence[Description]) -> str:
    width = max(len(r.name) for r in results)
    lines = [f"{'policy':<{width}}  {'worst':>9} {'mean':>9} {'p50':>9} {'p99':>9}"]
    for r in results:
        t = r.total
        lines.append(
            f"{r.name:<{width}}  {_cell(t, 'max'):>9} {_cell(t, 'mean'):>9} "
            f"{_cell(t, 'p50'):>9} {_cell(t, 'p99'):>9}"
        )
    return "\n".join(lines)


def format_herd(reports: Sequence[HerdReport]) -> str:
    first = reports[0]
    lines = [
        f"herd: {first.clients} clients, outage {format_seconds(first.outage)}, "
        f"capacity {first.capacity:g} attempts/s (10 ms bins), "
        f"attempt time {format_seconds(first.attempt_time)}"
    ]
    width = max(len(r.policy) for r in reports)
    lines.append(
        f"{'policy':<{width}}  {'attempts':>9} {'peak/100ms*':>11} {'succeeded':>9} "
        f"{'gave up':>8} {'unfinished':>10} {'last done':>10}"
    )
    for r in reports:
        lines.append(
            f"{r.policy:<{width}}  {r.total_attempts:>9,} {r.peak_after_recovery:>11,} "
            f"{r.succeeded:>9,} {r.gave_up:>8,} {r.unfinished:>10,} "
            f"{format_seconds(r.last_finished):>10}"
        )
        lines.extend(f"note ({r.policy}): {note}" for note in r.notes)
    lines.append(
        f"* peak/100ms: the most attempts in one 100 ms bin from the server's "
        f"recovery ({format_seconds(first.outage)}) on"
    )
    finding = aws_finding(reports)
    if finding:
        lines.append(finding)
    elif len(reports) > 1:
        lines.append(
            "AWS's jitter finding: not tested (compare ExponentialBackoff with a jittered strategy)"
        )
    return "\n".join(lines)


_PLAIN = {"ExponentialBackoff"}
_JITTERED = {
    "FullJitterBackoff",
    "EqualJitterBackoff",
    "DecorrelatedJitterBackoff",
    "ExponentialWithJitterBackoff",
}


def aws_finding(reports: Sequence[HerdReport]) -> str:
    """Whether jitter spread the retries (a lower peak after recovery) and cut
    the total work (fewer attempts) against plain exponential backoff, in
    this run; empty when the policies do not include both kinds."""
    kinds = [r.kind for r in reports]
    plain = [r for r, k in zip(reports, kinds) if k in _PLAIN]
    jittered = [(r, k) for r, k in zip(reports, kinds) if k in _JITTERED]
    if not plain or not jittered:
        return ""
    lines = []
    for report, kind in jittered:
        # Like against like: a plain policy with the same budget and
        # deadline when there is one.
        same = [p for p in plain if (p.budget, p.deadline) == (report.budget, report.deadline)]
        base = min(same or plain, key=lambda r: r.total_attempts)
        fewer = report.total_attempts < base.total_attempts
        flatter = report.peak_after_recovery < base.peak_after_recovery
        holds = "holds" if fewer and flatter else "does NOT hold"
        lines.append(
            f"AWS's jitter finding {holds} for {kind}: {report.total_attempts:,} attempts vs "
            f"{base.total_attempts:,} ({_change(report.total_attempts, base.total_attempts)}), "
            f"peak {report.peak_after_recovery:,} vs {base.peak_after_recovery:,} per 100 ms, "
            f"{report.succeeded:,} vs {base.succeeded:,} succeeded (against ExponentialBackoff)"
        )
    return "\n".join(lines)


def _change(new: int, old: int) -> str:
    if old == 0:
        return "n/a"
    return f"{(new - old) / old:+.0%}"


def _policies(args: argparse.Namespace) -> list[tuple[str, Any, float | None]]:
    """(label, retry, attempt time or None for the option's) for each policy."""
    found: list[tuple[str, Any, float | None]] = []
    if args.redis_defaults:
        retry, connect, _socket, version = redis_defaults()
        name = f"redis-py {version} default"
        found.append((f"{name}, refused" if args.herd is None else name, retry, None))
        if args.herd is None and connect is not None:
            found.append((f"{name}, unreachable", retry, float(connect)))
    texts = ([args.policy] if args.policy else []) + list(args.compare)
    for text in texts:
        found.append(("", parse_policy(text), None))
    return found


def _write_json(path: str, payload: Any) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2, allow_nan=False, default=str)
        handle.write("\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    herd_options = (args.herd, args.outage, args.capacity)
    if any(v is not None for v in herd_options) and not all(v is not None for v in herd_options):
        parser.error("--herd, --outage and --capacity go together")
    try:
        policies = _policies(args)
    except PolicyError as error:
        print(f"error: POLICY rejected: {error}", file=sys.stderr)
        return 2
    if not policies:
        parser.error("give a POLICY, --compare POLICIES or --redis-defaults")
    # Checked before any work, so that a run of minutes does not end in a
    # traceback at the last step.
    problem = output_problem("--json", args.json) or output_problem("--plot", args.plot)
    if problem is None and args.plot:
        problem = _plot_problem()
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        if args.herd is not None:
            return _run_herd(args, policies)
        return _run_describe(args, policies)
    except (TypeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the output path went away or is not writable
        print(
            f"error: cannot write {error.filename or 'the output'}: {error.strerror}",
            file=sys.stderr,
        )
        return 2


def _plot_problem() -> str | None:
    """Why --plot cannot draw here (no matplotlib), or None."""
    from redis_backoff_c.plan._plot import matplotlib_missing

    return matplotlib_missing()


def _run_describe(args: argparse.Namespace, policies: list[tuple[str, Any, float | None]]) -> int:
    results: list[Description] = []
    for label, retry, attempt in policies:
        attempt_time = attempt if attempt is not None else (args.attempt_time or 0.0)
        previous = results[-1] if results else None
        if previous is not None and policies[len(results) - 1][1] is retry:
            # The same Retry at another attempt time (--redis-defaults'
            # refused and unreachable cases): the totals move exactly.
            if previous.deadline is None:
                results.append(previous.shifted(attempt_time, label=label))
                continue
        results.append(
            describe(
                retry,
                attempt_time=attempt_time,
                samples=args.samples,
                seed=args.seed,
                horizon=args.horizon,
                deadline=args.deadline,
                label=label or None,
            )
        )
    if args.redis_defaults:
        retry, connect, socket_timeout, version = redis_defaults()
        print(
            f"redis-py {version} redis.Redis defaults: retry={describe_policy(retry)}, "
            f"socket_connect_timeout={connect}, socket_timeout={socket_timeout}\n"
            f"refused: the connection is refused at once (attempt time "
            f"{format_seconds(args.attempt_time or 0.0)}); unreachable: every attempt waits "
            f"out the connect timeout\n"
        )
    for result in results:
        print(format_description(result))
        print()
    if len(results) > 1:
        print(format_summary(results))
        print()
    if args.json:
        payload: Any = [r.to_json() for r in results] if len(results) > 1 else results[0].to_json()
        _write_json(args.json, _finite(payload))
    if args.plot:
        from redis_backoff_c.plan._plot import plot_descriptions

        plot_descriptions(
            results,
            args.plot,
            samples=min(args.samples, 20_000),
            seed=args.seed,
            policies=[retry for _label, retry, _a in policies],
        )
    return 0


def _run_herd(args: argparse.Namespace, policies: list[tuple[str, Any, float | None]]) -> int:
    reports = []
    attempt_time = args.attempt_time if args.attempt_time is not None else 0.001
    for label, retry, _attempt in policies:
        reports.append(
            simulate_herd(
                retry,
                args.herd,
                args.outage,
                args.capacity,
                attempt_time=attempt_time,
                spread=args.spread,
                deadline=args.deadline,
                budget=args.budget,
                until=args.until,
                seed=args.seed,
                label=label or None,
            )
        )
    print(format_herd(reports))
    if args.json:
        _write_json(args.json, [r.to_json() for r in reports])
    if args.plot:
        from redis_backoff_c.plan._plot import plot_herd

        plot_herd(reports, args.plot)
    return 0


def _finite(payload: Any) -> Any:
    """JSON has no NaN: a figure nothing could estimate becomes null."""
    if isinstance(payload, float) and not math.isfinite(payload):
        return None
    if isinstance(payload, dict):
        return {k: _finite(v) for k, v in payload.items()}
    if isinstance(payload, list):
        return [_finite(v) for v in payload]
    return payload
