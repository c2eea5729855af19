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
