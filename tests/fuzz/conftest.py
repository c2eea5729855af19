"""Print the fuzzer's counts at the end of the session (scripts/fuzz_long.sh reads them)."""
from tests.fuzz.stats import COUNTS


def pytest_terminal_summary(terminalreporter, exitstatus, config):   # noqa: ANN001
    if not COUNTS["schedules"] and not COUNTS["primitives applied"]:
        return
    tr = terminalreporter
    tr.section("tdsl schedule fuzzer")
    tr.write_line(f"schedules run: {COUNTS['schedules']}")
    tr.write_line(f"  refused at lower: {COUNTS['refused']}")
    tr.write_line(f"  passed: {COUNTS['passed']}")
    tr.write_line(f"  failed: {COUNTS['failed']}")
    tr.write_line(f"  abandoned by hypothesis while drawing (overrun/assume): {COUNTS['abandoned']}")
    tr.write_line(f"primitive calls: {COUNTS['primitives applied']} applied, "
                  f"{COUNTS['primitives refused']} refused (TDSLError, schedule unchanged)")
