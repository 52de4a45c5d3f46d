"""Irregular timelines (clinical records, sensors): absolute, periodic and gap encodings, Time2Vec, event batches.

Plain float times are in hours unless a function's ``unit=`` says otherwise; durations may be strings such as
``"24h"``, ``"7d"``, ``"30min"``. Every encoding is ``[B, L, D]`` with padded positions exactly zero, and refuses
unsorted times. Relative times (from each timeline's first event, by default) come with the *clock* of each
row's origin (``batch_timelines(..., return_clock=True)``, ``EventBatch.clock``): periodic features (time of day,
day of week, in a named ``timezone``) are always taken on the clock. :class:`EventBatch` (pandas / pyarrow, extra
``[clinical]``) reads MEDS event tables and folders; :class:`PackedEvents` holds the same events without padding
(``[N]`` + ``cu_seqlens``, what varlen attention consumes).
"""

from .absolute import absolute_time_encoding
from .calendar import batch_timelines, to_offsets
from .durations import UNITS, parse_duration
from .encoder import TimelineEncoder
from .erpe import ERPE, erpe_attention, erpe_bias, erpe_score_mod
from .events import PAD_CODE, UNK_CODE, EventBatch
from .gaps import (
    DEFAULT_GAP_BOUNDARIES,
    GapBucketEmbedding,
    log_gap_encoding,
    time_gaps,
)
from .packed import PackedEvents
from .periodic import periodic_encoding
from .tape import TAPE, tape
from .time2vec import Time2Vec

__all__ = [
    "UNITS",
    "parse_duration",
    "to_offsets",
    "batch_timelines",
    "absolute_time_encoding",
    "periodic_encoding",
    "time_gaps",
    "log_gap_encoding",
    "GapBucketEmbedding",
    "DEFAULT_GAP_BOUNDARIES",
    "Time2Vec",
    "TimelineEncoder",
    "EventBatch",
    "PackedEvents",
    "PAD_CODE",
    "UNK_CODE",
    "tape",
    "TAPE",
    "ERPE",
    "erpe_bias",
    "erpe_score_mod",
    "erpe_attention",
]
