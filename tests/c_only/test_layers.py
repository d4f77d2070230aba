"""The layers.  In C: scripts/check_layers.py, which lint runs over csrc/,
passes on the project's C sources, and names a cycle and an upward
dependency when there is one.  In the tests: test modules take their shared
helpers from tests/support.py, never from a conftest.py, which holds only
fixtures and hooks."""

import subprocess
import sys
from pathlib import Path

import pytest
from support import conftest_imports

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_layers.py"
TESTS = ROOT / "tests"

needs_script = pytest.mark.skipif(not SCRIPT.exists(), reason="needs the source tree")


def check(directory):
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(directory)], capture_output=True, text=True
    )


@needs_script
def test_the_c_sources_have_no_cycle_and_point_down():
    result = check(ROOT / "csrc")
    assert result.returncode == 0, result.stderr
    assert "retry_core: " in result.stdout


@needs_script
def test_a_cycle_is_named(tmp_path):
    (tmp_path / "strategies.h").write_text('#include "extras.h"\nint rbc_a(void);\n')
    (tmp_path / "strategies.c").write_text('#include "strategies.h"\nint\nrbc_a(void)\n{\n}\n')
    (tmp_path / "extras.h").write_text("int rbc_b(void);\n")
    (tmp_path / "extras.c").write_text(
        '#include "extras.h"\nint\nrbc_b(void)\n{\n    return rbc_a();\n}\n'
    )
    result = check(tmp_path)
    assert result.returncode == 1
    assert "cycle: extras <-> strategies" in result.stderr
    # strategies (layer 3) includes extras (layer 4): that points up.
    assert "strategies (layer 3) names extras (layer 4)" in result.stderr


@needs_script
def test_a_unit_in_no_layer_is_refused(tmp_path):
    (tmp_path / "newthing.c").write_text("int\nrbc_new(void)\n{\n    return 0;\n}\n")
    result = check(tmp_path)
    assert result.returncode == 1
    assert "newthing" in result.stderr


# -- the tests' own layers (issue 33) ---------------------------------------


def test_no_test_module_imports_from_conftest():
    sources = sorted(TESTS.rglob("*.py"))
    assert len(sources) > 20, TESTS  # the checkout's tests, not an empty glob
    found = []
    for path in sources:
        found += conftest_imports(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert found == [], "shared helpers belong in tests/support.py: " + "; ".join(found)


def test_the_scan_finds_an_import_from_conftest():
    sample = (
        "import conftest\n"
        "from conftest import HELPER\n"
        "from support import Conn\n"
        "import conftest_like, os\n"
        "from . import conftest\n"  # a package's own module, not the root conftest
        "def f():\n"
        "    import conftest.helpers\n"
    )
    assert conftest_imports(sample, "sample.py") == [
        "sample.py:1: import conftest",
        "sample.py:2: from conftest import HELPER",
        "sample.py:7: import conftest.helpers",
    ]
