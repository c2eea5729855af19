"""ops.attention on CUDA: the default schedule is one fused kernel, right under the CPU
emulator (race-checked) against PyTorch, and NVRTC compiles it for sm_80 and sm_90."""
import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.backends.cuda import nvrtc

torch = pytest.importorskip("torch", reason="PyTorch's SDPA is the reference")


def _build(causal, sq=5, sk=70, d=8):
    q = td.placeholder((1, 2, sq, d), name="q")
    k = td.placeholder((1, 2, sk, d), name="k")
    v = td.placeholder((1, 2, sk, d), name="v")
    o = ops.attention(q, k, v, causal=causal)
    return td.build(ops.schedule(o, "cuda"), [q, k, v, o], target="cuda -arch=sm_80")


@pytest.mark.parametrize("causal", [False, True])
def test_one_fused_kernel_emulated_against_torch(causal):
    f = _build(causal)
    assert f.get_source().count("__global__") == 1
    rng = np.random.default_rng(1)
    a = [rng.standard_normal(s).astype("float32") for s in ((1, 2, 5, 8), (1, 2, 70, 8),
                                                              (1, 2, 70, 8))]
    out = np.full((1, 2, 5, 8), 7.0, "float32")
    f.emulate(*a, out)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *[torch.from_numpy(x) for x in a], is_causal=causal).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC (cuda-python) is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_it(arch):
    src = _build(True, sq=128, sk=512, d=64).get_source()
    assert nvrtc.compile_cuda(src, arch, "cubin")
