"""The module contract (tests/contract/harness.py) for the graph domain's learnable module, SignNet: compile
without graph breaks, output dtype following the module, gradients, meta-device init, copies, threads."""

import pytest
import torch
from contract.harness import CHECKS, Case, run

from omnipos.graph import SignNet


def spectra(size, dtype):
    """(pe, eigenvalues, mask, batch) as laplacian_pe returns them for a batch of 2 + size graphs."""
    g = torch.Generator().manual_seed(size)
    sizes = torch.randint(1, 5 + 3 * size, (2 + size,), generator=g)
    batch = torch.repeat_interleave(torch.arange(sizes.numel()), sizes)
    mask = torch.arange(3) < (sizes - 1).clamp_min(0).unsqueeze(1)
    pe = torch.randn(int(sizes.sum()), 3, generator=g, dtype=torch.float64) * mask[batch]
    eigenvalues = torch.rand(sizes.numel(), 3, generator=g, dtype=torch.float64) * 2 * mask
    dtype = dtype or torch.float32
    return pe.to(dtype), eigenvalues.to(dtype), mask, batch


CASES = [
    Case("SignNet", make=lambda: SignNet(3, 4, hidden=6), inputs=spectra, grad_inputs=(0, 1), low_tol=3e-2),
    Case("SignNet(no eigenvalues, no graph context)",
         make=lambda: SignNet(3, 4, hidden=6, use_eigenvalues=False, graph_context=False), inputs=spectra,
         grad_inputs=(0,), low_tol=3e-2),
]


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_contract(case, check):
    run(case, check)
