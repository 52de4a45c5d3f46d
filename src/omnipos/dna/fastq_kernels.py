"""The compiled FASTQ block parser of :mod:`omnipos.dna.fastq_blocks`, with numba (the optional extra
``omnipos[fast]``; this module does not import without it, and ``read_fastx`` then uses dnaio or the reference).

One pass over a buffer of plain 4-line FASTQ records: each record's name, sequence and quality copied out back to
back, the sequence's token ids looked up on the way (the same 256-entry table as :func:`omnipos.dna.letter_codes`).
Anything else stops the pass at the record where it starts, for the reference parser to read from there.
"""

from __future__ import annotations

import numba  # noqa: F401 - the kernel needs it: without numba this module does not import (callers catch it)

from ..core import compiled

__all__ = ["IRREGULAR", "MORE", "scan_records"]

MORE = 1  # the buffer ends inside a record: read more
IRREGULAR = 2  # a record that is not a plain 4-line record: the reference parser reads from here


@compiled
def scan_records(buf, pos, n, final, space, lut, data, codes, scores, names, lengths):
    """Parse plain 4-line FASTQ records from ``buf[pos:n]`` (``buf[n]`` must be a LF, a sentinel): ``@name`` /
    sequence / ``+`` / quality, each line ended by LF (the last line of the file, ``final``, may end at ``n``), a
    header of ASCII without CR, a sequence line that starts with neither ``@`` nor ``+``, a quality line as long as
    the sequence. Writes each record's sequence into ``data`` and its token ids (``lut`` of each letter) into
    ``codes``, its quality into ``scores``, its name and a LF into ``names`` and its length into ``lengths``.

    A CR or a non-ASCII byte in a sequence is an invalid letter (flag 1), in a quality a character below any
    offset or above ``'~'``, which ``assemble`` refuses: the batch then goes to the reference parser, which reads
    lone CRs as line ends and names the bad byte. A LF inside what should be the quality (a shorter quality line)
    is such a character too.

    Returns ``(count, pos, status, flags, used, named)``: records parsed, where the next one starts, 0 (the buffer
    is used up) / :data:`MORE` / :data:`IRREGULAR` (at ``pos``), flags (1: some letter maps to 255, invalid; 2:
    some name ends in a character of ``space``, trailing whitespace), the bytes written to ``data`` and to
    ``names``."""
    count = 0
    used = 0  # bytes written to data / codes / scores
    named = 0  # bytes written to names
    flags = 0
    status = 0
    while pos < n:
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
        name_start, name_end = pos + 1, i
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
        # -- the record: letters, token ids, qualities, name, length
        acc = 0
        for k in range(length):
            c = buf[s + k]
            data[used + k] = c
            code = lut[c]
            codes[used + k] = code
            acc |= code
        scores[used:used + length] = buf[q:end]
        if acc > 127:  # some 255
            flags |= 1
        names[named:named + name_end - name_start] = buf[name_start:name_end]
        named += name_end - name_start
        if name_end > name_start and space[buf[name_end - 1]]:
            flags |= 2
        names[named] = 10
        named += 1
        lengths[count] = length
        used += length
        count += 1
        pos = end + 1 if end < n else n
    return count, pos, status, flags, used, named
