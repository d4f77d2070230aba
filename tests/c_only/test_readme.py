"""The README stays a front door (issue 24): short, with the two commands CI
runs, and links that lead somewhere.  Reads the checkout's files beside the
tests; skipped where they are not (an sdist without docs/)."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


@pytest.fixture(scope="module")
def readme():
    if not README.exists():
        pytest.skip("no README.md beside the tests")
    return README.read_text(encoding="utf-8")


def test_readme_is_short(readme):
    assert len(readme.splitlines()) <= 200


def test_readme_keeps_the_commands_ci_runs(readme):
    lines = readme.splitlines()
    # .ci/run greps this line and runs it (with --tiny --no-e2e added).
    bench = [line for line in lines if line.startswith("python3 -m venv .venv && ")]
    assert len(bench) == 1 and bench[0].endswith("-I -m redis_backoff_c.bench")
    assert "bash scripts/test.sh" in lines


def test_readme_links_into_the_docs_exist(readme):
    if not (ROOT / "docs" / "conf.py").exists():
        pytest.skip("no docs/ beside the tests")
    targets = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert len(targets) >= 10
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert missing == []
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    # every page the README points to is in the site's table of contents
    pages = {pathlib.Path(t).stem for t in targets}
    assert {p for p in pages if p not in index} == set()
