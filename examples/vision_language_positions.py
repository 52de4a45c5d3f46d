"""M-RoPE for a vision-language model: position ids for a mixed image + video batch, a tiny attention block,
and two decoding steps from a KV cache, checked against recomputing the whole sequence.

The ids follow Qwen2-VL / Qwen2.5-VL (``omnipos.vision.mrope_position_ids``); the rotation is
``omnipos.core.RotaryEmbedding(..., mrope_section=...)``, whose cos/sin equal transformers' Qwen2-VL rotary class.
"""

import torch
import torch.nn.functional as F

from omnipos.core import RotaryEmbedding
from omnipos.vision import mrope_decode_position_ids, mrope_position_ids

torch.manual_seed(0)
HEADS, HEAD_DIM = 4, 32
WIDTH = HEADS * HEAD_DIM
TEXT, IMAGE, VIDEO = 0, 1, 2

# Row 0: text, an image (grid 1x4x4, 2x2 merge -> 4 tokens), text, a video (grid 2x2x4 -> 4 tokens), text.
# Row 1: left-padded, text and an image.
types = torch.tensor([[TEXT, TEXT, IMAGE, IMAGE, IMAGE, IMAGE, TEXT, VIDEO, VIDEO, VIDEO, VIDEO, TEXT],
                      [TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, IMAGE, IMAGE, IMAGE, IMAGE, TEXT, TEXT]])
mask = torch.tensor([[1] * 12, [0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
image_grid_thw = [[1, 4, 4], [1, 4, 4]]  # one image per row, in order
video_grid_thw = [[2, 2, 4]]
ids, deltas = mrope_position_ids(types, image_grid_thw, video_grid_thw, attention_mask=mask,
                                 second_per_grid_ts=[2.0], tokens_per_second=1)
print("ids (t, h, w) of row 0:", ids[0].tolist())
print("deltas:", deltas.flatten().tolist())

rope = RotaryEmbedding(HEAD_DIM, base=1e6, mrope_section=(4, 6, 6))  # 4 + 6 + 6 = HEAD_DIM / 2 frequency slots
qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)


def attend(x, positions, keys_mask, past=None):
    """One causal attention layer over new tokens ``x [B, n, WIDTH]`` at M-RoPE ``positions [B, n, 3]``, with an
    optional cache of rotated keys and values; returns (output [B, n, WIDTH], updated cache)."""
    b, n, _ = x.shape
    q, k, v = qkv(x).reshape(b, n, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)  # each [B, heads, n, head_dim]
    q, k = rope(q, k, positions)                                                # ids [B, n, 3] against seq axis -2
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    total = k.shape[2]
    causal = torch.ones(n, total, dtype=torch.bool).tril(total - n)          # new token i sees cache + itself
    allowed = causal & keys_mask[:, None, None, :]                            # and no padded key
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return out.transpose(1, 2).reshape(b, n, WIDTH), (k, v)


prompt = torch.randn(2, 12, WIDTH)
with torch.no_grad():
    _, cache = attend(prompt, ids, mask)
    keys_mask = mask
    generated = [torch.randn(2, 1, WIDTH), torch.randn(2, 1, WIDTH)]
    real = mask.sum(-1, keepdim=True)  # real tokens so far: where the next one sits in the text stream
    for step, token in enumerate(generated):
        step_ids = mrope_decode_position_ids(deltas, real + step)            # [2, 1, 3]
        keys_mask = torch.cat([keys_mask, torch.ones(2, 1, dtype=torch.bool)], dim=1)
        out, cache = attend(token, step_ids, keys_mask, cache)

        # The same token computed from scratch: prompt + generated text, ids rebuilt for the longer sequence.
        longer_types = torch.cat([types, torch.full((2, step + 1), TEXT)], dim=1)
        longer_mask = torch.cat([mask, torch.ones(2, step + 1, dtype=torch.bool)], dim=1)
        full_ids, _ = mrope_position_ids(longer_types, image_grid_thw, video_grid_thw, attention_mask=longer_mask,
                                         second_per_grid_ts=[2.0], tokens_per_second=1)
        assert torch.equal(full_ids[:, -1:], step_ids), "decode ids differ from the ids of the full sequence"
        full, _ = attend(torch.cat([prompt, *generated[:step + 1]], dim=1), full_ids, longer_mask)
        difference = (full[:, -1:] - out).abs().max().item()
        print(f"decode step {step}: ids {step_ids.squeeze(1).tolist()}, cached vs full recompute: {difference:.1e}")
        assert difference < 1e-5

# The rule is named (convention=), and a model decodes with the one it was trained with. transformers 4.5x's deltas
# count padded slots, so its cache position does too (the slot index, 12 here): the next ids are the released rule's.
# transformers 5.x starts the text after a block at start + max(H, W) / m, so after this video (whose time ids run to
# start + 2) the prompt's ids, and the next ones, come out smaller.
next_ids = {}
for convention in ("qwen", "transformers-4", "transformers-5"):
    _, conv_deltas = mrope_position_ids(types, image_grid_thw, video_grid_thw, attention_mask=mask,
                                        second_per_grid_ts=[2.0], tokens_per_second=1, convention=convention)
    position = mask.shape[1] if convention == "transformers-4" else mask.sum(-1, keepdim=True)
    next_ids[convention] = mrope_decode_position_ids(conv_deltas, position, convention=convention)[:, 0, 0].tolist()
    print(f"{convention}: the first generated token of each row gets id {next_ids[convention]}")
assert next_ids["qwen"] == next_ids["transformers-4"]
