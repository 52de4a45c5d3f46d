"""ConvTran's tAPE and eRPE attention, restated as plain functions (the reference the ConvTran tests compare with).

Source: Navidfoumani/ConvTran, ``Models/AbsolutePositionalEncoding.py`` (class ``tAPE``: built in float32, ``pe``
``[1, max_len, d_model]``) and ``Models/Attention.py`` (class ``Attention_Rel_Scl``: the relative index from a
meshgrid of coordinates, the bias gathered from ``relative_bias_table [2 * seq_len - 1, num_heads]`` and added after
the softmax; scale ``emb_size ** -0.5``). sktime's port of ConvTran does not install here without changing the
installed pandas, so the tests compare with these.
"""

import math

import torch


def tape_table(d_model, max_len, scale_factor=1.0):
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin((position * div_term) * (d_model / max_len))
    pe[:, 1::2] = torch.cos((position * div_term) * (d_model / max_len))
    return scale_factor * pe.unsqueeze(0)


def relative_index(seq_len):
    """``Attention_Rel_Scl.relative_index``: ``[seq_len * seq_len, 1]``."""
    coords = torch.meshgrid((torch.arange(1), torch.arange(seq_len)), indexing="ij")
    coords = torch.flatten(torch.stack(coords), 1)
    relative_coords = coords[:, :, None] - coords[:, None, :]
    relative_coords[1] += seq_len - 1
    relative_coords = relative_coords.permute(1, 2, 0)  # 'c h w -> h w c'
    return relative_coords.sum(-1).flatten().unsqueeze(1)


def relative_bias(table, seq_len):
    """``[1, H, L, L]``, as ``Attention_Rel_Scl.forward`` gathers it."""
    num_heads = table.shape[1]
    bias = table.gather(0, relative_index(seq_len).repeat(1, num_heads))  # [(L L), H]
    return bias.reshape(seq_len, seq_len, num_heads).permute(2, 0, 1).unsqueeze(0)


def attention_rel_scl(x, query, key, value, table, num_heads, emb_size):
    """``Attention_Rel_Scl.forward`` up to (not including) its output LayerNorm: ``[B, L, emb_size]``."""
    batch_size, seq_len, _ = x.shape
    k = key(x).reshape(batch_size, seq_len, num_heads, -1).permute(0, 2, 3, 1)
    v = value(x).reshape(batch_size, seq_len, num_heads, -1).transpose(1, 2)
    q = query(x).reshape(batch_size, seq_len, num_heads, -1).transpose(1, 2)
    attn = torch.matmul(q, k) * emb_size ** -0.5
    attn = torch.nn.functional.softmax(attn, dim=-1)
    attn = attn + relative_bias(table, seq_len)
    out = torch.matmul(attn, v)
    return out.transpose(1, 2).reshape(batch_size, seq_len, -1)
