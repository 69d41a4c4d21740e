"""One graph per stage: the private Dask path behind ``runtime.graph`` (a canary), and the
number of scheduler messages and tasks a coded job costs."""

from __future__ import annotations

import numpy as np
import pytest
from cluster_helpers import gen_cluster
from distributed import get_worker
from distributed.diagnostics.plugin import SchedulerPlugin

import dask_bacc
from dask_bacc.runtime import keys
from dask_bacc.runtime.graph import TaskSpec, submit_graph

FOUR = [("127.0.0.1", 1)] * 4


def where(*_):
    return get_worker().address


class CountGraphs(SchedulerPlugin):
    """Counts ``update-graph`` messages and the tasks they bring."""

    name = "count-graphs"

    def __init__(self):
        self.graphs = 0
        self.tasks: list = []

    def update_graph(self, scheduler, *, keys, tasks=None, **kwargs):
        self.graphs += 1
        self.tasks.extend(tasks or ())


@pytest.mark.slow
@gen_cluster(client=True, nthreads=FOUR)
async def test_submit_graph_pins_each_task_in_one_message(c, s, *workers):
    plugin = CountGraphs()
    s.add_plugin(plugin)
    addrs = [w.address for w in workers]
    dep = c.submit(np.arange, 3, key="dep")
    await dep
    plugin.graphs = 0
    specs = [
        TaskSpec(("pinned", i), where, (dep, [dep, np.ones(2)]), workers=[addrs[i]])
        for i in range(4)
    ]
    specs.append(TaskSpec("loose", where, (dep,), workers=[addrs[0]], loose=True))
    specs.append(TaskSpec("anywhere", where, ()))
    specs.append(TaskSpec("intermediate", np.add, (dep, 1), keep=False))
    specs.append(TaskSpec("uses-it", np.sum, (TaskRef("intermediate"),)))
    futures = submit_graph(c, specs)
    assert "intermediate" not in futures
    got = await c.gather([futures[("pinned", i)] for i in range(4)])
    assert plugin.graphs == 1
    assert got == addrs  # each on its own worker
    assert await futures["uses-it"] == 6  # nested futures and in-graph references resolve
    for i in range(4):
        ts = s.tasks[("pinned", i)]
        assert ts.worker_restrictions == {addrs[i]} and not ts.loose_restrictions
    assert s.tasks["loose"].loose_restrictions
    assert not s.tasks["anywhere"].worker_restrictions


from dask._task_spec import TaskRef  # noqa: E402


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 8)
async def test_a_coded_job_costs_one_graph_and_n_tasks(c, s, *workers):
    X = np.random.default_rng(0).standard_normal((40, 3))
    await (await dask_bacc.submit_coded(np.tanh, X, n_blocks=4, client=c))  # plugins registered
    plugin = CountGraphs()
    s.add_plugin(plugin)
    for code in ("berrut", "repetition", "lagrange"):
        plugin.graphs, plugin.tasks = 0, []
        job = await dask_bacc.submit_coded(
            np.tanh if code != "lagrange" else np.square,
            X,
            n_blocks=4,
            n_coded=8,
            code=code,
            code_options={"degree": 2} if code == "lagrange" else None,
            client=c,
        )
        await job
        # NumPy in, NumPy out: the N evals in one graph, decoded on the client
        assert plugin.graphs == 1, code
        assert sorted(keys.parse(k).kind for k in plugin.tasks) == ["eval"] * 8


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 8)
async def test_a_dask_array_job_costs_three_graphs(c, s, *workers):
    import dask.array as da

    X = np.random.default_rng(0).standard_normal((40, 3))
    x = da.from_array(X, chunks=(10, 3))
    await (await dask_bacc.submit_coded(np.tanh, x, client=c))  # plugins registered
    plugin = CountGraphs()
    s.add_plugin(plugin)
    job = await dask_bacc.submit_coded(np.tanh, x, n_coded=8, client=c)
    y = await job
    # the chunks (one compute), the N evals, the decode stage: one graph each
    assert plugin.graphs == 3
    assert (await c.compute(y)).shape == (40, 3)
    # (a graph also names the tasks it depends on: count each task once)
    kinds = [keys.parse(k).kind if keys.parse(k) else "chunk" for k in set(plugin.tasks)]
    assert kinds.count("eval") == 8 and kinds.count("decode") == 4
    assert kinds.count("stack") + kinds.count("info") == 2  # one decode task, one summary
