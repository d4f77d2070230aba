"""python -m redis_backoff_c.bench: options, the run, the session."""

import argparse
import contextlib
import datetime
import importlib
import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import redis_backoff_c
from redis_backoff_c import _impl
from redis_backoff_c._output_path import output_problem

from . import _cases, _report, _timing
from ._timing import Clock, Unavailable, measure_memory, time_interleaved

# repeats, seconds per timing, objects per memory measurement, memory repeats
PROFILES = {
    "full": dict(repeats=15, min_time=0.05, mem_objects=5000, mem_repeats=2),
    "quick": dict(repeats=7, min_time=0.008, mem_objects=500, mem_repeats=1),
    # for tests/test_bench.py: every case, tiny numbers, no meaningful figure
    "tiny": dict(repeats=2, min_time=0.0002, mem_objects=50, mem_repeats=1),
}

# Why the end-to-end rows are n/a on a machine without Redis (the README's
# first command meets it on a fresh one): the row says how to get them.
NO_REDIS_SERVER = (
    "redis-server not on PATH (install it: apt-get install redis-server on Debian "
    "or Ubuntu, which bash scripts/test.sh does when run as root; or pass "
    "--redis-url redis://HOST:PORT/0)"
)

PACKAGES = ("redis", "hypothesis", "tenacity", "stamina", "backoff", "matplotlib", "uvloop")


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m redis_backoff_c.bench",
        description="Time redis_backoff_c against redis-py (and other retry "
        "libraries) in one process, interleaved.",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="fewer, shorter repeats: the whole run in under a minute",
    )
    p.add_argument("--json", metavar="PATH", help="write every result to PATH")
    p.add_argument(
        "--plot", metavar="PATH", help="write a PNG chart of the ratios (needs matplotlib)"
    )
    p.add_argument(
        "--filter",
        metavar="SUBSTR",
        action="append",
        help="only cases whose name contains SUBSTR (repeatable)",
    )
    p.add_argument(
        "--no-e2e", action="store_true", help="skip the end-to-end rows (no redis-server)"
    )
    p.add_argument(
        "--redis-url",
        metavar="URL",
        help="use this server for end-to-end rows instead of "
        "starting redis-server on a free loopback port",
    )
    p.add_argument("--repeats", type=int, help="interleaved repeats per case")
    p.add_argument(
        "--min-time", type=float, metavar="SECONDS", help="target duration of one timing"
    )
    p.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="event loop for the asyncio rows (default: asyncio)",
    )
    p.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="clock of the in-process rows: CPU time of this "
        "process (default; robust when other processes "
        "compete for the CPU) or wall clock; end-to-end rows "
        "always use the wall clock",
    )
    p.add_argument("--list", action="store_true", help="list case names and exit")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


class Session:
    """Run-wide resources: the event loop and the redis-server."""

    def __init__(self, args):
        self.loop_name = args.loop
        self.no_e2e = args.no_e2e
        self._url = args.redis_url
        self._url_error = None
        self._loop = None
        self._server = None
        self.redis_server_version = None

    def loop(self):
        if self._loop is None:
            self._loop = _cases.new_event_loop(self.loop_name)
        return self._loop

    def redis_url(self):
        if self.no_e2e:
            raise Unavailable("skipped (--no-e2e)")
        if self._url is None and self._url_error is None:
            try:
                self._server = RedisServer()
                self._url = self._server.url
            except Unavailable as error:
                self._url_error = str(error)
        if self._url is None:
            raise Unavailable(self._url_error)
        if self.redis_server_version is None:
            import redis

            try:
                client = redis.Redis.from_url(self._url)
                self.redis_server_version = client.info("server")["redis_version"]
                client.close()
            except Exception as error:  # noqa: BLE001 - reported, not hidden
                self._url_error = f"cannot reach {self._url}: {error}"
                self._url = None
                raise Unavailable(self._url_error) from None
        return self._url

    def close(self):
        if self._loop is not None:
            self._loop.close()
        if self._server is not None:
            self._server.stop()


class RedisServer:
    """redis-server on a free loopback port, no persistence, stopped by stop()."""

    def __init__(self):
        exe = shutil.which("redis-server")
        if exe is None:
            raise Unavailable(NO_REDIS_SERVER)
        self.dir = tempfile.TemporaryDirectory(prefix="redis-backoff-c-bench-")
        for _ in range(3):
            self.port = _free_port()
            self.proc = subprocess.Popen(
                [
                    exe,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    self.dir.name,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._wait_ready():
                self.url = f"redis://127.0.0.1:{self.port}/0"
                return
            self.stop(cleanup=False)
        self.dir.cleanup()
        raise Unavailable("redis-server did not start")

    def _wait_ready(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return True
            except OSError:
                time.sleep(0.05)
        return False

    def stop(self, cleanup=True):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if cleanup:
            self.dir.cleanup()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def progress(text):
    print(text, file=sys.stderr, flush=True)


def run_case(case, session, settings):
    """Time (or measure) the case's sides; return (side results, rows)."""
    reasons, stats = {}, {}
    with contextlib.ExitStack() as stack:
        if case.context:
            case.context(stack)
        built = {}
        for label, factory in case.sides.items():
            try:
                built[label] = factory(stack)
            except Unavailable as error:
                reasons[label] = str(error)
        needed = set()
        for row in case.rows:
            req = _report.required_sides(row)
            if all(s in built for s in req):
                needed.update(req)
                if row.den in built:
                    needed.add(row.den)
        sides = {label: built[label] for label in built if label in needed}
        try:
            if case.kind == "memory":
                for label, side in sides.items():
                    stats[label] = measure_memory(
                        side.make, settings["mem_objects"], settings["mem_repeats"]
                    )
            elif sides:
                stats = time_interleaved(
                    sides,
                    max(2, round(settings["repeats"] * case.repeats_scale)),
                    settings["min_time"] * case.min_time_scale,
                )
        finally:
            redis_backoff_c.set_random_source("python")
    rows = [_report.evaluate(row, case, stats, reasons) for row in case.rows]
    unit = "bytes per object" if case.kind == "memory" else "seconds per operation"
    sides_out = {
        label: (
            {"available": True, **stats[label].as_dict(unit)}
            if label in stats
            else {
                "available": False,
                "reason": reasons.get(label, "not needed by any available row"),
            }
        )
        for label in case.sides
    }
    return sides_out, rows


def collect_meta(session, args, settings, seconds):
    packages = {"redis_backoff_c": redis_backoff_c.__version__}
    for name in PACKAGES:
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = None
    built = {}
    for name in ("redis_backoff_c.retry", "redis_backoff_c.asyncio.retry"):
        try:
            importlib.import_module(name)
            built[name] = True
        except ImportError as error:
            built[name] = f"not available: {error}"
    return {
        "python": platform.python_version(),
        "python_full": sys.version,
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "packages": packages,
        "redis_backoff_c_file": redis_backoff_c.__file__,
        "modules": built,
        "redis_server": session.redis_server_version,
        "event_loop": session.loop_name,
        "seed": _cases.SEED,
        "failures_argument": _cases.FAILURES,
        "settings": settings,
        "argv": sys.argv[1:] if args is None else args,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "duration_seconds": round(seconds, 2),
    }


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv=None):
    args = parse_args(argv)
    if redis_backoff_c.IMPLEMENTATION != "c":
        # Both sides would be redis-py's own classes: nothing to measure.
        print(
            "error: the benchmark compares the C extension with redis-py, and the "
            f"extension is not in use: {_impl.FALLBACK_REASON}",
            file=sys.stderr,
        )
        return 2
    # The output paths are checked before any timing, so that a run of
    # minutes does not end in a traceback at its last step.
    problem = output_problem("--json", args.json) or output_problem("--plot", args.plot)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(
                "error: --plot needs matplotlib: pip install 'redis-backoff-c[bench]'",
                file=sys.stderr,
            )
            return 2
    profile = "tiny" if args.tiny else "quick" if args.quick else "full"
    settings = dict(PROFILES[profile], profile=profile, clock=args.clock)
    _timing.set_clock(args.clock)
    if args.repeats:
        settings["repeats"] = args.repeats
    if args.min_time:
        settings["min_time"] = args.min_time

    session = Session(args)
    cases = _cases.all_cases(session)
    if args.filter:
        cases = [c for c in cases if any(f.lower() in c.name.lower() for f in args.filter)]
    if args.list:
        print("\n".join(c.name for c in cases))
        return 0

    clock = Clock()
    results, rows = [], []
    try:
        for i, case in enumerate(cases, 1):
            sides, case_rows = run_case(case, session, settings)
            rows.extend(case_rows)
            results.append(
                {
                    "name": case.name,
                    "section": case.section,
                    "kind": case.kind,
                    "note": case.note,
                    "sides": sides,
                }
            )
            gone = sorted({r["reason"] for r in case_rows if not r["available"]})
            progress(
                f"[{i:2}/{len(cases)}] {case.name:<40} {clock.elapsed():6.1f}s"
                + (f"  n/a: {'; '.join(gone)}" if gone else "")
            )
    finally:
        session.close()
    meta = collect_meta(session, argv, settings, clock.elapsed())

    print(
        f"redis_backoff_c {meta['packages']['redis_backoff_c']} vs redis "
        f"{meta['packages']['redis']}; {meta['implementation']} "
        f"{meta['python']} on {meta['cpu']} ({meta['cpu_count']} CPUs), "
        f"{meta['platform']}"
    )
    clock = {
        "cpu": "CPU time of this process (time.process_time)",
        "wall": "wall clock (time.perf_counter)",
    }[args.clock]
    print(
        f"profile {profile}: {settings['repeats']} interleaved repeats of "
        f"~{settings['min_time'] * 1e3:g} ms per side, clock: {clock}; "
        f"random seed {_cases.SEED}; took {meta['duration_seconds']:.1f} s"
    )
    print(_report.render_table(rows, cases))
    print()
    print(_report.summary(rows))
    print(_report.LEGEND)

    try:
        if args.json:
            _report.write_json(args.json, {"meta": meta, "cases": results, "rows": rows})
            progress(f"wrote {args.json}")
        if args.plot:
            _report.write_plot(args.plot, rows, meta)
            progress(f"wrote {args.plot}")
    except OSError as error:  # the path went away, or a permission the check could not see
        print(
            f"error: cannot write {error.filename or 'the output'}: {error.strerror or error}",
            file=sys.stderr,
        )
        return 2
    return 0
