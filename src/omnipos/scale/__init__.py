"""Dataset-scale precompute: graph encodings, encoded reads and MEDS timelines for whole datasets, in shards.

The layer above the domains: each job runs a domain's own batched function (:func:`omnipos.graph.precompute`,
:func:`omnipos.dna.read_fastx`, :meth:`omnipos.timeseries.EventBatch.from_frame`) over shards of the input and
writes them to an output folder with a manifest (item counts, checksums) so that an interrupted job resumes
where it stopped. ``engine="local"`` runs the units on ``num_cpus`` worker processes of this machine (default:
its cores; no Ray needed); ``engine="ray"`` runs the same unit function as Ray tasks (extra ``[scale]``): a local
Ray started on demand, or the cluster at ``address=``. The output is the same bit for bit whatever the engine,
the worker count or the shard size. A run holds its folder (a second run there is refused), reads back nothing
it did not write, and reports a unit whose worker died as a failed unit of :class:`PrecomputeError`.

A finished job is read back whole (``load_graphs`` / ``load_reads`` / ``load_meds``) or lazily, one item at a time
with a collate that pads one batch (:class:`ShardedGraphDataset`, :class:`ShardedReadsDataset`,
:class:`ShardedMedsDataset`: memory of one shard and one batch, whatever the job's longest item).
"""

from .engine import CONNECT_TIMEOUT_S, ENGINES, MAX_RETRIES, Engine, make_engine
from .graphs import ShardedGraphDataset, load_graphs, precompute_graphs
from .job import PrecomputeError, PrecomputeResult
from .meds import ShardedMedsDataset, load_meds, meds_data_files, precompute_meds, vocab_from_codes
from .reads import ShardedReadsDataset, load_reads, precompute_reads
from .sampler import ShardSampler

__all__ = [
    "precompute_graphs",
    "load_graphs",
    "ShardedGraphDataset",
    "precompute_reads",
    "load_reads",
    "ShardedReadsDataset",
    "precompute_meds",
    "load_meds",
    "ShardedMedsDataset",
    "ShardSampler",
    "vocab_from_codes",
    "meds_data_files",
    "PrecomputeResult",
    "PrecomputeError",
    "ENGINES",
    "Engine",
    "make_engine",
    "CONNECT_TIMEOUT_S",
    "MAX_RETRIES",
]
