"""In-memory input reaches the cluster as its K blocks (issue 28 item 5), scattered from
the client to the one or two workers that read each (never through the scheduler), and
the graph of the coded tasks holds their keys, not the data (it was N/K
times the data, through the scheduler, with distributed's "Sending large graph" warning)."""

from __future__ import annotations

import pickle
import sys

import cloudpickle
import dask
import numpy as np
import pandas as pd
import pytest
from cluster_helpers import gen_cluster, until
from distributed.diagnostics.plugin import SchedulerPlugin

import dask_bacc
from dask_bacc.runtime import keys
from dask_bacc.testing import assert_decodes_reference

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8
K = 4
#: the data is 40x this: a graph that carried any block would be above it (pytest turns
#: distributed's warning into an error)
SMALL_GRAPH = {"distributed.admin.large-graph-warning-threshold": "50kB"}


class Chunks(SchedulerPlugin):
    """The input blocks the scheduler learns of, and how they came: by ``scatter``
    (``update_data``: no task spec) or as tasks of a graph."""

    name = "count-chunks"

    def __init__(self):
        self.graph_keys: list = []

    def update_graph(self, scheduler, *, keys, tasks=None, **kwargs):
        self.graph_keys.extend(tasks or ())


def chunks_on(s, token):
    """The job's ``bacc-chunk`` keys on the scheduler: key -> (nbytes, holders, has spec)."""
    out = {}
    for key, ts in s.tasks.items():
        parsed = keys.parse(key)
        if parsed is not None and parsed.kind == "chunk" and parsed.token == token:
            out[key] = (ts.nbytes, {ws.address for ws in ts.who_has or ()}, ts.run_spec)
    return out


def scattered(s, c):
    """How many keys the client ``c`` has told the scheduler it scattered (its
    ``update_data`` calls, counted from the first call of this on ``s``)."""
    counts = s.__dict__.setdefault("_test_scattered", {})
    if "handler" not in counts:
        original = s.handlers["update_data"]

        def counting(*args, client=None, nbytes=None, **kwargs):
            if client == c.id:
                counts[c.id] = counts.get(c.id, 0) + len(nbytes or {})
            return original(*args, client=client, nbytes=nbytes, **kwargs)

        s.handlers["update_data"] = counts["handler"] = counting
    return counts.get(c.id, 0)


def evals_on(s, token):
    """The job's eval tasks on the scheduler."""
    return [
        ts
        for key, ts in s.tasks.items()
        if (p := keys.parse(key)) is not None and p.kind == "eval" and p.token == token
    ]


def twice(b):
    return 2.0 * b


async def check_sent_once(c, s, data, nbytes, **options):
    plugin = Chunks()
    s.add_plugin(plugin)
    try:
        with dask.config.set(SMALL_GRAPH):
            if not isinstance(data, list):
                options["n_blocks"] = K
            before = scattered(s, c)
            job = await dask_bacc.submit_coded(twice, data, client=c, **options)
            chunks = chunks_on(s, job.token)
            # K blocks, scattered by the client as data: no spec on the scheduler
            assert len(chunks) == K
            assert sum(n for n, _, _ in chunks.values()) == nbytes
            assert all(1 <= len(holders) <= 2 and not spec for _, holders, spec in chunks.values())
            # from the client once per reader that holds a copy (at most two)
            assert K <= scattered(s, c) - before <= 2 * K
            # the graph of the coded tasks names the blocks (its dependencies) by key
            await until(lambda: len(evals_on(s, job.token)) == job.report.N, "the graph")
            assert {keys.parse(k).kind for k in plugin.graph_keys} == {"eval", "chunk"}
            spec_bytes = [len(pickle.dumps(ts.run_spec)) for ts in evals_on(s, job.token)]
            assert max(spec_bytes) < 10_000 < nbytes // K
            return await job, job.report
    finally:
        s.remove_plugin(name=plugin.name)


@pytest.mark.slow
@pytest.mark.parametrize(
    "code", ["systematic-spline", "berrut", "repetition", "lagrange", "speculative"]
)
@gen_cluster(client=True, nthreads=EIGHT)
async def test_numpy_input_is_scattered_once_and_the_graph_holds_keys(c, s, *workers, code):
    X = np.random.default_rng(0).standard_normal((400, 500))  # 1.6 MB
    options = {"code": code}
    if code == "lagrange":
        options["code_options"] = {"degree": 1}
    out, report = await check_sent_once(c, s, X, X.nbytes, **options)
    if code == "speculative":
        np.testing.assert_array_equal(out, 2.0 * X)
    else:  # the same answer as when the shares were encoded on the client
        assert_decodes_reference(out, report, twice, X)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_list_and_pandas_input_are_scattered_once(c, s, *workers):
    rng = np.random.default_rng(1)
    blocks = [rng.standard_normal((100, 500)) for _ in range(K)]
    out, _ = await check_sent_once(c, s, blocks, sum(b.nbytes for b in blocks), code="repetition")
    for got, b in zip(out, blocks, strict=True):
        np.testing.assert_array_equal(got, 2.0 * b)
    df = pd.DataFrame(rng.standard_normal((400, 500)))
    out, _ = await check_sent_once(c, s, df, df.to_numpy().nbytes, code="repetition")
    pd.testing.assert_frame_equal(out, 2.0 * df)
