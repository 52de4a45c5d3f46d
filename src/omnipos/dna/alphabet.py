"""The DNA alphabet: the token table, IUPAC complements, ``encode`` / ``decode`` / ``one_hot``.

Token table (``TOKENS``), one id per IUPAC letter::

    A 0  C 1  G 2  T 3  N 4  R 5  Y 6  S 7  W 8  K 9  M 10  B 11  D 12  H 13  V 14   pad 15

Tokens are ``torch.uint8`` unless the caller asks for another integer dtype (``token_dtype=torch.int64``, say, for
an ``nn.Embedding``, which takes int32/int64): one byte per base, so a 1 GiB chromosome costs 1 GiB of tokens,
not 8. Every function here takes tokens of any integer dtype.

Named policies decide what is kept, and nothing is dropped unless asked for by name:

- ``ambiguity="keep"`` (default) gives R, Y, S, W, K, M, B, D, H, V their own tokens; ``"to_n"`` maps them to N.
- ``lowercase="soft_mask"`` (default) keeps soft-masked (lowercase) bases as a channel: a lowercase letter is its
  uppercase token plus ``SOFT_MASK`` (16), so the vocabulary is 32 ids; :func:`soft_mask` reads the channel back.
  ``lowercase="fold"`` folds to uppercase (vocabulary 16).
- ``rna="error"`` (default) refuses U (RNA) like any other letter outside the DNA alphabet, saying so;
  ``rna="to_t"`` reads U as T (u as t). :func:`omnipos.dna.read_fastx` also has ``rna="keep"`` (U read as T with a
  per-read flag, so :func:`decode` gives the U back).
- Any other character (gaps, digits, spaces...) is a ``ValueError`` naming the sequence and position: Enformer
  silently zeroes unknown letters and enformer-pytorch silently turns them into 'A'.

``one_hot`` is ``[..., 4]`` over A, C, G, T; ambiguity codes (N included) become fractional rows
(``ambiguity="fractional"``: R = 0.5 A + 0.5 G, N = 0.25 each) or zero rows (``ambiguity="zeros"``, Enformer's
choice for N). Pads are zero rows.

The encoding runs over the joined bytes of all sequences with one 256-entry lookup table (no per-character Python).
Under ``torch.compile`` the functions on token tensors trace without graph breaks: the checks of token values
(a host sync) run in eager mode only, and on the meta device (no values) only shapes and dtypes are checked.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..core import (
    can_inspect_values,
    check_choice,
    check_float_dtype,
    check_integer_tensor,
    check_positive_int,
    lengths_to_mask,
    take_rows,
)
from . import dna_triton
from .limits import check_batch_bytes, check_token_dtype

__all__ = [
    "TOKENS",
    "PAD",
    "SOFT_MASK",
    "BASES",
    "AMBIGUITY_POLICIES",
    "LOWERCASE_POLICIES",
    "RNA_POLICIES",
    "ONE_HOT_POLICIES",
    "IUPAC_COMPLEMENT",
    "vocab_size",
    "encode",
    "encode_joined",
    "letter_codes",
    "pad_codes",
    "pad_rows",
    "decode",
    "one_hot",
    "soft_mask",
    "complement_tokens",
    "check_tokens",
    "check_bool_mask",
    "InvalidLetterError",
]

TOKENS = "ACGTNRYSWKMBDHV"
PAD = 15
SOFT_MASK = 16
BASES = "ACGT"
AMBIGUITY_POLICIES = ("keep", "to_n")
LOWERCASE_POLICIES = ("soft_mask", "fold")
RNA_POLICIES = ("error", "to_t")  # read_fastx adds "keep"
ONE_HOT_POLICIES = ("zeros", "fractional")

# IUPAC nucleotide codes: the set of bases each letter stands for, and its complement (pyfaidx's table).
IUPAC_BASES = {
    "A": "A", "C": "C", "G": "G", "T": "T", "N": "ACGT",
    "R": "AG", "Y": "CT", "S": "CG", "W": "AT", "K": "GT", "M": "AC",
    "B": "CGT", "D": "AGT", "H": "ACT", "V": "ACG",
}
IUPAC_COMPLEMENT = {
    "A": "T", "C": "G", "G": "C", "T": "A", "N": "N",
    "R": "Y", "Y": "R", "S": "S", "W": "W", "K": "M", "M": "K",
    "B": "V", "D": "H", "H": "D", "V": "B",
}
_INVALID = 255


def _build_tables() -> dict[tuple[str, str, bool], np.ndarray]:
    tables = {}
    for ambiguity in AMBIGUITY_POLICIES:
        for lowercase in LOWERCASE_POLICIES:
            for u_as_t in (False, True):
                lut = np.full(256, _INVALID, dtype=np.uint8)
                letters = [(token, letter) for token, letter in enumerate(TOKENS)]
                if u_as_t:
                    letters.append((TOKENS.index("T"), "U"))
                for token, letter in letters:
                    value = token if ambiguity == "keep" or letter in "ACGTNU" else TOKENS.index("N")
                    lut[ord(letter)] = value
                    lut[ord(letter.lower())] = value + (SOFT_MASK if lowercase == "soft_mask" else 0)
                tables[ambiguity, lowercase, u_as_t] = lut
    return tables


_ENCODE_TABLES = _build_tables()


def encode_table(ambiguity: str, lowercase: str, u_as_t: bool) -> np.ndarray:
    """The 256-entry letter -> token id table (255: invalid) that :func:`letter_codes` uses (read-only; the same
    object on every call)."""
    return _ENCODE_TABLES[ambiguity, lowercase, bool(u_as_t)]
# Token id -> letter (upper, then lower: the soft-mask half); the pad ids decode to '?', which decode refuses.
_DECODE_TABLE = np.frombuffer((TOKENS + "?" + TOKENS.lower() + "?").encode("ascii"), dtype=np.uint8)
_DECODE_RNA_TABLE = np.frombuffer((TOKENS.replace("T", "U") + "?" + TOKENS.lower().replace("t", "u") + "?")
                                  .encode("ascii"), dtype=np.uint8)
# Token id -> token id of the complement letter, soft-mask bit kept, each pad id kept as it is (an involution).
_COMPLEMENT_TABLE = torch.tensor(
    [TOKENS.index(IUPAC_COMPLEMENT[c]) for c in TOKENS] + [PAD]
    + [TOKENS.index(IUPAC_COMPLEMENT[c]) + SOFT_MASK for c in TOKENS] + [PAD + SOFT_MASK],
    dtype=torch.uint8,
)


def vocab_size(lowercase: str = "soft_mask") -> int:
    """Number of token ids ``encode`` can emit (pad included): 32 with the soft-mask channel, 16 folded."""
    check_choice(lowercase, "lowercase", LOWERCASE_POLICIES)
    return 2 * SOFT_MASK if lowercase == "soft_mask" else SOFT_MASK


class InvalidLetterError(ValueError):
    """A character outside the IUPAC alphabet; ``index``/``position`` locate it for the caller's message."""

    def __init__(self, index: int, position: int, char: str) -> None:
        self.index, self.position, self.char = index, position, char
        shown = repr(char) if " " <= char <= "~" else f"{char!r} (U+{ord(char):04X})"
        self.detail = f"{shown} at position {position}; expected IUPAC nucleotide letters {TOKENS} (either case)"
        if char in "Uu":
            self.detail += "; U is RNA: pass rna='to_t' to read it as T"
        super().__init__(f"seqs[{index}] has {self.detail}")


def _as_byte_sequences(seqs: Any) -> list[bytes]:
    if isinstance(seqs, (str, bytes, bytearray, memoryview)):
        seqs = [seqs]
    if not isinstance(seqs, Sequence) or isinstance(seqs, torch.Tensor):
        raise TypeError(f"seqs must be a str, bytes or a list of them, got {type(seqs).__name__}")
    if len(seqs) == 0:
        raise ValueError("seqs is empty: nothing to encode")
    out = []
    for i, s in enumerate(seqs):
        if isinstance(s, str):
            try:
                out.append(s.encode("ascii"))
            except UnicodeEncodeError as exc:
                raise InvalidLetterError(i, exc.start, s[exc.start]) from None
        elif isinstance(s, (bytes, bytearray, memoryview)):
            out.append(bytes(s))
        else:
            raise TypeError(f"seqs[{i}] must be str or bytes, got {type(s).__name__}")
    return out


def letter_codes(data: np.ndarray, lengths: np.ndarray, *, ambiguity: str = "keep", lowercase: str = "soft_mask",
                 rna: str = "error") -> np.ndarray:
    """Token ids (uint8) of letters joined into one byte array ``data [sum L]`` (one lookup table, no Python per
    character); ``lengths [B]`` only locate an invalid letter. Raises :class:`InvalidLetterError` (a ValueError)
    naming the first one."""
    check_choice(ambiguity, "ambiguity", AMBIGUITY_POLICIES)
    check_choice(lowercase, "lowercase", LOWERCASE_POLICIES)
    check_choice(rna, "rna", RNA_POLICIES)
    codes = np.take(_ENCODE_TABLES[ambiguity, lowercase, rna == "to_t"], data)  # ~10x faster than lut[data]
    if codes.size and codes.max() == _INVALID:
        flat = int(np.flatnonzero(codes == _INVALID)[0])
        ends = np.cumsum(lengths)
        index = int(np.searchsorted(ends, flat, side="right"))
        raise InvalidLetterError(index, flat - int(ends[index] - lengths[index]), chr(data[flat]))
    return codes


#: Widest batch whose padding masks :func:`length_mask` takes from a cached table ((width + 1) x width bytes).
_MASK_TABLE_WIDTH = 1024


@functools.lru_cache(maxsize=8)
def _mask_table(width: int) -> np.ndarray:
    """Row ``n`` is the mask of a row of length ``n``: ``[width + 1, width]`` bool (read-only use)."""
    table = np.arange(width) < np.arange(width + 1)[:, None]
    table.setflags(write=False)
    return table


def length_mask(lengths: np.ndarray, width: int) -> np.ndarray:
    """``[B, width]`` NumPy bool padding mask, True at the first ``lengths[b]`` slots of row ``b`` (lengths are
    the caller's to check: ``0 <= L <= width``). For batches up to :data:`_MASK_TABLE_WIDTH` wide, one gather of
    whole rows from a cached table (~9x faster than the broadcast comparison on 1,024 reads of 150 bp); a fresh
    array either way."""
    if lengths.size and int(lengths.min()) == width:  # every row full (reads of one length): a fill
        return np.ones((lengths.size, width), dtype=bool)
    if width <= _MASK_TABLE_WIDTH:
        return np.take(_mask_table(width), lengths, axis=0)
    return np.arange(width) < lengths[:, None]


def pad_rows(flat: np.ndarray, mask: np.ndarray, fill: int, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """Joined rows ``flat [sum L]`` laid out by ``mask [B, W]`` (NumPy bool, True at the first ``L_b`` slots of
    row b) -> ``[B, W]`` of ``dtype``, ``fill`` past each row.

    NumPy's boolean-mask assignment writes the rows in one pass with no index array: a padded position costs the
    output's own bytes only (``core.pad_packed``'s ``mask.nonzero()`` costs 8 bytes per padded position, which
    one long read among short ones turns into gigabytes), and it is ~25x faster than a scatter of computed
    destinations on 50-150 bp reads."""
    values = np.ascontiguousarray(flat)
    if mask.size == values.size:  # every row full: a reshape
        return torch.from_numpy(values).to(dtype).reshape(mask.shape)
    out = torch.full(mask.shape, fill, dtype=dtype)
    out.numpy()[mask] = values
    return out


def pad_codes(codes: np.ndarray, lengths: np.ndarray, *, max_len: int | None = None,
              device: torch.device | str | None = None,
              token_dtype: torch.dtype = torch.uint8) -> tuple[torch.Tensor, torch.Tensor]:
    """Joined token ids ``[sum L]`` and ``lengths [B]`` -> ``(tokens [B, L] token_dtype, mask [B, L])``, pads
    ``PAD``; a batch over :data:`omnipos.dna.limits.MAX_BATCH_BYTES` (tokens and mask) is refused before it is
    allocated."""
    check_token_dtype(token_dtype)
    lengths = np.asarray(lengths, dtype=np.int64)
    longest = int(lengths.max()) if lengths.size else 0
    width = longest if max_len is None else max(longest, int(max_len))
    check_batch_bytes(lengths.size, width, token_dtype.itemsize + 1,
                      f"max_len={max_len}" if max_len is not None and max_len > longest
                      else f"the longest sequence ({longest:,} letters)")
    mask = lengths_to_mask(torch.from_numpy(lengths), max_len)  # refuses a max_len shorter than a sequence
    tokens = pad_rows(codes, mask.numpy(), PAD, token_dtype)
    if device is not None:
        tokens, mask = tokens.to(device), mask.to(device)
    return tokens, mask


def encode_joined(
    joined: bytes | np.ndarray, lengths: np.ndarray, *, ambiguity: str = "keep", lowercase: str = "soft_mask",
    rna: str = "error", max_len: int | None = None, device: torch.device | str | None = None,
    token_dtype: torch.dtype = torch.uint8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fast core of :func:`encode`: sequences already joined into one byte buffer, their ``lengths [B]``.

    Raises :class:`InvalidLetterError` (a ValueError) locating the first invalid character.
    """
    check_token_dtype(token_dtype)
    data = np.frombuffer(joined, dtype=np.uint8) if not isinstance(joined, np.ndarray) else joined
    lengths = np.asarray(lengths, dtype=np.int64)
    codes = letter_codes(data, lengths, ambiguity=ambiguity, lowercase=lowercase, rna=rna)
    return pad_codes(codes, lengths, max_len=max_len, device=device, token_dtype=token_dtype)


def encode(
    seqs: str | bytes | Sequence[str | bytes],
    *,
    ambiguity: str = "keep",
    lowercase: str = "soft_mask",
    rna: str = "error",
    max_len: int | None = None,
    device: torch.device | str | None = None,
    token_dtype: torch.dtype = torch.uint8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode DNA sequences as a padded batch of token ids.

    Args:
        seqs: one sequence (str or bytes; a batch of one) or a list of them; lengths may differ, empty is fine.
        ambiguity: ``"keep"`` (IUPAC ambiguity codes get their own tokens) or ``"to_n"`` (they become N).
        lowercase: ``"soft_mask"`` (lowercase = uppercase token + ``SOFT_MASK``) or ``"fold"`` (to uppercase).
        rna: ``"error"`` (U is refused, the message says it is RNA) or ``"to_t"`` (U is read as T, u as t).
        max_len: pad to this length instead of the longest sequence.
        device: where to put the result (CPU by default).
        token_dtype: integer dtype of the tokens: ``torch.uint8`` (default, one byte per base), ``int16``,
            ``int32`` or ``int64`` (what ``nn.Embedding`` takes).

    Returns:
        ``(tokens [B, L] token_dtype, mask [B, L] bool)``; pads hold ``PAD`` (15) and mask False; L = longest
        length (or ``max_len``).

    Raises:
        ValueError: a character outside the IUPAC alphabet (the message names the sequence index and position),
            an empty list, unknown policies, ``max_len`` shorter than a sequence, a padded batch larger than
            :data:`omnipos.dna.limits.MAX_BATCH_BYTES`.
        TypeError: anything but str / bytes / a list of them; a non-integer ``token_dtype``.
    """
    data = _as_byte_sequences(seqs)
    lengths = np.fromiter(map(len, data), dtype=np.int64, count=len(data))
    if max_len is not None:
        max_len = check_positive_int(max_len, "max_len", minimum=0)
    return encode_joined(b"".join(data), lengths, ambiguity=ambiguity, lowercase=lowercase, rna=rna,
                         max_len=max_len, device=device, token_dtype=token_dtype)


def check_tokens(tokens: Any, name: str = "tokens") -> torch.Tensor:
    """Refuse anything but an integer tensor of token ids (TypeError naming ``name``); return it unchanged.

    The range check (ids in 0..31) runs in eager mode on real devices; it is skipped under ``torch.compile``
    (a host sync) and on the meta device (no values).
    """
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be an integer tensor of token ids, got {type(tokens).__name__}")
    check_integer_tensor(tokens, name, "an integer tensor of token ids")
    if tokens.numel() and not not can_inspect_values(tokens):
        low, high = (int(v) for v in torch.aminmax(tokens))
        if low < 0 or high >= 2 * SOFT_MASK:
            raise ValueError(f"{name} must hold token ids in 0..{2 * SOFT_MASK - 1}, got values in {low}..{high}")
    return tokens


def check_bool_mask(mask: Any, shape: tuple[int, ...] | torch.Size, name: str = "mask") -> torch.Tensor:
    """A boolean tensor of exactly ``shape`` (TypeError for lists and other dtypes, ValueError for shapes)."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = f"a tensor of dtype {mask.dtype}" if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"{name} must be a boolean tensor (True = real position), got {got}")
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(mask.shape)}, expected {tuple(shape)}")
    return mask


def decode(tokens: torch.Tensor, mask: torch.Tensor | None = None, *, rna: torch.Tensor | None = None) -> list[str]:
    """``tokens [B, L]`` (or ``[L]``) and optionally their mask -> B strings; pads (and masked-out positions) are
    dropped.

    Lowercase comes back for soft-masked tokens, so ``decode(*encode(s)) == s`` for any valid ``s``.

    Args:
        tokens: ids from :func:`encode` (any integer dtype).
        mask: boolean, the shape of ``tokens``: the positions to decode (default: every non-pad token). A pad
            token at a position the mask keeps is a ValueError: it has no letter.
        rna: ``[B]`` boolean, True for reads that were RNA (``ReadBatch.rna`` with ``rna="keep"``): their T/t
            tokens decode as U/u.
    """
    tokens = check_tokens(tokens)
    if tokens.ndim == 1:
        tokens = tokens.unsqueeze(0)
        if mask is not None:
            mask = check_bool_mask(mask, tokens.shape[1:]).unsqueeze(0)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [B, L] or [L], got shape {tuple(tokens.shape)}")
    if tokens.is_meta:
        raise ValueError("tokens are on the meta device: they have no values to decode")
    if mask is None:
        keep = tokens != PAD
    else:
        keep = check_bool_mask(mask, tokens.shape).to(tokens.device)
    kept = tokens[keep].cpu().numpy()
    pads = (kept == PAD) | (kept == PAD + SOFT_MASK)
    if pads.any():
        row, position = (int(v) for v in keep.nonzero()[int(np.flatnonzero(pads)[0])])
        raise ValueError(f"mask keeps a pad token (id {int(kept[np.flatnonzero(pads)[0]])}) at row {row}, position "
                         f"{position}: a pad has no letter; pass the mask that came with the tokens")
    letters = bytearray(_DECODE_TABLE[kept].tobytes())
    ends = keep.sum(1).cumsum(0).tolist()
    starts = [0, *ends[:-1]]
    if rna is not None:
        rna = check_bool_mask(rna, tokens.shape[:1], "rna")
        rna_letters = _DECODE_RNA_TABLE[kept].tobytes()
        for row in rna.nonzero().flatten().tolist():
            letters[starts[row]:ends[row]] = rna_letters[starts[row]:ends[row]]
    text = letters.decode("ascii")
    return [text[a:b] for a, b in zip(starts, ends)]


def soft_mask(tokens: torch.Tensor) -> torch.Tensor:
    """The soft-mask channel: True where a token is a lowercase (soft-masked) base. ``[...]`` -> ``[...]`` bool."""
    tokens = check_tokens(tokens)
    return (tokens >= SOFT_MASK) & (tokens != PAD + SOFT_MASK)


def complement_tokens(tokens: torch.Tensor) -> torch.Tensor:
    """IUPAC complement of each token id (case and pads kept), same shape, dtype and device."""
    tokens = check_tokens(tokens)
    return _lookup(_COMPLEMENT_TABLE.to(device=tokens.device, dtype=tokens.dtype), tokens)


def _lookup(table: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``table[tokens]`` (any shape of tokens) through :func:`take_rows`."""
    return take_rows(table, tokens.reshape(-1)).reshape(*tokens.shape, *table.shape[1:])


def _one_hot_rows(ambiguity: str, soft_mask_channel: bool) -> torch.Tensor:
    """``[32, 4|5]`` float64 rows per token id."""
    rows = torch.zeros(2 * SOFT_MASK, 4, dtype=torch.float64)
    for token, letter in enumerate(TOKENS):
        bases = IUPAC_BASES[letter]
        if len(bases) == 1 or ambiguity == "fractional":
            for b in bases:
                rows[token, BASES.index(b)] = 1.0 / len(bases)
    rows[SOFT_MASK:] = rows[:SOFT_MASK]
    if soft_mask_channel:
        flag = torch.zeros(2 * SOFT_MASK, 1, dtype=torch.float64)
        flag[SOFT_MASK:PAD + SOFT_MASK] = 1.0
        rows = torch.cat([rows, flag], dim=1)
    return rows


_ONE_HOT_ROWS = {(a, s): _one_hot_rows(a, s) for a in ONE_HOT_POLICIES for s in (False, True)}


@functools.lru_cache(maxsize=32)
def _cached_one_hot_table(ambiguity: str, dtype: torch.dtype, device: torch.device,
                          soft_mask_channel: bool) -> torch.Tensor:
    """The rows on ``device`` in ``dtype``, cached (read-only: callers get gathered copies)."""
    return _ONE_HOT_ROWS[ambiguity, soft_mask_channel].to(dtype=dtype, device=device)


def one_hot(
    tokens: torch.Tensor, *, ambiguity: str = "zeros", soft_mask_channel: bool = False,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``tokens [...]`` -> one-hot ``[..., 4]`` over A, C, G, T (``[..., 5]`` with ``soft_mask_channel=True``).

    Args:
        tokens: ids from :func:`encode`, any integer dtype (uint8 by default), any device (meta included).
        ambiguity: ``"zeros"`` (N and the other ambiguity codes are zero rows, as in Enformer) or
            ``"fractional"`` (each code spreads 1 evenly over the bases it stands for: N = 0.25 each).
        soft_mask_channel: append a fifth channel, 1.0 at soft-masked (lowercase) bases.
        dtype: floating dtype of the result.

    Pads are zero rows (zero in the soft-mask channel too).
    """
    tokens = check_tokens(tokens)
    check_choice(ambiguity, "ambiguity", ONE_HOT_POLICIES)
    check_float_dtype(dtype)
    if not isinstance(soft_mask_channel, bool):
        raise TypeError(f"soft_mask_channel must be a bool, got {type(soft_mask_channel).__name__}")
    if torch.compiler.is_compiling():
        table = _ONE_HOT_ROWS[ambiguity, soft_mask_channel].to(dtype=dtype, device=tokens.device)
    else:
        table = _cached_one_hot_table(ambiguity, dtype, tokens.device, soft_mask_channel)
    if tokens.device.type in dna_triton.KERNEL_DEVICE_TYPES and dna_triton.enabled(tokens):
        return dna_triton.one_hot_rows(tokens, table)  # one launch, the table's rows as they are
    if tokens.is_cuda and table.shape[1] * table.element_size() % 16 == 0:
        # torch gathers rows of a multiple of 16 bytes with vector loads (vectorized_gather_kernel), which from a
        # 32-row table ran 40x slower on an H200 than gathering its columns: 90 ms against 3.6 ms for 150M float32
        # rows. Gather the columns, then lay them out row by row (the same values, contiguous).
        columns = table.t().contiguous()[:, tokens.reshape(-1).int()]
        return columns.t().contiguous().reshape(*tokens.shape, table.shape[1])
    return _lookup(table, tokens)
