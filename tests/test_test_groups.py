"""Every test folder runs in the README's test command (scripts/test.sh): its pytest run
names the paths it collects, and a folder outside them would never run in CI (the model
layer's tests/graph and tests/frontend once were, when the suite ran as listed groups)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_folder_is_collected_by_the_test_command():
    script = (ROOT / "scripts" / "test.sh").read_text()
    runs = [line for line in script.splitlines()
            if "-m pytest" in line and not line.lstrip().startswith("#")]
    assert runs, "scripts/test.sh runs no pytest"
    paths = {p for line in runs for p in re.findall(r"(?<![\w/.-])(tests(?:/\w+)?)(?=\s|$)",
                                                       line.split("#")[0])}
    folders = {p.parent.name for p in (ROOT / "tests").glob("*/test_*.py")}
    missing = sorted(f for f in folders if "tests" not in paths and f"tests/{f}" not in paths)
    assert not missing, f"scripts/test.sh does not collect {['tests/' + m for m in missing]}"
