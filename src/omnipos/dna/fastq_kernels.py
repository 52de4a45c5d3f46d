"""The compiled FASTQ block parser of :mod:`omnipos.dna.fastq_blocks`, with numba (the optional extra
``omnipos[fast]``; this module does not import without it, and ``read_fastx`` then uses dnaio or the reference).

One pass over a buffer of plain 4-line FASTQ records: each record's name, sequence and quality copied out back to
back, the sequence's token ids looked up on the way (the same 256-entry table as :func:`omnipos.dna.letter_codes`).
Anything else stops the pass at the record where it starts, for the reference parser to read from there.
"""

from __future__ import annotations

import numba  # noqa: F401 - the kernel needs it: without numba this module does not import (callers catch it)

from ..core import compiled

__all__ = ["IRREGULAR", "MORE", "gather_records", "scan_records"]

MORE = 1  # the buffer ends inside a record: read more
IRREGULAR = 2  # a record that is not a plain 4-line record: the reference parser reads from here


@compiled
def scan_records(buf, pos, n, final, layout):
    """Find plain 4-line FASTQ records in ``buf[pos:n]`` (``buf[n]`` must be a LF, a sentinel): ``@name`` /
    sequence / ``+`` / quality, each line ended by LF (the last line of the file, ``final``, may end at ``n``), a
    header of ASCII without CR, a sequence line that starts with neither ``@`` nor ``+``, a quality line as long as
    the sequence. ``layout[r]`` gets record r's name start and end, sequence start, length and quality start.

    A CR or a non-ASCII byte in a sequence or quality line is not looked for here: it is an invalid letter, or a
    quality character below any offset or above ``'~'``, which ``assemble`` refuses, and the batch then goes to the
    reference parser (which reads a lone CR as a line end, and names the bad byte). A LF inside what should be the
    quality (a shorter quality line) is such a character too.

    Returns ``(count, pos, status)``: records found, where the next one starts, 0 (the buffer is used up, or
    ``layout`` is full) / :data:`MORE` / :data:`IRREGULAR` (at ``pos``)."""
    count = 0
    status = 0
    while pos < n and count < layout.shape[0]:
        # -- header: '@', then the name up to LF (ASCII, no CR)
        if buf[pos] != 64:
            status = IRREGULAR
            break
        i = pos + 1
        odd = 0
        while buf[i] != 10:
            c = buf[i]
            if c == 13 or c > 127:
                odd = 1
            i += 1
        if odd:
            status = IRREGULAR
            break
        if i >= n:
            status = IRREGULAR if final else MORE
            break
        # -- the sequence line
        s = i + 1
        if s >= n:
            status = IRREGULAR if final else MORE
            break
        if buf[s] == 64 or buf[s] == 43:  # '@' or '+': no sequence line (or the next record)
            status = IRREGULAR
            break
        j = s
        while buf[j] != 10:
            j += 1
        if j >= n:
            status = IRREGULAR if final else MORE
            break
        length = j - s
        # -- the '+' line: exactly "+\n"
        p = j + 1
        if p + 1 >= n:
            status = IRREGULAR if final else MORE
            break
        if buf[p] != 43 or buf[p + 1] != 10:
            status = IRREGULAR
            break
        # -- the quality line: as long as the sequence, then LF (or the file's end)
        q = p + 2
        end = q + length
        if end > n or (end == n and not final):
            status = IRREGULAR if final else MORE
            break
        if length == 0 and q == n:  # an empty read's quality line is missing at the file's end
            status = IRREGULAR
            break
        if end < n and buf[end] != 10:  # a longer quality line
            status = IRREGULAR
            break
        layout[count, 0] = pos + 1
        layout[count, 1] = i
        layout[count, 2] = s
        layout[count, 3] = length
        layout[count, 4] = q
        count += 1
        pos = end + 1 if end < n else n
    return count, pos, status


@compiled
def gather_records(buf, layout, count, lut, space, data, codes, scores, names):
    """The ``count`` records of ``layout`` (:func:`scan_records`) copied out of ``buf``: letters back to back into
    ``data`` (unless it is empty: letters are needed only by ``rna="keep"`` and to name an invalid one), their
    ids (``lut``) into ``codes``, qualities into ``scores``, each name and a LF into ``names``.
    Returns ``(flags, used, named)``: 1 = some letter maps to 255 (invalid), 2 = some name ends in a character of
    ``space`` (trailing whitespace); the bytes written to ``data`` and to ``names``. (Separate from the scan, and
    copying with slices: one loop per kind of work is what the compiler makes fast.)"""
    used = 0
    named = 0
    acc = 0
    flags = 0
    for r in range(count):
        s, length, q = layout[r, 2], layout[r, 3], layout[r, 4]
        for k in range(length):
            code = lut[buf[s + k]]
            codes[used + k] = code
            acc |= code
        if data.size:
            data[used:used + length] = buf[s:s + length]
        scores[used:used + length] = buf[q:q + length]
        used += length
        a, b = layout[r, 0], layout[r, 1]
        names[named:named + b - a] = buf[a:b]
        named += b - a
        names[named] = 10
        named += 1
        if b > a and space[buf[b - 1]]:
            flags |= 2
    if acc > 127:  # some 255
        flags |= 1
    return flags, used, named
