"""CUDA-graph capture as the capture tests do it (needs a CUDA device)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def captured(call: Callable[[], Any], warmups: int = 2) -> tuple[torch.cuda.CUDAGraph, Any]:
    """``call`` captured in a CUDA graph over static inputs: ``(graph, what the captured call returned)``.

    ``call`` runs ``warmups`` times first on a side stream, so that tables, launch plans and compiled kernels are
    built outside the capture (CUDA's recommended warm-up); ``graph.replay()`` then rewrites the returned tensors
    from the inputs' current values."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmups):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = call()
    return graph, outputs
