"""Generate the documentation pages that come from the code itself (run by scripts/docs.sh).

- ``api/``: one page per public module, an autodoc entry for every public name (each object
  documented once, under the first module that exposes it; later ones link to it);
- ``cli.md``: the ``tdsl`` command's help, every subcommand, as the installed CLI prints it;
- ``example_kernel.h``: a header ``export_library`` writes, for the C embedding page;
- ``tvm_compat.md``: the compatibility layer's README when ``tdsl.compat.tvm`` is present.

    python docs/gen_pages.py OUT_DIR
"""
from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

#: (module, title, one-line description); the order decides where an object is documented
MODULES = [
    ("tdsl", "tdsl", "declare, schedule, lower and build: the names a user imports as `td`"),
    ("tdsl.schedule", "tdsl.schedule", "schedules, stages and the trace of primitives"),
    ("tdsl.ops", "tdsl.ops", "ready-made operators and their default schedules"),
    ("tdsl.autotune", "tdsl.autotune", "templates, tuners, databases, auto_schedule"),
    ("tdsl.testing", "tdsl.testing", "fair benchmarking of kernels against other code"),
    ("tdsl.runtime", "tdsl.runtime", "compiled modules, argument checks, timing"),
    ("tdsl.interpreter", "tdsl.interpreter", "the reference interpreter of the loop IR"),
    ("tdsl.integrations.numpy", "tdsl.integrations.numpy", "calling kernels on NumPy arrays"),
    ("tdsl.integrations.torch", "tdsl.integrations.torch", "kernels as PyTorch operators"),
    ("tdsl.backends.llvm", "tdsl.backends.llvm", "the CPU backend (LLVM)"),
    ("tdsl.backends.cuda", "tdsl.backends.cuda", "the GPU backend (CUDA C, NVRTC, emulation)"),
    ("tdsl.errors", "tdsl.errors", "the errors tdsl raises"),
]


def public_names(mod: types.ModuleType) -> list[str]:
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n, v in vars(mod).items()
                 if not n.startswith("_") and not isinstance(v, types.ModuleType)
                 and (getattr(v, "__module__", "") or "").startswith(("tdsl", "schedule",
                                                                       "autotune", "backends"))]
    return sorted(dict.fromkeys(names), key=str.lower)


def directive(mod_name: str, name: str, obj: object) -> str:
    if inspect.isclass(obj):
        if issubclass(obj, BaseException):
            return f".. autoexception:: {mod_name}.{name}\n"
        return f".. autoclass:: {mod_name}.{name}\n   :members:\n   :no-inherited-members:\n"
    if callable(obj):
        return f".. autofunction:: {mod_name}.{name}\n"
    if isinstance(obj, dict):
        what = "a mapping; keys: " + ", ".join(f"``{k}``" for k in list(obj)[:40])
    else:
        what = f"a constant of type ``{type(obj).__name__}``"
    return f".. py:data:: {mod_name}.{name}\n\n   {what}\n"


def api_pages(out: Path) -> None:
    api = out / "api"
    api.mkdir(parents=True, exist_ok=True)
    seen: dict[int, str] = {}
    entries = []
    for mod_name, title, blurb in MODULES:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as e:  # an optional dependency missing: say so on the page
            (api / f"{mod_name}.md").write_text(f"# {title}\n\n{blurb}.\n\nNot importable "
                                               f"here ({e}).\n")
            entries.append(mod_name)
            continue
        body, also = [], []
        for name in public_names(mod):
            obj = getattr(mod, name)
            if isinstance(obj, types.ModuleType):
                continue
            key = id(obj)
            if key in seen:
                also.append(f"- `{mod_name}.{name}`: see {{py:obj}}`{seen[key]}`")
                continue
            seen[key] = f"{mod_name}.{name}"
            body.append(directive(mod_name, name, obj))
        text = [f"# {title}\n", f"{blurb.capitalize()}.\n"]
        if body:
            text.append("```{eval-rst}\n.. module:: " + mod_name + "\n   :no-index:\n\n"
                        + "\n".join(body) + "```\n")
        if also:
            text += ["## Also exported here\n", "\n".join(also) + "\n"]
        (api / f"{mod_name}.md").write_text("\n".join(text))
        entries.append(mod_name)
    toc = "\n".join(entries)
    (api / "index.md").write_text(
        "# API reference\n\nEvery public name, from its docstring. Each object is documented "
        "once, under the first module below that exposes it.\n\n"
        f"```{{toctree}}\n:maxdepth: 1\n\n{toc}\n```\n")


def cli_page(out: Path) -> None:
    def helptext(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "tdsl", *args, "--help"], capture_output=True,
                           text=True, timeout=120, env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"})
        if r.returncode != 0:
            raise SystemExit(f"gen_pages: tdsl {' '.join(args)} --help failed:\n{r.stderr}")
        return r.stdout.rstrip()

    parts = ["# The `tdsl` command\n",
             "Installed with the package (`tdsl ...`, or `python -m tdsl ...`). Every listing "
             "takes `--json`. The help below is what this version prints.\n",
             "```text\n$ tdsl --help\n" + helptext() + "\n```\n"]
    commands = [("tune",), ("records",), ("records", "show"), ("records", "best"),
                ("records", "export"), ("plot",), ("cache",), ("cache", "info"),
                ("cache", "clear")]
    for cmd in commands:
        try:
            text = helptext(*cmd)
        except SystemExit:
            continue
        parts.append(f"## tdsl {' '.join(cmd)}\n\n```text\n$ tdsl {' '.join(cmd)} --help\n"
                     f"{text}\n```\n")
    (out / "cli.md").write_text("\n".join(parts))


def example_header(out: Path) -> None:
    import tdsl as td
    n = td.var("n")
    x = td.placeholder((n, 64), "float32", name="x")
    w = td.placeholder((32, 64), "float32", name="w")
    k = td.reduce_axis((0, 64), name="k")
    y = td.compute((n, 32), lambda i, j: td.sum(x[i, k] * w[j, k], axis=k), name="y")
    s = td.create_schedule(y.op)
    s[y].parallel(s[y].op.axis[0])
    f = td.build(s, [x, w, y], target="llvm", name="linear")
    with tempfile.TemporaryDirectory() as tmp:
        f.export_library(str(Path(tmp) / "linear.o"))      # the header; no C compiler needed
        (out / "example_kernel.h").write_text((Path(tmp) / "linear.h").read_text())


_RELATIVE_LINK = re.compile(r"\[([^\]]+)\]\((?!https?:|mailto:|#)[^)]*\)")


def tvm_page(out: Path, root: "Path | None" = None) -> None:
    """The compatibility layer's README and the README's "Coming from TVM" section, when
    present (both belong to tdsl.compat; this page only shows them)."""
    root = root or Path(__file__).resolve().parents[1]
    parts = ["# tdsl.compat.tvm\n"]
    readme = (root / "README.md").read_text()
    m = re.search(r"^## Coming from TVM\s*$(.*?)(?=^## |\Z)", readme, re.M | re.S)
    if m:
        parts.append("From the README:\n\n" + _RELATIVE_LINK.sub(r"\1", m.group(1).strip())
                     .replace("\n### ", "\n## ") + "\n")
    for cand in (root / "tdsl" / "compat" / "tvm" / "README.md",
                 root / "tdsl" / "compat" / "README.md"):
        if cand.exists():
            text = _RELATIVE_LINK.sub(r"\1", cand.read_text())
            text = re.sub(r"^#(#*) ", r"##\1 ", text, flags=re.M)   # below this page's title
            parts.append(text)
            break
    if len(parts) == 1:
        parts.append("The TVM compatibility layer (`python -m tdsl.compat.tvm script.py`) is "
                     "not part of this build of tdsl.\n")
    (out / "tvm_compat.md").write_text("\n".join(parts))


def main(out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    api_pages(out)
    cli_page(out)
    example_header(out)
    tvm_page(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "docs/_generated"))
