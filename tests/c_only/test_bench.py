"""The benchmark runs and reports every case.

Nothing here times anything or checks a figure: the bench runs with tiny
numbers (--tiny) and the tests check the shape of what it reports, that a row
it cannot run says why, and that --plot writes a PNG.
"""

import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

import redis_backoff_c
from redis_backoff_c.bench import _cases, _cli

STRATEGIES = _cases.STRATEGIES
EXPECTED_CASES = [
    *(f"compute/{s}" for s in STRATEGIES),
    "floor",
    *(f"construct/{s}" for s in STRATEGIES),
    "construct/Retry",
    *(f"eq/{s}" for s in STRATEGIES),
    "eq/Retry",
    *(f"hash/{s}" for s in STRATEGIES),
    "hash/Retry",
    "deepcopy/Retry",
    "call_with_retry/success",
    "call_with_retry/failure",
    "call_with_retry/success extras",
    "call_with_retry/retry hooks",
    "cluster command/success extras",
    "async call_with_retry/success",
    "async call_with_retry/failure",
    "async call_with_retry/success extras",
    *(f"memory/{s}" for s in STRATEGIES),
    "memory/Retry",
    "peers/success",
    "e2e/sync",
    "e2e/asyncio",
    "e2e/sync-deadline",
]
# rows that need only the strategies, which always exist
STRATEGY_CASES = [n for n in EXPECTED_CASES if n.split("/")[-1] in STRATEGIES or n == "floor"]


def _has(module):
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def _run(*args, timeout=180):
    # -I: the installed package, never the checkout's redis_backoff_c/ in
    # the working directory.
    return subprocess.run(
        [sys.executable, "-I", "-m", "redis_backoff_c.bench", "--quick", "--tiny", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    json_path = out / "bench.json"
    args = ["--json", str(json_path)]
    if _has("matplotlib"):
        args += ["--plot", str(out / "bench.png")]
    proc = _run(*args)
    assert proc.returncode == 0, proc.stderr
    proc.out_dir = out
    return proc, json.loads(json_path.read_text())


def test_every_case_is_reported(tiny_run):
    proc, data = tiny_run
    names = [c["name"] for c in data["cases"]]
    assert names == EXPECTED_CASES
    assert {r["case"] for r in data["rows"]} == set(EXPECTED_CASES)
    assert len({r["name"] for r in data["rows"]}) == len(data["rows"])


def test_rows_have_numbers_or_say_why(tiny_run):
    proc, data = tiny_run
    for row in data["rows"]:
        if not row["available"]:
            assert row["reason"], row
            assert row["verdict"] == "n/a"
            assert f"n/a: {row['reason']}" in proc.stdout
            continue
        assert isinstance(row["a"], float) and math.isfinite(row["a"]), row
        if row["kind"] in ("ratio", "floor", "memory", "overhead"):
            assert isinstance(row["b"], float), row
            assert isinstance(row["value"], (float, str)), row
        if row["target"] is not None:
            assert row["verdict"].rstrip("~") in ("PASS", "MISS"), row


def test_rows_that_can_run_here_do(tiny_run):
    _, data = tiny_run
    must_run = set(STRATEGY_CASES)
    if _has("redis_backoff_c.retry"):
        must_run |= {
            "construct/Retry",
            "eq/Retry",
            "hash/Retry",
            "deepcopy/Retry",
            "call_with_retry/success",
            "call_with_retry/failure",
            "memory/Retry",
        }
    if _has("redis_backoff_c.asyncio.retry"):
        must_run |= {"async call_with_retry/success", "async call_with_retry/failure"}
    for row in data["rows"]:
        if row["case"] in must_run:
            assert row["available"], row
    peers = {r["name"]: r for r in data["rows"] if r["case"] == "peers/success"}
    assert peers["redis-py Retry"]["available"]
    for library, row_name in (
        ("tenacity", "tenacity @retry"),
        ("stamina", "stamina @retry"),
        ("backoff", "backoff @on_exception"),
    ):
        if _has(library):
            assert peers[row_name]["available"], peers[row_name]
        else:
            assert "not installed" in peers[row_name]["reason"]


def test_every_timed_side_has_its_samples(tiny_run):
    _, data = tiny_run
    for case in data["cases"]:
        for label, side in case["sides"].items():
            if side["available"]:
                assert side["repeats"] == len(side["samples"]) >= 1
                assert all(x > 0 for x in side["samples"]), (case["name"], label)
                assert side["q1"] <= side["median"] <= side["q3"]
            else:
                assert side["reason"]


def test_metadata(tiny_run):
    _, data = tiny_run
    meta = data["meta"]
    for key in ("python", "implementation", "platform", "cpu", "packages", "settings", "seed"):
        assert meta[key], key
    assert meta["packages"]["redis_backoff_c"] == redis_backoff_c.__version__
    assert meta["packages"]["redis"]


def test_progress_and_table(tiny_run):
    proc, _ = tiny_run
    assert f"[ 1/{len(EXPECTED_CASES)}] compute/ConstantBackoff" in proc.stderr
    assert "ExponentialBackoff.compute(3)" in proc.stdout
    assert "targets:" in proc.stdout


def test_unavailable_module_is_a_row_saying_so(monkeypatch, tmp_path, capsys):
    def missing():
        raise _cases.Unavailable("redis_backoff_c.retry not built")

    monkeypatch.setattr(_cases, "c_retry_module", missing)
    path = tmp_path / "out.json"
    assert (
        _cli.main(
            [
                "--tiny",
                "--no-e2e",
                "--filter",
                "construct/Retry",
                "--filter",
                "e2e/sync",
                "--json",
                str(path),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "n/a: redis_backoff_c.retry not built" in out
    rows = {r["name"]: r for r in json.loads(path.read_text())["rows"]}
    assert rows["Retry(ExponentialBackoff(), 3)"]["reason"] == ("redis_backoff_c.retry not built")
    assert rows["redis.Redis SET+GET"]["available"] is False
    assert redis_backoff_c.get_random_source() == "python"


def test_plot_writes_a_png(tiny_run):
    # matplotlib is in the test extra: the plot is tested in every run.
    proc, _ = tiny_run
    png = (proc.out_dir / "bench.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(png) > 10_000


def test_plot_without_matplotlib_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert _cli.main(["--tiny", "--plot", "x.png"]) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err


# -- output paths are checked before any timing (issue 33) -----------------


def _refused_at_once(done):
    """Exit 2 with one line on stderr, and nothing timed: no progress line,
    no table row, no traceback."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert done.stdout == ""  # no table, no row
    return lines[0]


def _bad_output_path(kind, tmp_path):
    if kind == "missing parent":
        return tmp_path / "no" / "such" / "dir" / "out.file"
    if kind == "a directory":
        return tmp_path
    # a parent that is a regular file (root passes every permission check,
    # so that is the unwritable parent a test can make anywhere)
    parent = tmp_path / "a-file"
    parent.write_text("")
    return parent / "out.file"


@pytest.mark.parametrize("option", ["--json", "--plot"])
@pytest.mark.parametrize(
    ("kind", "problem"),
    [
        ("missing parent", "no such directory: {parent}"),
        ("a directory", "is a directory; give a file name"),
        ("parent is a file", "not a directory: {parent}"),
    ],
)
def test_an_output_path_that_cannot_be_written_is_refused_before_timing(
    option, kind, problem, tmp_path
):
    path = _bad_output_path(kind, tmp_path)
    before = sorted(tmp_path.rglob("*"))
    # Without --tiny and --quick: refused at once, it takes no time at all;
    # a regression would run the full profile into the timeout.
    done = subprocess.run(
        [sys.executable, "-I", "-m", "redis_backoff_c.bench", "--no-e2e", option, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = _refused_at_once(done)
    assert line == f"error: {option} {path}: " + problem.format(parent=path.parent)
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


def test_an_output_that_fails_at_the_end_is_one_line(monkeypatch, tmp_path, capsys):
    # The path passed the check and then could not be opened (removed
    # meanwhile, or a permission the check could not see): one line and 2.
    def refuse(path, payload):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(_cli._report, "write_json", refuse)
    path = tmp_path / "out.json"
    assert _cli.main(["--tiny", "--no-e2e", "--filter", "floor", "--json", str(path)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: cannot write {path}: Permission denied"
    )


def test_without_redis_server_the_e2e_rows_say_how_to_get_them(tmp_path):
    # A fresh machine: no redis-server on PATH, no --redis-url (issue 33).
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    env = {
        **os.environ,
        "PATH": os.pathsep.join(
            d for d in path if not os.path.exists(os.path.join(d, "redis-server"))
        ),
    }
    json_path = tmp_path / "e2e.json"
    done = subprocess.run(
        [sys.executable, "-I", "-m", "redis_backoff_c.bench", "--tiny", "--filter", "e2e/"]
        + ["--json", str(json_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(json_path.read_text())["rows"]
    assert [r["name"] for r in rows] == [
        "redis.Redis SET+GET",
        "redis.asyncio.Redis SET+GET",
        "redis.Redis SET+GET under patch(): no deadline / deadline=10",
    ]
    for row in rows:
        assert row["reason"] == _cli.NO_REDIS_SERVER
        line = next(line for line in done.stdout.splitlines() if line.startswith(row["name"]))
        assert line.endswith(f"n/a: {_cli.NO_REDIS_SERVER}")
    # The remedies it names are real: the option the CLI takes, the script
    # that installs redis-server.
    assert "--redis-url redis://" in _cli.NO_REDIS_SERVER
    assert _cli.parse_args(["--redis-url", "redis://127.0.0.1:6379/0"]).redis_url
    assert "apt-get install redis-server" in _cli.NO_REDIS_SERVER
    script = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "test.sh"
    if script.exists():
        assert "apt-get install -y -qq redis-server" in script.read_text()


# -- the verdicts follow the targets, each set against a floor timed in the same
# run (docs/performance.md; issue 33) -------------------------------------------


def test_targets_per_version():
    t310, t311, t312, t315 = (_cases.targets(v) for v in ((3, 10), (3, 11), (3, 12), (3, 15)))
    # compute within 2x of the floor on 3.10 (no call specialisation), 1.5x
    # after; DecorrelatedJitter 2.25x / 1.75x
    assert (t310["floor"], t311["floor"], t312["floor"]) == (2.0, 1.5, 1.5)
    assert (t310["floor_decorrelated"], t312["floor_decorrelated"]) == (2.25, 1.75)
    # sync success: the overhead above do() within 2x of d.get(do, fail)
    assert t310["sync_success_floor"] == t315["sync_success_floor"] == 2.0
    # asyncio success: 1.0x of the bare coroutine on 3.10/3.11; from 3.12,
    # 1.15x of the coroutine with redis-py's signature
    assert (t310["async_floor"], t311["async_floor"], t312["async_floor"]) == (1.0, 1.0, None)
    assert (t311["async_signature_floor"], t312["async_signature_floor"]) == (None, 1.15)
    assert t315["async_signature_floor"] == 1.15
    assert t311["memory_copy_floor"] == 1.0 and t311["parity"] == 0.95
    assert (t311["extras_sync"], t311["extras_sync_deadline"]) == (10.0, 20.0)
    assert (t311["extras_async"], t311["extras_async_deadline"]) == (10.0, 20.0)
    assert (t312["extras_async"], t312["extras_async_deadline"]) == (20.0, 25.0)
    assert (t311["cluster_plain"], t311["extras_cluster"]) == (50.0, 300.0)
    assert (t311["writes_sync"], t311["writes_async"], t312["writes_async"]) == (10.0, 10.0, 20.0)


def test_rows_are_judged_against_their_floors(tiny_run):
    _, data = tiny_run
    here = _cases.targets(sys.version_info[:2])
    rows = data["rows"]
    by_name = {r["name"]: r for r in rows}
    fresh = [r for r in rows if r["section"] == "memory" and "fresh" in r["name"]]
    assert len(fresh) == len(STRATEGIES) + 1  # the strategies and the Retry
    # Fresh objects are reported with no target, so no verdict (no MISS).
    assert all(r["target"] is None and r["verdict"] is None for r in fresh), fresh
    # A deep-copied strategy against a tuple of its fields, timed (counted)
    # in the same run.
    tuples = [r for r in rows if "vs a tuple of its" in r["name"]]
    assert len(tuples) == len(STRATEGIES)
    assert {r["target"] for r in tuples} == {1.0} and all(r["b"] for r in tuples)
    floors = [r for r in rows if r["kind"] == "floor"]
    compute_floors = [
        r for r in floors if r["case"].startswith("compute/") and r["name"].endswith(" vs floor")
    ]
    assert {r["target"] for r in compute_floors} == {here["floor"], here["floor_decorrelated"]}
    # Beside each, the same C side against a one-argument builtin,
    # ().count(3): reported, with no target.
    one_argument = [r for r in floors if r["name"].endswith(" vs one-argument floor")]
    assert len(one_argument) == len(compute_floors)
    assert all(r["target"] is None and r["verdict"] is None for r in one_argument), one_argument
    assert all(r["value"] for r in one_argument)
    # DecorrelatedJitter with base = cap, the cap winning every draw: the
    # same call without its coin toss, reported with no target.
    (no_toss,) = [r for r in floors if r["name"].endswith("vs floor, base = cap")]
    assert no_toss["case"] == "compute/DecorrelatedJitterBackoff" and no_toss["value"]
    assert no_toss["target"] is None and no_toss["verdict"] is None
    # Its strategy is the default one with base = cap, and the cap wins
    # every draw, on both sources (conftest restores the default one).
    for source in ("python", "fast"):
        redis_backoff_c.set_random_source(source)
        strategy = _cases._cap_always_wins("DecorrelatedJitterBackoff")
        assert strategy._cap == 0.512 and strategy._base is strategy._cap
        assert all(strategy.compute(3) is strategy._cap for _ in range(1000))
    # The jittered computes on the default source: above random.random(),
    # against the floor.
    above_random = [r for r in rows if "above random.random()" in r["name"]]
    assert len(above_random) == 4 and all(r["kind"] == "above" for r in above_random)
    # Sync success above do(), against d.get(do, fail); the ratio against
    # redis-py judged by the parity rule.
    floor_row = by_name["call_with_retry success above do(), vs d.get(do, fail)"]
    assert floor_row["target"] == 2.0 and floor_row["target_op"] == "<="
    success = by_name["call_with_retry success (Retry(ExponentialBackoff(), 3))"]
    assert (success["target"], success["judged_by"]) == (0.95, "q1")
    # asyncio success against the bare coroutine (3.10, 3.11) or the one
    # with redis-py's signature (3.12+).
    bare = by_name["async call_with_retry success vs the bare async def"]
    assert bare["target"] == here["async_floor"]
    signature = by_name[
        "async call_with_retry success vs the bare async def with redis-py's signature"
    ]
    assert signature["target"] == here["async_signature_floor"]
    assert by_name["async call_with_retry success"]["judged_by"] == "q1"
    # Every verdict given is PASS, MISS or PASS~/MISS~ (the median judged,
    # near its target); a q1-judged row never gets the ~.
    for row in rows:
        assert row["verdict"] in (None, "n/a", "PASS", "MISS", "PASS~", "MISS~"), row
        if row["judged_by"] == "q1":
            assert row["verdict"] in ("PASS", "MISS", "n/a"), row


def test_a_parity_row_is_judged_by_its_lower_quartile():
    from redis_backoff_c.bench import _report
    from redis_backoff_c.bench._timing import Stats

    row = _cases.Row("r", target=0.95, judge="q1")
    case = _cases.Case("c", "sync Retry", {}, [row])
    # Paired ratios 1.2, 0.9, 0.9, 1.3 (median 1.05, lower quartile 0.9).
    stats = {
        "redis-py": Stats(1, [1.2e-9, 0.9e-9, 0.9e-9, 1.3e-9]),
        "c": Stats(1, [1e-9, 1e-9, 1e-9, 1e-9]),
    }
    out = _report.evaluate(row, case, stats, {})
    assert out["value"] > 0.95 and out["value_q1"] < 0.95
    assert out["verdict"] == "MISS"


def test_bench_matrix_writes_under_docs_only_when_asked():
    import os
    import pathlib

    script = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "bench-matrix.sh"
    if not script.exists():  # an installed-only run without the checkout's scripts/
        pytest.skip("scripts/bench-matrix.sh is not beside this test")
    repo = script.parent.parent

    def where(**env):
        done = subprocess.run(
            ["bash", str(script), "--where"],
            capture_output=True,
            text=True,
            timeout=30,
            env={**{k: v for k, v in os.environ.items() if k != "OUT"}, **env},
        )
        assert done.returncode == 0, done.stderr
        return pathlib.Path(done.stdout.strip())

    assert where() == repo / "bench-results"
    assert where(OUT="docs") == repo / "docs"
    assert where(OUT="/tmp/elsewhere") == pathlib.Path("/tmp/elsewhere")
