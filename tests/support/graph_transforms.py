"""Graph transforms for the scale tests, importable by the local engine's worker processes (pytest puts tests/ on
the path, and the workers start with the driver's path)."""

import numpy as np
from torch_geometric.transforms import BaseTransform


class AddNumpyAttribute(BaseTransform):
    """Adds a NumPy array (which a shard cannot hold without pickle) as ``data.array``."""

    def forward(self, data):
        data = data.clone()
        data.array = np.zeros(2)
        return data
