"""transformers 4.57's M-RoPE position ids, transcribed so the suite can test ``convention="transformers-4"`` without
that release installed.

Source: transformers v4.57.6, ``models/qwen2_5_vl/modeling_qwen2_5_vl.py``, ``Qwen2_5_VLModel.get_rope_index``
(the multimodal branch), kept statement for statement; ``tokens_per_second=None`` is Qwen2-VL's copy of the same
function (``models/qwen2_vl/modeling_qwen2_vl.py``: ``t_index = arange(llm_grid_t)``, no seconds). The model's config
is replaced by arguments. It reads token ids, not token types: a vision block is found by the ``VISION_START`` token
before it, as the processor writes it. Verified against the installed 4.57.6 (tests/vision/test_mrope.py names the
scratch check in its docstring).
"""

from __future__ import annotations

import torch

VISION_START, IMAGE, VIDEO, TEXT = 151652, 151655, 151656, 100


def input_ids_from_types(types: list[list[int]]) -> torch.Tensor:
    """Token ids for token types (0 text, 1 image, 2 video): the text token before each vision block becomes
    ``VISION_START`` (so every block needs text before it, as the processors write it)."""
    rows = []
    for row in types:
        ids = [TEXT if t == 0 else IMAGE if t == 1 else VIDEO for t in row]
        for c in range(1, len(row)):
            if row[c] != 0 and row[c - 1] == 0:
                ids[c - 1] = VISION_START
        rows.append(ids)
    return torch.tensor(rows, dtype=torch.int64)


def get_rope_index_4_57(input_ids, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
                        attention_mask=None, *, spatial_merge_size=2, tokens_per_second=None):
    """``(position_ids [3, B, L], mrope_position_deltas [B, 1])`` exactly as transformers 4.57.6 computes them."""
    image_token_id, video_token_id, vision_start_token_id = IMAGE, VIDEO, VISION_START
    mrope_position_deltas = []
    total_input_ids = input_ids
    if attention_mask is not None:
        attention_mask = attention_mask == 1
    position_ids = torch.ones(3, input_ids.shape[0], input_ids.shape[1], dtype=input_ids.dtype,
                              device=input_ids.device)
    image_index, video_index = 0, 0
    for i, input_ids in enumerate(total_input_ids):
        if attention_mask is not None:
            input_ids = input_ids[attention_mask[i]]
        vision_start_indices = torch.argwhere(input_ids == vision_start_token_id).squeeze(1)
        vision_tokens = input_ids[vision_start_indices + 1]
        image_nums = (vision_tokens == image_token_id).sum()
        video_nums = (vision_tokens == video_token_id).sum()
        input_tokens = input_ids.tolist()
        llm_pos_ids_list: list = []
        st = 0
        remain_images, remain_videos = image_nums, video_nums
        for _ in range(image_nums + video_nums):
            if image_token_id in input_tokens and remain_images > 0:
                ed_image = input_tokens.index(image_token_id, st)
            else:
                ed_image = len(input_tokens) + 1
            if video_token_id in input_tokens and remain_videos > 0:
                ed_video = input_tokens.index(video_token_id, st)
            else:
                ed_video = len(input_tokens) + 1
            if ed_image < ed_video:
                t, h, w = image_grid_thw[image_index][0], image_grid_thw[image_index][1], image_grid_thw[image_index][2]
                second_per_grid_t = 0
                image_index += 1
                remain_images -= 1
                ed = ed_image
            else:
                t, h, w = video_grid_thw[video_index][0], video_grid_thw[video_index][1], video_grid_thw[video_index][2]
                if second_per_grid_ts is not None:
                    second_per_grid_t = second_per_grid_ts[video_index]
                else:
                    second_per_grid_t = 1.0
                video_index += 1
                remain_videos -= 1
                ed = ed_video
            llm_grid_t, llm_grid_h, llm_grid_w = (
                t.item(),
                h.item() // spatial_merge_size,
                w.item() // spatial_merge_size,
            )
            text_len = ed - st

            st_idx = llm_pos_ids_list[-1].max() + 1 if len(llm_pos_ids_list) > 0 else 0
            llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)

            if tokens_per_second is None:  # Qwen2-VL
                t_index = torch.arange(llm_grid_t).view(-1, 1).expand(-1, llm_grid_h * llm_grid_w).flatten()
            else:  # Qwen2.5-VL
                range_tensor = torch.arange(llm_grid_t).view(-1, 1)
                expanded_range = range_tensor.expand(-1, llm_grid_h * llm_grid_w)
                second_per_grid_t = torch.as_tensor(second_per_grid_t, dtype=range_tensor.dtype,
                                                    device=range_tensor.device)
                time_tensor = expanded_range * second_per_grid_t * tokens_per_second
                time_tensor_long = time_tensor.long()
                t_index = time_tensor_long.flatten()

            h_index = torch.arange(llm_grid_h).view(1, -1, 1).expand(llm_grid_t, -1, llm_grid_w).flatten()
            w_index = torch.arange(llm_grid_w).view(1, 1, -1).expand(llm_grid_t, llm_grid_h, -1).flatten()
            llm_pos_ids_list.append(torch.stack([t_index, h_index, w_index]) + text_len + st_idx)
            st = ed + llm_grid_t * llm_grid_h * llm_grid_w

        if st < len(input_tokens):
            st_idx = llm_pos_ids_list[-1].max() + 1 if len(llm_pos_ids_list) > 0 else 0
            text_len = len(input_tokens) - st
            llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)

        llm_positions = torch.cat(llm_pos_ids_list, dim=1).reshape(3, -1)
        if attention_mask is not None:
            position_ids[..., i, attention_mask[i]] = llm_positions.to(position_ids.device)
        else:
            position_ids[..., i, :] = llm_positions.to(position_ids.device)
        mrope_position_deltas.append(llm_positions.max() + 1 - len(total_input_ids[i]))
    mrope_position_deltas = torch.tensor(mrope_position_deltas).unsqueeze(1).to(device=input_ids.device)
    return position_ids, mrope_position_deltas
