"""Optional packages: import one, or raise the ImportError that names the extra installing it.

Every integration of omnipos is an optional extra (``pip install "omnipos[graph]"``); this is the one place that
turns a missing package into a message a user can act on.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, extra: str, purpose: str, *, hint: str = "") -> ModuleType:
    """Import ``module`` (dotted names too) and return it, or raise an ImportError naming the extra.

    Args:
        module: what to import, e.g. ``"torch_geometric"`` or ``"pyarrow.parquet"``.
        extra: the omnipos extra that installs it, e.g. ``"graph"``.
        purpose: what needs it, as the start of the message (``"the PyG transforms"``).
        hint: appended to the message, e.g. an alternative that needs no extra.

    The message reads ``{purpose} need(s) {top-level package}: pip install "omnipos[{extra}]"{hint}``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = module.split(".")[0]
        raise ImportError(f'{purpose} needs {package}: pip install "omnipos[{extra}]"{hint}') from exc
