"""omnipos inside other libraries' models: one module per library, each a thin adapter over :mod:`omnipos.core`.

- :mod:`omnipos.integrations.transformers`: ``patch_rotary(model)`` swaps a transformers model's rotary embedding
  for omnipos' (float64 phases, every family's own layout and scaling), ``unpatch_rotary(model)`` puts it back.
- :mod:`omnipos.integrations.diffusers`: the same for diffusers transformers.

Integrations sit beside the domains (ARCHITECTURE: app -> scale -> domains, integrations -> core): they import
:mod:`omnipos.core` (and may import a domain), never ``omnipos.scale`` or ``omnipos.app``. Each is the one module
that imports its library, an optional dependency: a missing one is an ImportError naming the extra to install.
Import the submodule itself (``from omnipos.integrations.transformers import patch_rotary``); this package imports
neither library.
"""
