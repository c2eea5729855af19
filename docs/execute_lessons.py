"""Execute the tutorial notebooks and store them WITH their outputs.

    python docs/execute_lessons.py                 # every lesson in tutorials/
    python docs/execute_lessons.py 02 08           # lessons whose name starts so

Each notebook runs top to bottom (nbclient) in a kernel of this Python, in the tutorials
folder.  Before saving, outputs are made readable as a static page shows them: a stream's
carriage-return redraws (tqdm bars) are resolved to their final state, and execution
timestamps are dropped so that a re-run changes only what the code printed.
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"
KERNEL = "tdsl-lessons-python"
CELL_TIMEOUT = 600
_ANSI_CURSOR = re.compile(r"\x1b\[A")


def resolve_carriage_returns(text: str) -> str:
    """What a terminal would show: each line keeps only what follows its last ``\\r``
    (tqdm redraws its bar that way; a stored notebook would show every frame)."""
    text = _ANSI_CURSOR.sub("", text)
    lines = []
    for line in text.split("\n"):
        if "\r" in line:
            frames = [f for f in line.split("\r") if f.strip()]
            line = frames[-1] if frames else ""
        lines.append(line)
    return "\n".join(lines)


def clean(nb: "nbformat.NotebookNode") -> None:
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.metadata.pop("execution", None)
        merged: list = []
        for out in cell.outputs:
            if out.get("output_type") == "stream":
                if merged and merged[-1].get("output_type") == "stream" \
                        and merged[-1]["name"] == out["name"]:
                    merged[-1]["text"] += out["text"]
                    continue
            merged.append(out)
        for out in merged:
            if out.get("output_type") == "stream":
                out["text"] = resolve_carriage_returns(out["text"])
        cell.outputs = merged


def kernel_spec_dir() -> str:
    """A kernelspec running this interpreter's ipykernel (found through JUPYTER_PATH)."""
    root = Path(tempfile.mkdtemp(prefix="tdsl-kernel-"))
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "tdsl lessons", "language": "python"}))
    return str(root)


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name=KERNEL, timeout=CELL_TIMEOUT,
                            resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - t0
    clean(nb)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python",
                                 "name": "python3"}
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return seconds


def main(argv: "list[str]") -> int:
    paths = sorted(TUTORIALS.glob("[0-9][0-9]_*.ipynb"))
    if argv:
        paths = [p for p in paths if any(p.name.startswith(a) for a in argv)]
    os.environ["JUPYTER_PATH"] = kernel_spec_dir() + (
        os.pathsep + os.environ["JUPYTER_PATH"] if os.environ.get("JUPYTER_PATH") else "")
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    for p in paths:
        print(f"{p.name}: {execute(p):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
