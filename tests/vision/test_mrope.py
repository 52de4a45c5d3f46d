"""mrope_position_ids against transformers' own get_rope_index (Qwen2-VL, Qwen2.5-VL models built from tiny random
configs, no weights) on image-only batches, and against an independent pure-Python reference of the released rule
on image + video batches with left / right padding and fractional seconds; packing, decoding and bad input.

The named conventions: ``"transformers-5"`` against the installed transformers (verified with 5.24.0) on random
mixed batches with long videos; ``"transformers-4"`` against tests/support/mrope_transformers4.py, a transcription of
4.57.6's ``get_rope_index`` (checked once bit for bit against the installed 4.57.6 on 568 random batches, Qwen2-VL and
Qwen2.5-VL: omnipos == transcription == 4.57.6; the transcription also agrees with the installed 5.x where their
rules coincide, tested here); Qwen3-VL videos laid out frame by frame against Qwen3-VL's ``get_rope_index`` (5.24.0).
"""

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.mrope_transformers4 import get_rope_index_4_57, input_ids_from_types

from omnipos.vision import mrope_decode_position_ids, mrope_position_ids


def reference(types, image_grids, video_grids, merge, mask=None, seconds=None, tokens_per_second=None, pad=1):
    """The released rule, token by token in plain Python (transformers 4.x get_rope_index, Qwen2.5-VL PR):
    text +1 on all axes; a vision block's ids are start + (floor(t * interval), h, w) over the merged grid; the
    next run starts at the block's largest id + 1; delta = max id + 1 - real tokens."""
    images, videos = iter(image_grids), iter(video_grids)
    video_index = 0
    out, deltas = [], []
    for b, row in enumerate(types):
        cols = [c for c in range(len(row)) if mask is None or mask[b][c]]
        ids, pos, i = [], 0, 0
        while i < len(cols):
            kind = row[cols[i]]
            if kind == 0:
                ids.append((pos, pos, pos))
                pos, i = pos + 1, i + 1
                continue
            if kind == 1:
                t_n, h_n, w_n = next(images)
                interval = 1
            else:
                t_n, h_n, w_n = next(videos)
                interval = 1 if tokens_per_second is None else tokens_per_second * (
                    1.0 if seconds is None else seconds[video_index])
                video_index += 1
            block = [(pos + int(t * interval), pos + h, pos + w)
                     for t in range(t_n) for h in range(h_n // merge) for w in range(w_n // merge)]
            assert all(row[c] == kind for c in cols[i: i + len(block)])
            ids.extend(block)
            pos = max(max(v) for v in block) + 1
            i += len(block)
        full = [[pad] * 3 for _ in row]
        for c, v in zip(cols, ids):
            full[c] = list(v)
        out.append(full)
        deltas.append([(max(max(v) for v in ids) + 1 if ids else 0) - len(ids)])
    length = len(types[0]) if types else 0
    return torch.tensor(out, dtype=torch.int64).reshape(len(types), length, 3), torch.tensor(deltas, dtype=torch.int64)


def random_batch(rng, rows, *, merge=2, videos=True, padding="right", max_blocks=3, short_videos=False,
                 adjacent=False, min_text=1):
    """Rows of text runs and image / video blocks (random grids), padded left or right to one length. Blocks are
    followed by at least one text token (the processors' vision-end token) unless ``adjacent``."""
    types_rows, images, vids = [], [], []
    for _ in range(rows):
        row = [0] * rng.randint(min_text, 3)
        for _ in range(rng.randint(0, max_blocks)):
            kind = rng.choice([1, 2] if videos else [1])
            h, w = merge * rng.randint(1, 3), merge * rng.randint(1, 3)
            t = 1 if kind == 1 else rng.randint(1, 2 if short_videos else 4)
            (images if kind == 1 else vids).append([t, h, w])
            row += [kind] * (t * (h // merge) * (w // merge)) + [0] * rng.randint(0 if adjacent else 1, 3)
        types_rows.append(row)
    length = max(len(r) for r in types_rows) + rng.randint(0, 2)
    types, mask = [], []
    for row in types_rows:
        pad = length - len(row)
        left = pad if padding == "left" else 0 if padding == "right" else rng.randint(0, pad)
        types.append([0] * left + row + [0] * (pad - left))
        mask.append([0] * left + [1] * len(row) + [0] * (pad - left))
    return types, mask, images, vids


def as_grids(grids):
    return torch.tensor(grids, dtype=torch.int64).reshape(-1, 3)


@pytest.fixture(scope="module")
def qwen_models():
    """transformers' Qwen2-VL and Qwen2.5-VL models from tiny random configs (their get_rope_index is the peer)."""
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    text = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, vocab_size=64, bos_token_id=0, eos_token_id=1, pad_token_id=2,
                rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2], "rope_theta": 10000.0})
    vision = dict(depth=1, num_heads=2, spatial_merge_size=2, patch_size=2, temporal_patch_size=1)
    torch.manual_seed(0)
    qwen2 = Qwen2VLModel(Qwen2VLConfig(text_config=text, vision_config=dict(vision, embed_dim=16, hidden_size=16,
                                                                           mlp_ratio=1)))
    qwen25 = Qwen2_5_VLModel(Qwen2_5_VLConfig(text_config=text, vision_config=dict(
        vision, hidden_size=16, out_hidden_size=16, intermediate_size=16, tokens_per_second=2,
        fullatt_block_indexes=[0], window_size=4)))
    return qwen2, qwen25


@pytest.mark.parametrize("padding", ["none", "left", "right"])
@pytest.mark.parametrize("seed", range(3))
def test_image_batches_equal_transformers_get_rope_index(qwen_models, padding, seed):
    rng = random.Random(seed)
    types, mask, images, _ = random_batch(rng, 5, videos=False, padding="right" if padding == "none" else padding)
    if padding == "none":
        mask = [[1] * len(types[0])] * len(types)  # every slot a token (text where the generator padded)
    types_t, mask_t = torch.tensor(types), torch.tensor(mask)
    for model in qwen_models:
        ref_ids, ref_deltas = model.get_rope_index(torch.zeros_like(types_t), mm_token_type_ids=types_t,
                                                   image_grid_thw=as_grids(images) if images else None,
                                                   attention_mask=None if padding == "none" else mask_t)
        ids, deltas = mrope_position_ids(types_t, as_grids(images) if images else None,
                                         attention_mask=None if padding == "none" else mask_t, pad_position=0)
        assert ids.dtype == deltas.dtype == torch.int64
        assert torch.equal(ids, ref_ids.permute(1, 2, 0))  # transformers 5.x fills padding with 0: pad_position=0
        assert torch.equal(deltas, ref_deltas)


def test_short_videos_with_fractional_seconds_equal_qwen2_5_vl(qwen_models):
    # transformers 5.x starts the run after a video at start + max(H, W) / m; with T * interval below that it is
    # the released rule too, so the peer applies (longer videos: the reference test below)
    rng = random.Random(7)
    types, mask, images, videos = random_batch(rng, 4, padding="left", short_videos=True)
    seconds = torch.tensor([rng.choice([0.25, 0.5, 0.75]) for _ in videos], dtype=torch.float64)
    types_t, mask_t = torch.tensor(types), torch.tensor(mask)
    ref_ids, ref_deltas = qwen_models[1].get_rope_index(
        torch.zeros_like(types_t), mm_token_type_ids=types_t, image_grid_thw=as_grids(images),
        video_grid_thw=as_grids(videos), second_per_grid_ts=seconds, attention_mask=mask_t)
    ids, deltas = mrope_position_ids(types_t, as_grids(images), as_grids(videos), attention_mask=mask_t,
                                     second_per_grid_ts=seconds, tokens_per_second=2, pad_position=0)
    assert torch.equal(ids, ref_ids.permute(1, 2, 0)) and torch.equal(deltas, ref_deltas)


@pytest.mark.parametrize("padding", ["left", "right", "anywhere"])
@pytest.mark.parametrize("qwen", ["2", "2.5"])
def test_image_and_video_batches_equal_the_reference(padding, qwen):
    rng = random.Random(hash((padding, qwen)) % 1000)
    types, mask, images, videos = random_batch(rng, 6, padding=padding, max_blocks=4)
    seconds = [rng.choice([0.5, 1.0, 1 / 3, 2 / 3, 1.25]) for _ in videos] if qwen == "2.5" else None
    tps = 2 if qwen == "2.5" else None
    expected, expected_deltas = reference(types, images, videos, 2, mask, seconds, tps, pad=1)
    ids, deltas = mrope_position_ids(torch.tensor(types), as_grids(images), as_grids(videos),
                                     attention_mask=torch.tensor(mask, dtype=torch.bool),
                                     second_per_grid_ts=seconds, tokens_per_second=tps)
    assert torch.equal(ids, expected) and torch.equal(deltas, expected_deltas)


def test_long_video_pushes_the_next_text_past_its_last_frame():
    # a video of 6 steps, 1.5 s each at 2 tokens/s: temporal ids 0, 3, ..., 15 while H/m = W/m = 1;
    # the released rule starts the next text at 16 (transformers 5.x: at 1)
    types = torch.tensor([[0] + [2] * 6 + [0, 0]])
    ids, deltas = mrope_position_ids(types, video_grid_thw=[[6, 2, 2]], second_per_grid_ts=[1.5],
                                     tokens_per_second=2)
    assert ids[0, 1:7, 0].tolist() == [1, 4, 7, 10, 13, 16]
    assert ids[0, 7].tolist() == [17, 17, 17] and ids[0, 8].tolist() == [18, 18, 18]
    assert deltas.tolist() == [[19 - 9]]


def test_interval_is_floored_after_multiplying_by_t():
    # 1/3 s at 2 tokens/s: interval 2/3; t = 0..3 -> floor(0, 0.67, 1.33, 2.0) = 0, 0, 1, 2 (not 0 * t)
    types = torch.tensor([[2] * 4])
    ids, _ = mrope_position_ids(types, video_grid_thw=[[4, 2, 2]], second_per_grid_ts=[1 / 3], tokens_per_second=2)
    assert ids[0, :, 0].tolist() == [0, 0, 1, 2]
    qwen2, _ = mrope_position_ids(types, video_grid_thw=[[4, 2, 2]])  # Qwen2-VL: interval 1
    assert qwen2[0, :, 0].tolist() == [0, 1, 2, 3]


def test_padding_slots_hold_pad_position_and_rows_without_vision():
    types = torch.tensor([[0, 0, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 0, 0]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0], [0, 0, 0, 0, 0]])
    ids, deltas = mrope_position_ids(types, [[1, 2, 2]], attention_mask=mask)
    assert ids[0, :2].tolist() == [[1, 1, 1]] * 2 and ids[1, 4].tolist() == [1, 1, 1]  # padding: 1 (transformers 4.x)
    assert ids[0, 2:, 0].tolist() == [0, 1, 2] and deltas[0].item() == 0  # no vision: plain text positions
    assert ids[2].tolist() == [[1, 1, 1]] * 5 and deltas[2].item() == 0  # a row of nothing but padding
    assert ids[1, :4, 0].tolist() == [0, 1, 2, 3]
    zero, _ = mrope_position_ids(types, [[1, 2, 2]], attention_mask=mask, pad_position=0)
    assert zero[0, :2].tolist() == [[0, 0, 0]] * 2


def test_padding_between_text_tokens_is_skipped_but_inside_an_image_is_refused():
    types = [[0, 0, 0, 1, 1, 0, 0]]
    holes = [[1, 0, 1, 1, 1, 0, 1]]  # a padded slot between two text tokens, another after the image
    expected, expected_deltas = reference(types, [[1, 2, 4]], [], 2, holes)
    ids, deltas = mrope_position_ids(torch.tensor(types), [[1, 2, 4]], attention_mask=torch.tensor(holes))
    assert torch.equal(ids, expected) and torch.equal(deltas, expected_deltas)
    with pytest.raises(ValueError, match="row 0.*split"):  # 4 image tokens, a padded slot in the middle
        mrope_position_ids(torch.tensor([[0, 1, 1, 0, 1, 1, 0]]), [[1, 2, 8]],
                           attention_mask=torch.tensor([[1, 1, 1, 0, 1, 1, 1]]))


def test_consecutive_images_without_text_between_are_split_by_their_grids():
    types = torch.tensor([[0] + [1] * (2 + 4) + [0]])
    ids, _ = mrope_position_ids(types, [[1, 2, 4], [1, 4, 4]])
    expected, _ = reference(types.tolist(), [[1, 2, 4], [1, 4, 4]], [], 2)
    assert torch.equal(ids, expected)
    assert ids[0, 3].tolist() == [3, 3, 3]  # the second image starts after the first's largest id (2) + 1


def test_packed_documents_restart_their_positions():
    # each padded row of a batch, unpadded and packed into one row: the same ids, restarting per document
    types, mask, images, videos = random_batch(random.Random(3), 5, padding="right")
    expected, expected_deltas = reference(types, images, videos, 2, mask, [0.5] * len(videos), 2)
    docs = [[t for t, m in zip(row, mk) if m] for row, mk in zip(types, mask)]
    cu = torch.tensor([0, *torch.tensor([len(d) for d in docs]).cumsum(0).tolist()])
    ids, deltas = mrope_position_ids(torch.tensor([[t for doc in docs for t in doc]]), as_grids(images),
                                     as_grids(videos), cu_seqlens=cu, second_per_grid_ts=[0.5] * len(videos),
                                     tokens_per_second=2)
    assert torch.equal(ids[0], expected[torch.tensor(mask, dtype=torch.bool)])
    assert torch.equal(deltas, expected_deltas)


def test_packed_rows_and_documents_across_rows():
    types = torch.tensor([[0, 1, 1, 0, 0, 0], [0, 0, 1, 1, 0, 0]])
    ids, deltas = mrope_position_ids(types, [[1, 2, 4], [1, 2, 4]], cu_seqlens=[0, 4, 6, 7, 12])
    assert ids[0].tolist() == [[0, 0, 0], [1, 1, 1], [1, 1, 2], [3, 3, 3], [0, 0, 0], [1, 1, 1]]
    assert ids[1].tolist() == [[0, 0, 0], [0, 0, 0], [1, 1, 1], [1, 1, 2], [3, 3, 3], [4, 4, 4]]
    assert deltas.flatten().tolist() == [0, 0, 0, 0]  # a 1 x 2 merged image advances by 2: as many as its tokens
    with pytest.raises(ValueError, match="row 0 into row 1"):
        mrope_position_ids(types, [[1, 2, 4], [1, 2, 4]], cu_seqlens=[0, 4, 9, 12])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), padding=st.sampled_from(["left", "right", "anywhere"]),
       merge=st.sampled_from([1, 2]), qwen25=st.booleans())
def test_property_equals_the_reference(seed, padding, merge, qwen25):
    rng = random.Random(seed)
    types, mask, images, videos = random_batch(rng, rng.randint(1, 4), merge=merge, padding=padding,
                                               adjacent=rng.random() < 0.5, min_text=0)
    seconds = [rng.choice([0.0, 0.3, 0.5, 1.0, 2.5]) for _ in videos] if qwen25 else None
    tps = rng.choice([1, 2, 4]) if qwen25 else None
    expected, expected_deltas = reference(types, images, videos, merge, mask, seconds, tps)
    ids, deltas = mrope_position_ids(torch.tensor(types, dtype=torch.int64), as_grids(images), as_grids(videos),
                                     spatial_merge_size=merge, attention_mask=torch.tensor(mask, dtype=torch.int64),
                                     second_per_grid_ts=seconds, tokens_per_second=tps)
    assert torch.equal(ids, expected) and torch.equal(deltas, expected_deltas)


def test_decode_continues_after_the_prompt():
    types = torch.tensor([[0, 1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 0]])  # row 1 is right-padded below
    mask = torch.tensor([[1] * 7, [0, 1, 1, 1, 1, 1, 1]])
    ids, deltas = mrope_position_ids(types, [[1, 4, 4], [1, 2, 4]], attention_mask=mask)
    last = ids[torch.arange(2), -1, 0]
    nxt = mrope_decode_position_ids(deltas, mask.sum(-1, keepdim=True))
    assert nxt.shape == (2, 1, 3) and torch.equal(nxt[:, 0, 0], last + 1)  # the next text id on all three axes
    assert torch.equal(nxt[..., 0], nxt[..., 1]) and torch.equal(nxt[..., 1], nxt[..., 2])
    two = mrope_decode_position_ids(deltas[:1], torch.tensor([7, 8]))  # transformers' shared cache_position [n]
    assert two[0, :, 0].tolist() == [int(last[0]) + 1, int(last[0]) + 2]
    assert mrope_decode_position_ids(deltas[:1], 7).tolist() == [[[int(last[0]) + 1] * 3]]


# -- named conventions: transformers 5.x, transformers 4.5x, Qwen3-VL videos frame by frame ----------------------


def _random_seconds(rng, videos):
    return torch.tensor([rng.choice([0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 1 / 3]) for _ in videos], dtype=torch.float64)


@pytest.mark.parametrize("seed", range(4))
def test_transformers_5_convention_equals_installed_get_rope_index(qwen_models, seed):
    # long videos (T up to 4, up to 2.5 s per step at 2 tokens/s) where 5.x and the released rule part ways
    rng = random.Random(100 + seed)
    types, mask, images, videos = random_batch(rng, 5, padding=rng.choice(["left", "right", "anywhere"]),
                                               max_blocks=4)
    seconds = _random_seconds(rng, videos)
    types_t, mask_t = torch.tensor(types), torch.tensor(mask)
    grids = dict(image_grid_thw=as_grids(images) if images else None,
                 video_grid_thw=as_grids(videos) if videos else None)
    for model, tps in zip(qwen_models, (None, 2)):
        extra = dict(second_per_grid_ts=seconds) if tps else {}
        ref_ids, ref_deltas = model.get_rope_index(torch.zeros_like(types_t), mm_token_type_ids=types_t,
                                                   attention_mask=mask_t, **grids, **extra)
        ids, deltas = mrope_position_ids(types_t, **grids, attention_mask=mask_t, tokens_per_second=tps,
                                         convention="transformers-5", **extra)
        assert torch.equal(ids, ref_ids.permute(1, 2, 0)) and torch.equal(deltas, ref_deltas)


def test_the_conventions_differ_where_the_issue_says():
    # a video of 6 steps, 1.5 s each at 2 tokens/s, merged 1 x 1: temporal ids 0, 3, ..., 15
    types = torch.tensor([[0] + [2] * 6 + [0, 0]])
    args = dict(video_grid_thw=[[6, 2, 2]], second_per_grid_ts=[1.5], tokens_per_second=2)
    qwen, _ = mrope_position_ids(types, **args)
    five, five_deltas = mrope_position_ids(types, **args, convention="transformers-5")
    four, _ = mrope_position_ids(types, **args, convention="transformers-4")
    assert qwen[0, 7:, 0].tolist() == [17, 18]
    assert five[0, 7:, 0].tolist() == [2, 3] and five_deltas.tolist() == [[16 + 1 - 9]]  # max id 16 is the video's
    # 4.5x: 1.5 s -> 1 s, interval 2 tokens per step
    assert four[0, 1:7, 0].tolist() == [1, 3, 5, 7, 9, 11] and four[0, 7:, 0].tolist() == [12, 13]


@pytest.mark.parametrize("qwen", ["2", "2.5"])
@pytest.mark.parametrize("seed", range(4))
def test_transformers_4_convention_equals_the_4_57_transcription(qwen, seed):
    rng = random.Random(200 + seed)
    types, mask, images, videos = random_batch(rng, 5, padding=rng.choice(["left", "right", "anywhere"]),
                                               max_blocks=4)
    tps = 2 if qwen == "2.5" else None
    extra = dict(second_per_grid_ts=_random_seconds(rng, videos)) if tps else {}
    grids = (as_grids(images) if images else None, as_grids(videos) if videos else None)
    mask_t = torch.tensor(mask)
    ref_ids, ref_deltas = get_rope_index_4_57(input_ids_from_types(types), *grids, attention_mask=mask_t,
                                              tokens_per_second=tps, **extra)
    ids, deltas = mrope_position_ids(torch.tensor(types), *grids, attention_mask=mask_t, tokens_per_second=tps,
                                     convention="transformers-4", **extra)
    assert torch.equal(ids, ref_ids.permute(1, 2, 0)) and torch.equal(deltas, ref_deltas)


def test_the_4_57_transcription_agrees_with_installed_transformers_where_the_rules_coincide(qwen_models):
    # images only, no padding: 5.x's start + max(H, W)/m is the block's largest id + 1 and both subtract L
    rng = random.Random(11)
    types, _, images, _ = random_batch(rng, 4, videos=False, padding="right")
    types_t = torch.tensor(types)
    for model, tps in zip(qwen_models, (None, 2)):
        ref = model.get_rope_index(torch.zeros_like(types_t), mm_token_type_ids=types_t,
                                   image_grid_thw=as_grids(images))
        old = get_rope_index_4_57(input_ids_from_types(types), as_grids(images), tokens_per_second=tps)
        assert torch.equal(ref[0], old[0]) and torch.equal(ref[1], old[1])


def test_transformers_4_decoding_counts_padded_slots():
    # a left-padded prompt: 4.5x's deltas subtract the padded length and its cache_position counts padding
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0, 1, 1, 0]])
    mask = torch.tensor([[1] * 9, [0, 0, 0, 1, 1, 1, 1, 1, 1]])
    grids = as_grids([[1, 4, 4], [1, 2, 4]])
    ids, deltas = mrope_position_ids(types, grids, attention_mask=mask, convention="transformers-4")
    step = mrope_decode_position_ids(deltas, 9, convention="transformers-4")  # slot 9 in both rows
    longer = torch.cat([types, torch.zeros(2, 1, dtype=torch.int64)], 1)
    longer_mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.int64)], 1)
    full, _ = get_rope_index_4_57(input_ids_from_types(longer.tolist()), grids, attention_mask=longer_mask)
    assert torch.equal(step[:, 0], full[:, :, -1].T)
    ours, ours_deltas = mrope_position_ids(types, grids, attention_mask=mask)  # same ids, deltas over real tokens
    assert torch.equal(ours, ids)
    assert torch.equal(mrope_decode_position_ids(ours_deltas, mask.sum(-1, keepdim=True)), step)


@pytest.fixture(scope="module")
def qwen3_model():
    """transformers' Qwen3-VL model from a tiny random config (its get_rope_index is the peer)."""
    from transformers import Qwen3VLConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    text = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, vocab_size=64, head_dim=8,
                rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2], "mrope_interleaved": True,
                                 "rope_theta": 10000.0})
    vision = dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=16, out_hidden_size=16,
                  spatial_merge_size=2, patch_size=2, temporal_patch_size=1, deepstack_visual_indexes=[],
                  num_position_embeddings=16)
    torch.manual_seed(0)
    return Qwen3VLModel(Qwen3VLConfig(text_config=text, vision_config=vision))


def qwen3_batch(rng, rows):
    """Rows as Qwen3-VL's processor lays them out: images, and videos written frame by frame, each frame preceded by
    timestamp text ("<0.5 seconds>" tokens) and its vision-start token, left-padded to one length."""
    seqs, images, videos = [], [], []
    for _ in range(rows):
        row = [0] * rng.randint(1, 3)
        for _ in range(rng.randint(1, 3)):
            h, w = 2 * rng.randint(1, 3), 2 * rng.randint(1, 3)
            if rng.random() < 0.5:
                images.append([1, h, w])
                row += [1] * (h * w // 4) + [0] * rng.randint(1, 2)
            else:
                t = rng.randint(1, 4)
                videos.append([t, h, w])
                for _ in range(t):
                    row += [0] * rng.randint(2, 4) + [2] * (h * w // 4)  # timestamp text, then the frame
                row += [0] * rng.randint(1, 2)
        seqs.append(row)
    length = max(len(r) for r in seqs)
    types = torch.tensor([[0] * (length - len(r)) + r for r in seqs])
    mask = torch.tensor([[0] * (length - len(r)) + [1] * len(r) for r in seqs])
    return types, mask, as_grids(images), as_grids(videos)


@pytest.mark.parametrize("seed", range(3))
def test_qwen3_vl_videos_as_the_processor_lays_them_out_equal_its_get_rope_index(qwen3_model, seed):
    types, mask, images, videos = qwen3_batch(random.Random(300 + seed), 4)
    ref_ids, ref_deltas = qwen3_model.get_rope_index(torch.zeros_like(types), mm_token_type_ids=types,
                                                     image_grid_thw=images if len(images) else None,
                                                     video_grid_thw=videos.clone() if len(videos) else None,
                                                     attention_mask=mask)
    for convention in ("qwen", "transformers-5"):  # frames have T = 1: the two agree
        ids, deltas = mrope_position_ids(types, images, videos, attention_mask=mask, video_layout="frames",
                                         convention=convention, pad_position=0)
        assert torch.equal(ids, ref_ids.permute(1, 2, 0)) and torch.equal(deltas, ref_deltas)


def test_qwen3_vl_issue_example_and_the_grid_layout_still_refuses_it():
    types = torch.tensor([[0, 0] + [2] * 6 + [0, 0] + [2] * 6 + [0, 0] + [2] * 6 + [0]])
    ids, _ = mrope_position_ids(types, video_grid_thw=[[3, 4, 6]], video_layout="frames")
    assert ids[0, 2:8].tolist() == [[2, 2, 2], [2, 2, 3], [2, 2, 4], [2, 3, 2], [2, 3, 3], [2, 3, 4]]
    assert ids[0, 8:10, 0].tolist() == [5, 6] and ids[0, -1, 0].item() == 15
    with pytest.raises(ValueError, match="end inside video 0"):
        mrope_position_ids(types, video_grid_thw=[[3, 4, 6]])


def test_bad_convention_and_video_layout():
    types = torch.tensor([[0, 2, 2, 0]])
    with pytest.raises(ValueError, match="convention must be one of 'qwen', 'transformers-4', 'transformers-5'"):
        mrope_position_ids(types, video_grid_thw=[[1, 2, 4]], convention="transformers")
    with pytest.raises(ValueError, match="video_layout must be one of 'grid', 'frames'"):
        mrope_position_ids(types, video_grid_thw=[[1, 2, 4]], video_layout="frame")
    with pytest.raises(ValueError, match="video_layout='frames'.*second_per_grid_ts"):
        mrope_position_ids(types, video_grid_thw=[[1, 2, 4]], video_layout="frames", tokens_per_second=2)
    with pytest.raises(ValueError, match="convention must be one of"):
        mrope_decode_position_ids(torch.zeros(1, 1, dtype=torch.int64), 3, convention="hf")


# -- bad input: one test each, the argument (and the row / index) named --------------------------------------------


def test_grid_not_divisible_by_merge_size():
    with pytest.raises(ValueError, match=r"image_grid_thw\[1\].*spatial_merge_size=2"):
        mrope_position_ids(torch.tensor([[1] * 4]), [[1, 2, 2], [1, 3, 4]])
    with pytest.raises(ValueError, match=r"video_grid_thw\[0\]"):
        mrope_position_ids(torch.tensor([[2] * 4]), video_grid_thw=[[1, 4, 5]])


def test_more_vision_tokens_than_grids():
    types = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1]])
    with pytest.raises(ValueError, match="row 1 has more image tokens than image_grid_thw"):
        mrope_position_ids(types, [[1, 2, 4]], spatial_merge_size=2)


def test_fewer_vision_tokens_than_grids():
    types = torch.tensor([[0, 1, 0, 0], [0, 1, 1, 0]])
    with pytest.raises(ValueError, match=r"row 0: its image tokens end inside image 0.*fewer"):
        mrope_position_ids(types, [[1, 2, 4], [1, 2, 2]])
    with pytest.raises(ValueError, match=r"images 1\.\. have none.*row 0"):
        mrope_position_ids(torch.tensor([[0, 1, 1, 0]]), [[1, 2, 4], [1, 2, 2]])
    with pytest.raises(ValueError, match="video_grid_thw has 1 videos"):
        mrope_position_ids(torch.tensor([[0, 0]]), video_grid_thw=[[1, 2, 2]])


def test_token_types_other_than_0_1_2():
    with pytest.raises(ValueError, match="row 1, position 2 holds 3"):
        mrope_position_ids(torch.tensor([[0, 0, 0], [0, 0, 3]]))
    with pytest.raises(ValueError, match="row 0, position 0 holds -1"):
        mrope_position_ids(torch.tensor([[-1]]))
    with pytest.raises(TypeError, match="mm_token_type_ids"):
        mrope_position_ids(torch.tensor([[0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"\[B, L\]"):
        mrope_position_ids(torch.tensor([0, 1]))


def test_second_per_grid_ts_of_the_wrong_length():
    types = torch.tensor([[2, 2, 0, 2, 2]])
    grids = [[1, 2, 4], [1, 2, 4]]
    with pytest.raises(ValueError, match="second_per_grid_ts.*2 videos"):
        mrope_position_ids(types, video_grid_thw=grids, second_per_grid_ts=[0.5], tokens_per_second=2)
    with pytest.raises(ValueError, match=r"second_per_grid_ts\[1\]"):
        mrope_position_ids(types, video_grid_thw=grids, second_per_grid_ts=[0.5, float("nan")], tokens_per_second=2)
    with pytest.raises(ValueError, match="tokens_per_second"):
        mrope_position_ids(types, video_grid_thw=grids, second_per_grid_ts=[0.5, 0.5])


def test_vision_block_split_by_text():
    with pytest.raises(ValueError, match="row 0.*split"):
        mrope_position_ids(torch.tensor([[1, 1, 0, 1, 1]]), [[1, 4, 4]])


def test_bad_masks_and_cu_seqlens():
    types = torch.tensor([[0, 0, 0]])
    with pytest.raises(ValueError, match="attention_mask.*position 1 holds 2"):
        mrope_position_ids(types, attention_mask=torch.tensor([[1, 2, 1]]))
    with pytest.raises(ValueError, match="attention_mask must have the shape"):
        mrope_position_ids(types, attention_mask=torch.tensor([[1, 1]]))
    with pytest.raises(ValueError, match="cu_seqlens must start at 0 and end"):
        mrope_position_ids(types, cu_seqlens=[0, 2])
    with pytest.raises(ValueError, match="non-decreasing"):
        mrope_position_ids(types, cu_seqlens=[0, 2, 1, 3])
    with pytest.raises(ValueError, match="cache_position must be"):
        mrope_decode_position_ids(torch.zeros(2, 1, dtype=torch.int64), torch.zeros(3, 2, dtype=torch.int64))


def test_grids_beyond_int64_are_refused():
    with pytest.raises(ValueError, match="image_grid_thw asks for .* more than int64 can count"):
        mrope_position_ids(torch.tensor([[0, 1, 1]]), [[2**40, 2**20, 2**20]])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), limit=st.sampled_from([None, 0, 6, 12]), pad=st.sampled_from([1, 0, -3, 40]),
       padding=st.sampled_from(["left", "right", "anywhere"]), packed_by=st.sampled_from(["numpy", "torch"]))
def test_packed_and_column_sums_give_the_reference_ids(seed, limit, pad, padding, packed_by):
    """The three axes are summed packed into one int64 when every id (padding's included) is below 2**21, else
    column by column; a lowered limit sends batches with larger ids (or a negative pad_position) down the column
    path. The packed sum runs by NumPy on the CPU and by torch elsewhere (forced here). All equal the
    token-by-token reference."""
    import omnipos.vision.mrope as mrope

    rng = random.Random(seed)
    types, mask, images, videos = random_batch(rng, 4, padding=padding, max_blocks=4)
    expected, expected_deltas = reference(types, images, videos, 2, mask, pad=pad)
    with pytest.MonkeyPatch.context() as patch:
        if limit is not None:
            patch.setattr(mrope, "_PACKED_LIMIT", limit)
        if packed_by == "torch":
            patch.setattr(mrope, "_packed_cumsum_numpy", mrope._packed_cumsum_torch)
        ids, deltas = mrope_position_ids(torch.tensor(types), as_grids(images), as_grids(videos),
                                         attention_mask=torch.tensor(mask), pad_position=pad)
    assert torch.equal(ids, expected) and torch.equal(deltas, expected_deltas)
    assert ids.is_contiguous()
