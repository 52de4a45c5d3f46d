"""benchmarks/bench_rope.py's table (issue 35): its code runs on the CPU at a tiny size, checks every output against
the float64 rotation before timing it, and refuses to time a wrong one."""

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
bench_rope = pytest.importorskip("bench_rope")


def test_a_table_row_on_the_cpu_has_the_issues_columns_and_small_errors():
    def not_rotated(q, k, cos, sin):  # a peer that forgot to rotate: must be reported, not timed
        return q * 1, k * 1

    row = bench_rope.table_row(2, 4, 2, 8, 32, device=torch.device("cpu"), dtype=torch.bfloat16, compile_=False,
                               liger=not_rotated, samples=1, calls=1)
    for key in ("copy", "omnipos", "hf_eager", "fwd_bwd_omnipos", "fwd_bwd_hf"):
        assert row[f"{key}_ms"] > 0, key
    assert row["err_omnipos"] < 0.02 and row["err_hf_eager"] < 0.05  # max |out - ref| of bf16 outputs, |x| < 5
    assert row["err_fwd_bwd_omnipos"] < 0.02
    assert row["wrong"] == "liger,fwd_bwd_liger" and "liger_ms" not in row and "fwd_bwd_liger_ms" not in row
    table = bench_rope.issue_table([row])
    assert table.splitlines()[0].startswith("| q / k shape | copy | omnipos call | HF eager | omnipos fwd+bwd |")
    assert "[2,4,8,32] / [2,2,..]" in table


def test_the_reference_is_the_rotation_and_its_transpose():
    """rotation_f64 turns by +theta (sign=-1: the transpose); q.k scores depend on n_q - n_k only."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 1, 3, 8, generator=g, dtype=torch.float64)
    inv = torch.rand(4, generator=g, dtype=torch.float64)
    pos = torch.tensor([[0, 5, 9]])
    back = bench_rope.rotation_f64(bench_rope.rotation_f64(x, pos, inv), pos, inv, sign=-1.0)
    torch.testing.assert_close(back, x)
    torch.testing.assert_close(bench_rope.rotation_f64(x, torch.zeros_like(pos), inv), x)


def test_a_correct_peer_returning_cos_and_sin_too_is_timed_in_a_decode_row():
    """Newer liger_rotary_pos_emb returns (q, k, cos, sin): q and k are checked and timed, forward and backward."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    def peer(q, k, cos, sin):
        return (*apply_rotary_pos_emb(q, k, cos, sin), cos, sin)

    row = bench_rope.table_row(3, 4, 2, 1, 32, device=torch.device("cpu"), dtype=torch.bfloat16, compile_=False,
                               liger=peer, samples=1, calls=1)
    assert "wrong" not in row, row
    assert row["liger_ms"] > 0 and row["fwd_bwd_liger_ms"] > 0 and row["err_liger"] < 0.05
    assert "| 0." in bench_rope.issue_table([row]).splitlines()[-1]
