"""Run a script with Triton's interpreter (``TRITON_INTERPRET=1``) in a fresh process, so the CUDA kernels' Triton
code runs on CPU tensors; skip a test where the interpreter cannot run at all."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PROBE = ("import torch, triton, triton.language as tl\n"
         "@triton.jit\ndef k(p):\n    tl.store(p + tl.arange(0, 2), tl.arange(0, 2).to(tl.float32))\n"
         "t = torch.zeros(2); k[(1,)](t); assert t.tolist() == [0.0, 1.0]")


def run_interpreted(script: str) -> subprocess.CompletedProcess:
    """``python -c script`` with ``TRITON_INTERPRET=1`` and this checkout's ``src`` first on the path."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(SRC))
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def interpreter_or_skip() -> None:
    """Skip unless triton imports and its interpreter runs a one-line kernel here."""
    pytest.importorskip("triton")
    probe = run_interpreted(PROBE)
    if probe.returncode != 0:
        pytest.skip(f"Triton's interpreter cannot run here: {probe.stderr.strip().splitlines()[-1:]}")
