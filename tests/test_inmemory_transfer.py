"""In-memory input reaches the cluster as its K blocks (issue 28 item 5), each scattered
once from the client to the worker that reads it most (never through the scheduler), and
the graph of the coded tasks holds their keys, not the data (it was N/K times the data,
through the scheduler, with distributed's "Sending large graph" warning). A block whose
holder is killed, or frozen, is sent again and its readers launched again."""

from __future__ import annotations

import asyncio
import functools
import inspect
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
            assert all(len(holders) >= 1 and not spec for _, holders, spec in chunks.values())
            # from the client once each
            assert scattered(s, c) - before == K
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


def add_one_in_place(b):
    b += 1.0  # writes to its input: each copy must have its own
    return b


#: the tests of the sending itself use small blocks: scattered all the same
SCATTER = {"bacc.data-inline-limit": 0}


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4, config=SCATTER)
async def test_an_in_place_f_sees_its_own_copy_of_a_sent_block(c, s, *workers):
    """Repetition's two copies of a block read one scattered block (on an in-process
    cluster the very same object): each runs f on its own copy, as when each had its share
    in its spec, and the client's array is untouched."""
    X = np.zeros((8, 3))
    for code, options in (("repetition", {"wait": 1.0}), ("speculative", {})):
        job = await dask_bacc.submit_coded(
            add_one_in_place, X, code=code, n_blocks=2, client=c, **options
        )
        np.testing.assert_array_equal(await job, np.ones((8, 3)))
    np.testing.assert_array_equal(X, 0.0)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4, config=SCATTER)
async def test_a_lost_block_is_sent_again_and_its_readers_launched_again(c, s, *workers):
    """A scattered block cannot be recomputed, but the client has it: when it is lost (here
    cancelled, as the scheduler cancels the readers of data lost with its only holder),
    it is sent again under a new key and the tasks that read it are launched again."""
    from dask_bacc.testing import gate_stragglers

    X = np.random.default_rng(2).standard_normal((8, 3))
    gate = await gate_stragglers(indices=range(4), client=c)  # nothing returns yet
    try:
        job = await dask_bacc.submit_coded(
            np.tanh, X, code="berrut", n_blocks=2, n_coded=4, wait=4, client=c
        )
        first = job.sent.futures[0]
        await c.cancel([first])  # and with it every eval that reads it: all four
        await until(lambda: job.sent.futures[0] is not first, "block 0 sent again")
        await until(lambda: len(job._replaced) == 4, "the four evals launched again")
        await gate.release()
        out = await job
    finally:
        await gate.clear()
    rep = job.report
    assert rep.resent == 1 and not rep.failed
    assert sorted(rep.returned) == [0, 1, 2, 3]
    assert_decodes_reference(out, rep, np.tanh, X)


@gen_cluster(
    client=True,
    nthreads=[("127.0.0.1", 1)] * 4,
    config={"distributed.scheduler.worker-ttl": "10 minutes", **SCATTER},
)
async def test_readers_of_a_block_whose_holder_went_silent_get_it_again(c, s, *workers):
    """A holder that froze after the blocks were sent (it answers neither data requests nor
    with heartbeats) holds the transfers of its block to the other readers until
    ``worker-ttl`` removes it: once it counts as silent, the job sends the block again to
    each waiting reader's worker and launches the reader again. Simulated in process: the
    workers do not send input blocks (``get_data``), and the holders' heartbeats stop."""
    from dask_bacc.testing import gate_stragglers

    release = asyncio.Event()
    for w in workers:
        original = w.handlers["get_data"]

        async def frozen(comm, *args, _original=original, **kwargs):
            if any(keys.parse(k) and keys.parse(k).kind == "chunk" for k in kwargs["keys"]):
                await release.wait()  # the input blocks; results still come back
            out = _original(comm, *args, **kwargs)
            return await out if inspect.isawaitable(out) else out

        w.handlers["get_data"] = frozen
    X = np.random.default_rng(3).standard_normal((8, 3))
    # the primaries (on the blocks' holders) straggle; the backups need the blocks
    gate = await gate_stragglers(indices=[0, 1], client=c)
    try:
        job = await dask_bacc.submit_coded(np.tanh, X, code="repetition", n_blocks=2, client=c)
        holders = set(job.sent.holder)
        assert holders == {job.report.workers[0], job.report.workers[1]}
        for w in workers:
            if w.address in holders:
                w.periodic_callbacks["heartbeat"].stop()
        out = await asyncio.wait_for(job, 30)
    finally:
        release.set()
        await gate.release()
        await gate.clear()
    rep = job.report
    assert rep.resent == 2 and sorted(rep.returned) == [2, 3]
    np.testing.assert_array_equal(out, np.tanh(X))


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4, config=SCATTER)
async def test_a_slow_transfer_is_hedged_to_another_worker(c, s, *workers):
    """A worker that takes the connection and does not answer (frozen, simulated: its
    ``update_data`` waits) does not hold the job: after ``hedge_after`` the block also goes
    to another worker, the first copy to land is used, and the slow one, once it lands,
    is released (no task left on the scheduler)."""
    from dask_bacc.runtime import sending

    release = asyncio.Event()
    slow = workers[0]
    original = slow.handlers["update_data"]

    @functools.wraps(original)
    async def frozen(*args, **kwargs):
        await release.wait()
        out = original(*args, **kwargs)
        return await out if inspect.isawaitable(out) else out

    slow.handlers["update_data"] = frozen
    X = np.random.default_rng(4).standard_normal((400, 500))
    try:
        # uncoded: every worker is the home of one block, the slow one too
        job = await asyncio.wait_for(
            dask_bacc.submit_coded(twice, X, code="uncoded", n_blocks=4, client=c), 20
        )
        [j] = [j for j, w in enumerate(job.report.workers) if w == slow.address]
        # (another block is hedged too only if its transfer took over a second: not asserted)
        assert job.sent.rounds[j] == 2 and job.sent.holder[j] != slow.address
        out = await asyncio.wait_for(job, 20)
    finally:
        release.set()
    np.testing.assert_array_equal(out, 2.0 * X)
    await until(lambda: not sending._detached, "the slow transfer to land")


@pytest.mark.parametrize("code", ["repetition", "speculative", "berrut"])
@gen_cluster(client=True, nthreads=EIGHT)
async def test_the_inline_limit_decides_between_specs_and_a_scatter(c, s, *workers, code):
    """Shares of at most ``bacc.data-inline-limit`` bytes (N of them; a speculative job's K
    and as many backups) travel in the specs, one message; above it the blocks are
    scattered once (the scatter's round trips cost a small job 13-21%)."""
    X = np.random.default_rng(5).standard_normal((8, 16))  # 4 blocks of 256 bytes
    nbytes = 4 * 256 * 2  # N = 2K (repetition, the speculative bound), Berrut's default
    for limit, sent in ((nbytes, False), (nbytes - 1, True)):
        options = {"n_coded": 8} if code == "berrut" else {}
        with dask.config.set({"bacc.data-inline-limit": limit}):
            job = await dask_bacc.submit_coded(twice, X, code=code, n_blocks=4, client=c, **options)
            assert (job.sent is not None) == sent, limit
            out = await job
        if code == "berrut":
            assert_decodes_reference(out, job.report, twice, X)
        else:
            np.testing.assert_array_equal(out, 2.0 * X)
