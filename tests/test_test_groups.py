"""Every test folder runs in the README's test command: scripts/test.sh lists its pytest
processes by folder, and a new folder missing from them would never run in CI (the model
layer's tests/graph and tests/frontend once were)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_folder_is_in_a_group_of_the_test_command():
    script = (ROOT / "scripts" / "test.sh").read_text()
    listed = set(re.findall(r"\btests/(\w+)", script))
    folders = {p.parent.name for p in (ROOT / "tests").glob("*/test_*.py")}
    missing = sorted(folders - listed)
    assert not missing, f"add {['tests/' + m for m in missing]} to a group in scripts/test.sh"
