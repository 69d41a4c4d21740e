"""Deprecated: straggler injection moved to :mod:`dask_bacc.testing`.

``from dask_bacc.stragglers import ...`` still works for code written against 0.1 (the
same objects, with a ``FutureWarning``); import from ``dask_bacc.testing`` instead. This
module will be removed.
"""

import warnings

from .testing.stragglers import PLAIN_SEQ_BASE as PLAIN_SEQ_BASE
from .testing.stragglers import Bimodal as Bimodal
from .testing.stragglers import ShiftedExponential as ShiftedExponential
from .testing.stragglers import SlowWorkers as SlowWorkers
from .testing.stragglers import StragglerInjection as StragglerInjection
from .testing.stragglers import StragglerModel as StragglerModel
from .testing.stragglers import StragglerPlugin as StragglerPlugin
from .testing.stragglers import clear_stragglers as clear_stragglers
from .testing.stragglers import draw_delay as draw_delay
from .testing.stragglers import inject_stragglers as inject_stragglers
from .testing.stragglers import plain_task as plain_task
from .testing.stragglers import task_seconds as task_seconds

__all__ = [
    "PLAIN_SEQ_BASE",
    "Bimodal",
    "ShiftedExponential",
    "SlowWorkers",
    "StragglerInjection",
    "StragglerModel",
    "StragglerPlugin",
    "clear_stragglers",
    "draw_delay",
    "inject_stragglers",
    "plain_task",
    "task_seconds",
]

warnings.warn(
    "dask_bacc.stragglers moved to dask_bacc.testing (import Bimodal, inject_stragglers, ... "
    "from there); this module will be removed",
    FutureWarning,
    stacklevel=2,
)
