"""Run Apache TVM's own tensor-expression tests against tdsl.compat.tvm and print a
per-file table (passed / failed / errors / skipped / xfailed).

    python scripts/tvm_te_tests.py /path/to/tvm [--ref v0.19.0] [-k EXPR] [--show-failures]

``/path/to/tvm`` is a TVM checkout (a work tree with ``tests/python/te``) or a git
directory (the files are read at ``--ref`` with ``git show``).  The files are copied to a
temporary directory outside this repository and run there with ``pytest -p
tdsl.compat.tvm.alias`` (so their ``import tvm`` is tdsl's layer); nothing of TVM's is
written into tdsl.  Exit status 0 when every file ran (failures are reported, not fatal).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

FILES = ("test_te_schedule.py", "test_te_tensor.py", "test_te_schedule_ops.py",
         "test_te_autodiff.py", "test_te_build_lower.py")
REPO = Path(__file__).resolve().parents[1]


def read_test(tvm: Path, ref: str, name: str) -> str:
    """The text of ``tests/python/te/<name>`` from a work tree, else from git at ``ref``."""
    rel = f"tests/python/te/{name}"
    if (tvm / rel).is_file():
        return (tvm / rel).read_text()
    git_dir = tvm / ".git" if (tvm / ".git").exists() else tvm
    out = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"refs/tags/{ref}:{rel}"],
                         capture_output=True, text=True)
    if out.returncode:
        out = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{ref}:{rel}"],
                             capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"cannot read {rel} at {ref} from {tvm}: {out.stderr.strip()}")
    return out.stdout


def run_file(path: Path, extra: list[str], timeout: int) -> dict:
    """pytest on one file; counts from its JUnit XML (an import error counts as one error)."""
    xml = path.with_suffix(".xml")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "tdsl.compat.tvm.alias", "-p",
           "no:cacheprovider", f"--junitxml={xml}", str(path), *extra]
    try:
        proc = subprocess.run(cmd, cwd=path.parent, capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"passed": 0, "failed": 0, "errors": 1, "skipped": 0, "xfailed": 0,
                "failures": [("(timeout)", f"over {timeout} s")]}
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "xfailed": 0, "failures": []}
    if not xml.exists():
        counts["errors"] = 1
        counts["failures"].append(("(collection)", proc.stdout[-500:]))
        return counts
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("name", "?")
        kinds = {child.tag: child for child in case}
        if "failure" in kinds or "error" in kinds:
            el = kinds.get("failure", kinds.get("error"))
            counts["failed" if "failure" in kinds else "errors"] += 1
            counts["failures"].append((name, (el.get("message") or "").splitlines()[0][:160]
                                       if el.get("message") else ""))
        elif "skipped" in kinds:
            key = "xfailed" if "xfail" in (kinds["skipped"].get("type") or "") + \
                (kinds["skipped"].get("message") or "") else "skipped"
            counts[key] += 1
        else:
            counts["passed"] += 1
    return counts


def main(argv: "list[str] | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tvm", type=Path, help="TVM work tree or git directory")
    ap.add_argument("--ref", default="v0.19.0", help="git ref when reading from git")
    ap.add_argument("-k", default=None, help="pytest -k expression")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per file")
    ap.add_argument("--show-failures", action="store_true", help="list each failing test")
    args = ap.parse_args(argv)
    extra = ["-k", args.k] if args.k else []
    rows = []
    with tempfile.TemporaryDirectory(prefix="tdsl-tvm-te-") as tmp:
        for name in FILES:
            path = Path(tmp) / name
            path.write_text(read_test(args.tvm, args.ref, name))
            rows.append((name, run_file(path, extra, args.timeout)))
    cols = ("passed", "failed", "errors", "skipped", "xfailed")
    print(f"{'file':<28}" + "".join(f"{c:>9}" for c in cols))
    for name, c in rows:
        print(f"{name:<28}" + "".join(f"{c[k]:>9}" for k in cols))
    total = {k: sum(c[k] for _, c in rows) for k in cols}
    print(f"{'total':<28}" + "".join(f"{total[k]:>9}" for k in cols))
    if args.show_failures:
        for name, c in rows:
            for test, msg in c["failures"]:
                print(f"  {name}::{test}: {msg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
