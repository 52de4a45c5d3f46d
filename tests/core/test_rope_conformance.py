"""Conformance with transformers' families, discovered from its config mapping (see rope_conformance.py).

The suite runs every family with its own rope type at short positions (about 12 s) and asserts that at least 95%
are reproduced; the whole table (every family, every rope type it supports, positions past the original lengths)
is the ``slow`` test, a few minutes long, so it runs when asked:
``OMNIPOS_SLOW=1 pytest -n 0 -m slow tests/core/test_rope_conformance.py``. Verified with transformers 5.24
(256 of 267 families).
"""

import os

import pytest

pytest.importorskip("transformers")

from core import rope_conformance as conformance  # noqa: E402

# Every family omnipos does not reproduce with transformers 5.24, and why. A family that starts failing (or a new
# one that fails) must be added here with its reason; one that starts passing must be removed.
EXCEPTIONS = {
    "blt": "no head dim at the top level: BLT's sub-configs carry their own (the blt_* rows, reproduced)",
    "dots3_note_audio_encoder": "transformers' own rotary class fails on the default config (needs layer_types)",
    "efficientloftr": "an image-matching 2-D RoPE (its partial_rotary_factor is 4.0): a vision RoPE",
    "eomt_dinov3": "DINOv3's 2-D patch RoPE (its forward takes no position ids): a vision RoPE",
    "ernie4_5_vl_moe": "an M-RoPE variant (sections taken h, w, t over its own slot order)",
    "ernie4_5_vl_moe_text": "an M-RoPE variant (sections taken h, w, t over its own slot order)",
    "hunyuan_vl": "transformers' own rotary class fails on the default config (mrope_section None)",
    "hunyuan_vl_text": "transformers' own rotary class fails on the default config (mrope_section None)",
    "llama4_vision_model": "the vision tower's 2-D RoPE; its class needs fields the default config lacks",
    "musicflamingo": "transformers' own rotary class needs audio_frame_step, absent from the default config",
    "nanochat": "rotates by minus the angle (its rotate_half flips the sign): omnipos at negated positions (tested)",
}


def _check(results):
    unexplained = {r.model_type: r.reason for r in results if r.status == "exception"
                   and r.model_type not in EXCEPTIONS}
    assert not unexplained, f"families not reproduced and not explained: {unexplained}"
    stale = [r.model_type for r in results if r.status == "reproduced" and r.model_type in EXCEPTIONS]
    assert not stale, f"reproduced now: remove from EXCEPTIONS {stale}"


def test_every_family_with_its_own_rope_type_at_short_positions():
    results = conformance.run()
    _check(results)
    counted = [r for r in results if r.status != "not counted"]
    reproduced = [r for r in counted if r.status == "reproduced"]
    assert len(counted) > 200  # a transformers with fewer families: the discovery broke
    assert len(reproduced) >= 0.95 * len(counted), conformance.table(results)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("OMNIPOS_SLOW"), reason="minutes long: run with OMNIPOS_SLOW=1 (see the "
                    "module docstring); the suite runs every family's own type above")
def test_every_family_every_rope_type_past_the_original_length():
    results = conformance.run(all_types=True, long=True)
    _check(results)
    counted = [r for r in results if r.status != "not counted"]
    reproduced = [r for r in counted if r.status == "reproduced"]
    assert len(counted) > 200  # a transformers with fewer families: the discovery broke
    assert len(reproduced) >= 0.95 * len(counted), conformance.table(results)  # 256 / 267 with 5.24
