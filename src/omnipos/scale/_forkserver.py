"""Imported first by the local engine's fork server (:mod:`omnipos.scale.workers`), before the modules it preloads
for the workers: their import-time warnings are not printed a second time there (the driver, which imported them
first, showed them already). Each worker starts with the driver's warning filters, not these."""

import warnings

warnings.simplefilter("ignore")
