"""``td.Target`` built from a target string, as TVM users write it."""
import pytest

import tdsl as td
from tdsl.errors import BuildError


@pytest.mark.parametrize("text", ["llvm", "llvm -mcpu=haswell -num-threads=2", "cuda -arch=sm_90"])
def test_target_from_a_string_equals_the_parsed_target(text):
    t = td.Target(text)
    assert t == td.as_target(text)
    assert hash(t) == hash(td.as_target(text))
    assert str(t) == str(td.as_target(text))


def test_target_explicit_fields_win_over_defaults():
    assert td.Target("cuda", arch="sm_90").arch == "sm_90"


@pytest.mark.parametrize("bad", [3, None, "tpu", "llvm mcpu"])
def test_target_refuses_what_is_not_a_target(bad):
    with pytest.raises(BuildError):
        td.Target(bad)


@pytest.mark.parametrize("text, bits", [("llvm -mcpu=skylake-avx512", 512),
                                        ("llvm -mcpu=haswell", 256)])
def test_ops_schedules_see_the_vector_width_of_a_named_cpu(text, bits):
    """A -mcpu with no -mattr once gave 128-bit tiles (its feature string is empty)."""
    pytest.importorskip("llvmlite", reason="the CPU's features come from LLVM")
    from tdsl.ops.schedules.llvm import cpu_of
    assert cpu_of(td.as_target(text)).vector_bits == bits
