"""scripts/gpu_check.sh where there is no GPU (its dry run), and tdsl imported from the
checkout without an install (how the script runs on a lent GPU machine)."""
import os
import re
import subprocess
import sys

import pytest

from tdsl.backends.cuda import driver, nvrtc

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "gpu_check.sh")

no_gpu_here = pytest.mark.skipif(driver.device_status()[0],
                                 reason="a GPU is present: gpu_check.sh runs the full check")


def _dry_run(**env):
    e = dict(os.environ, PYTHON=sys.executable, **env)
    r = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, timeout=300, env=e,
                       cwd="/")
    return r, r.stdout.strip().splitlines()     # the summary is stdout's last line


@no_gpu_here
@pytest.mark.skipif(not nvrtc.is_available(), reason="the static report needs NVRTC")
def test_dry_run_says_no_gpu_runs_the_static_report_and_sums_up():
    r, lines = _dry_run()
    assert r.returncode == 2
    assert any("NO GPU here" in x and "skipping benchmark, gpu-tests" in x for x in lines)
    assert any(x.startswith("== static (timeout") for x in lines)
    assert any(x.startswith("matmul:default_function_kernel") for x in lines)   # the table
    last = lines[-1]
    assert re.fullmatch(r"gpu_check: SUMMARY no GPU \(dry run\): static ok; "
                        r"skipped \(no GPU\): benchmark, gpu-tests, racecheck, memcheck, "
                        r"synccheck \(\d+s\)", last), last


@no_gpu_here
def test_dry_run_within_its_budget_skips_what_does_not_fit():
    r, lines = _dry_run(GPU_CHECK_BUDGET="5")
    assert r.returncode == 2
    assert lines[-1].startswith("gpu_check: SUMMARY no GPU (dry run): static skipped "
                                "(out of time); skipped (no GPU):"), lines[-1]


def test_tdsl_imports_from_the_checkout_without_an_install():
    code = ("import sys\n"
            "for f in list(sys.meta_path):\n"
            "    if 'editable' in repr(f).lower(): sys.meta_path.remove(f)\n"
            "import tdsl as td\n"
            "from tdsl import ops\n"
            "from tdsl.backends.cuda import static, kernels\n"
            "import tdsl.schedule, tdsl.autotune\n"
            "assert tdsl.backends.__file__.startswith(sys.argv[1]), tdsl.backends.__file__\n"
            "X = td.placeholder((8, 8), name='X')\n"
            "s = ops.schedule(ops.softmax(X), 'cuda')\n"
            "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, "backends")],
                       capture_output=True, text=True, timeout=120, env=env, cwd="/")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_tdsl_runs_without_ml_dtypes_and_says_what_bf16_needs():
    """The lent GPU machines have no ml_dtypes: tdsl imports and runs float32 kernels; a
    bfloat16 NumPy dtype is a DTypeError naming the package."""
    code = ("import sys, importlib.abc\n"
            "class Block(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'ml_dtypes':\n"
            "            raise ModuleNotFoundError('blocked', name=name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import numpy as np\n"
            "import tdsl as td\n"
            "from tdsl import DType\n"
            "from tdsl.errors import DTypeError\n"
            "from tdsl.interpreter import run\n"
            "A = td.placeholder((5,), name='A')\n"
            "B = td.compute((5,), lambda i: A[i] * 2.0, name='B')\n"
            "f = td.lower(td.create_schedule(B.op), [A, B])\n"
            "a = np.arange(5, dtype='float32'); b = np.zeros(5, 'float32')\n"
            "run(f, a, b)\n"
            "assert (b == a * 2).all()\n"
            "try:\n"
            "    DType.BFLOAT16.numpy\n"
            "except DTypeError as e:\n"
            "    assert 'ml_dtypes' in str(e)\n"
            "else:\n"
            "    raise SystemExit('no error')\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd="/")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
