"""scripts/check_layers.py, which lint runs over csrc/: it passes on the
project's C sources, and names a cycle and an upward dependency when
there is one."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_layers.py"

pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="needs the source tree")


def check(directory):
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(directory)], capture_output=True, text=True
    )


def test_the_c_sources_have_no_cycle_and_point_down():
    result = check(ROOT / "csrc")
    assert result.returncode == 0, result.stderr
    assert "retry_core: " in result.stdout


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


def test_a_unit_in_no_layer_is_refused(tmp_path):
    (tmp_path / "newthing.c").write_text("int\nrbc_new(void)\n{\n    return 0;\n}\n")
    result = check(tmp_path)
    assert result.returncode == 1
    assert "newthing" in result.stderr
