"""Imported first by the local engine's fork server (:mod:`omnipos.scale.workers`), before the modules it preloads
for the workers, and by nothing else:

- their import-time warnings are not printed a second time there (the driver, which imported them first, showed
  them already); each worker starts with the driver's warning filters, not these;
- the fork server dies with the driver that started it (Linux ``PR_SET_PDEATHSIG``): otherwise it would live as
  long as any of its workers, which hold its "alive" pipe, and the workers' own parent-death signal (they are its
  children) would never come. A driver killed by ``kill -9`` or the out-of-memory killer takes the fork server
  with it, and the fork server its workers. (The signal follows the driver's thread that started the fork
  server: if that thread ends, the fork server ends too, and the next job starts a new one.)
"""

import warnings

warnings.simplefilter("ignore")

from omnipos.scale.workers import (
    die_with_parent,  # after the filter: it imports omnipos.scale
)

die_with_parent()
