"""python/tests/fake_torch_env.py - what the fake-torch test files share: imported first, it skips the file where
the real torch is installed (test_torch_real*.py cover that), else puts the fake torch (tests/faketorch) on
sys.path. Also `Ctx`, the ctx object torch hands an op's setup_context and backward."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import torch as _torch  # the real one, or the fake when another test file imported it first
    if not getattr(_torch, "_kiln_fake", False):
        pytest.skip("the real torch is installed: test_torch_real.py covers kiln.torch", allow_module_level=True)
except ImportError:
    pass
sys.path.insert(0, os.path.join(HERE, "faketorch"))


class Ctx:
    """What torch hands setup_context and the backward: saved tensors and attributes."""

    def save_for_backward(self, *ts):
        self.saved_tensors = ts
