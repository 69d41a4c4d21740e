"""Tools for testing code that uses dask-bacc, and dask-bacc itself.

A tool module, like ``distributed.utils_test`` or ``xarray.testing``: the package's core
never imports it. It holds

- straggler injection: seeded random delays (:func:`inject_stragglers` with
  :class:`SlowWorkers`, :class:`Bimodal`, :class:`ShiftedExponential`, ``Pareto``,
  or per host, by the test bed's worker names (``host_of``), ``SlowHosts``,
  ``CorrelatedHosts`` or ``MovingSlowSet``) and, for
  deterministic tests, coded tasks held until a :class:`distributed.Event` is set
  (:func:`gate_stragglers`); both are eval hooks on the workers
  (:class:`dask_bacc.runtime.worker.EvalHook`);
- test data: :func:`smooth_blocks`;
- assertions: the decoded value equals the reference decode of the results the job used
  (:func:`assert_decodes_reference`), an exact code's value equals ``func`` on the blocks
  (:func:`assert_exact`), no ``bacc-`` task is left on the scheduler
  (:func:`assert_no_bacc_tasks`).

See the page "Testing with dask-bacc" (``docs/testing.md``) for a deterministic straggler
test with ``distributed.utils_test.gen_cluster``.
"""

from .asserts import (
    assert_decodes_reference,
    assert_exact,
    assert_no_bacc_tasks,
    reference_decode,
    relative_error,
    tasks_on,
)
from .data import smooth_blocks
from .stragglers import (
    PLAIN_SEQ_BASE,
    STRAGGLER_PLUGIN_NAME,
    Bimodal,
    CorrelatedHosts,
    EventGate,
    MovingSlowSet,
    Pareto,
    ShiftedExponential,
    SlowHosts,
    SlowWorkers,
    StragglerGate,
    StragglerInjection,
    StragglerModel,
    StragglerPlugin,
    clear_stragglers,
    draw_delay,
    gate_stragglers,
    host_of,
    inject_stragglers,
    plain_task,
    task_seconds,
)

__all__ = [
    "PLAIN_SEQ_BASE",
    "STRAGGLER_PLUGIN_NAME",
    "Bimodal",
    "CorrelatedHosts",
    "EventGate",
    "MovingSlowSet",
    "Pareto",
    "ShiftedExponential",
    "SlowHosts",
    "SlowWorkers",
    "StragglerGate",
    "StragglerInjection",
    "StragglerModel",
    "StragglerPlugin",
    "assert_decodes_reference",
    "assert_exact",
    "assert_no_bacc_tasks",
    "clear_stragglers",
    "draw_delay",
    "gate_stragglers",
    "host_of",
    "inject_stragglers",
    "plain_task",
    "reference_decode",
    "relative_error",
    "smooth_blocks",
    "task_seconds",
    "tasks_on",
]
