"""Straggler injection (dask_bacc.testing): models, reproducible draws, interruptible
delays and Event-gated stragglers on a cluster, the eval-hook extension point they use,
and the deprecated dask_bacc.stragglers alias."""

from __future__ import annotations

import asyncio
import importlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from cluster_helpers import checked_local_cluster, gen_cluster, idle
from distributed import Event

import dask_bacc
from dask_bacc.runtime.worker import EvalCall, EvalHook, eval_hooks
from dask_bacc.testing import (
    STRAGGLER_PLUGIN_NAME,
    Bimodal,
    EventGate,
    ShiftedExponential,
    SlowWorkers,
    StragglerPlugin,
    assert_decodes_reference,
    assert_no_bacc_tasks,
    clear_stragglers,
    gate_stragglers,
    inject_stragglers,
    plain_task,
    task_seconds,
)

EIGHT = [("127.0.0.1", 1)] * 8


def test_model_validation():
    with pytest.raises(ValueError, match="p must lie"):
        Bimodal(p=1.5)
    with pytest.raises(ValueError, match="factor"):
        Bimodal(p=0.1, factor=0.5)
    with pytest.raises(ValueError, match="delay"):
        SlowWorkers(names=["a"], delay=-1)
    with pytest.raises(ValueError, match="scale"):
        ShiftedExponential(scale=float("nan"))
    with pytest.raises(TypeError, match="StragglerModel"):
        StragglerPlugin(model="slow")


def test_model_draws():
    rng = np.random.default_rng(0)
    slow = SlowWorkers(names=[1, "b"], delay=2.0, factor=3.0)
    assert slow.draw(rng, "1", elapsed=0.5) == 2.0 + 2 * 0.5
    assert slow.draw(rng, "b", elapsed=0.0) == 2.0
    assert slow.draw(rng, "2", elapsed=0.5) == 0.0
    assert Bimodal(p=0.0, delay=5).draw(rng, "w", 1.0) == 0.0
    assert Bimodal(p=1.0, delay=5, factor=2).draw(rng, "w", 1.0) == 6.0
    draws = [ShiftedExponential(scale=0.5, shift=1.0).draw(rng, "w", 0) for _ in range(2000)]
    assert min(draws) >= 1.0
    assert abs(np.mean(draws) - 1.5) < 0.1  # mean of shift + Exp(scale)


def test_plugin_draws_are_seeded_and_reproducible():
    model = Bimodal(p=0.3, delay=1.0)
    a, b, other = (
        StragglerPlugin(model, seed=7),
        StragglerPlugin(model, seed=7),
        StragglerPlugin(model, seed=8),
    )

    def pattern(plugin, seq):
        return [plugin.delay(index=i, seq=seq, elapsed=0, worker_name="w") for i in range(200)]

    assert pattern(a, 0) == pattern(b, 0)
    assert pattern(a, 0) != pattern(a, 1)  # a new job draws anew
    assert pattern(a, 0) != pattern(other, 0)
    hits = np.mean([d > 0 for seq in range(5) for d in pattern(a, seq)])
    assert 0.2 < hits < 0.4
    assert a.log[-1][:2] == (4, 199)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_injected_stragglers_are_cancelled_and_interrupted(c, s, *workers):
    slow = workers[:2]
    await inject_stragglers(SlowWorkers(names=[w.name for w in slow], delay=3600), client=c)
    assert all(STRAGGLER_PLUGIN_NAME in w.plugins for w in workers)
    X = np.random.default_rng(0).standard_normal((16, 2))
    job = await dask_bacc.submit_coded(
        np.tanh, X, n_blocks=4, code="systematic-spline", n_coded=8, wait=6, client=c
    )
    await job
    rep = job.report
    slow_idx = {i for i, a in enumerate(rep.workers) if a in {w.address for w in slow}}
    # a held parity task is not needed when every systematic one returned
    assert set(rep.straggled) | set(rep.not_needed) == slow_idx
    assert slow_idx & set(rep.plain_shares) <= set(rep.straggled)
    assert rep.cancelled == 2
    # the hour-long injected delays end because the job decoded: the workers become idle
    await idle(slow)
    logged = [entry for w in slow for entry in w.plugins[STRAGGLER_PLUGIN_NAME].log]
    assert {entry[3] for entry in logged} == {3600.0}
    # compute spent: every eval recorded the thread time it occupied, the interrupted
    # stragglers included (far less than the hour they drew)
    spent = await task_seconds(client=c)
    assert sorted(index for _, index, _, _ in spent) == list(range(8))
    assert all(0 <= seconds < 3600 for *_, seconds in spent)
    await clear_stragglers(client=c)
    assert not any(STRAGGLER_PLUGIN_NAME in w.plugins for w in workers)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 2)
async def test_plain_task_draws_from_the_same_plugin(c, s, a, b):
    await inject_stragglers(SlowWorkers(names=[a.name], delay=0.0, factor=1.0), client=c)
    out = await c.submit(plain_task, np.arange(3.0), 10**9, 2, np.square, workers=[a.address])
    np.testing.assert_array_equal(out, [0.0, 1.0, 4.0])
    seq, index, name, delay = a.plugins[STRAGGLER_PLUGIN_NAME].log[-1]
    assert (seq, index, name, delay) == (10**9, 2, str(a.name), 0.0)
    # without a plugin the task just runs
    await clear_stragglers(client=c)
    assert await c.submit(plain_task, 2.0, 0, 0, np.sqrt, workers=[b.address]) == np.sqrt(2.0)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 2)
async def test_injected_stragglers_leave_at_the_end_of_a_with_block(c, s, a, b):
    """inject_stragglers stayed installed silently for every later job: as a context
    manager it removes itself on exit, also when the block raises."""
    model = SlowWorkers(names=[a.name], delay=0.0)
    async with inject_stragglers(model, client=c) as injection:
        assert all(STRAGGLER_PLUGIN_NAME in w.plugins for w in (a, b))
        assert injection.client is c
    assert not any(STRAGGLER_PLUGIN_NAME in w.plugins for w in (a, b))
    with pytest.raises(KeyError):
        async with inject_stragglers(model, client=c):
            raise KeyError("inside")
    assert not any(STRAGGLER_PLUGIN_NAME in w.plugins for w in (a, b))


def test_injected_stragglers_with_a_synchronous_client():
    from distributed import Client

    with checked_local_cluster(n_workers=2, threads_per_worker=1) as lc, Client(lc) as c:
        with inject_stragglers(SlowWorkers(names=["0"], delay=0.0)):
            on = c.run(lambda dask_worker: STRAGGLER_PLUGIN_NAME in dask_worker.plugins)
            assert all(on.values())
        off = c.run(lambda dask_worker: STRAGGLER_PLUGIN_NAME in dask_worker.plugins)
        assert not any(off.values())


def test_the_0_1_module_dask_bacc_stragglers_is_a_deprecated_alias():
    """``dask_bacc.stragglers`` (0.1) moved to dask_bacc.testing: importing the old module
    warns, naming the new one, and gives the very same objects."""
    import dask_bacc.testing.stragglers as new

    saved = sys.modules.pop("dask_bacc.stragglers", None)
    try:
        with pytest.warns(FutureWarning, match=r"dask_bacc\.testing"):
            old = importlib.import_module("dask_bacc.stragglers")
    finally:
        if saved is not None:
            sys.modules["dask_bacc.stragglers"] = saved
    assert set(old.__all__) == {
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
    }
    for name in old.__all__:
        assert getattr(old, name) is getattr(new, name), name
        assert getattr(old, name) is getattr(dask_bacc.testing, name), name


# -- the extension point: eval hooks -------------------------------------------------------------
@dataclass
class Recorder(EvalHook):
    """An eval hook that notes every call it gets."""

    name: str = "test-recorder"
    calls: list = field(default_factory=list)

    def after_eval(self, call: EvalCall) -> None:
        self.calls.append((call.token, call.seq, call.index, call.worker, call.wait(0)))


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4)
async def test_eval_hooks_are_worker_plugins_every_eval_calls(c, s, *workers):
    await c.register_plugin(Recorder(), name="test-recorder")
    assert all(eval_hooks(w) == [w.plugins["test-recorder"]] for w in workers)
    X = np.arange(8.0).reshape(4, 2)
    job = await dask_bacc.submit_coded(
        np.square, X, n_blocks=2, code="repetition", wait=4, client=c
    )
    np.testing.assert_array_equal(await job, X**2)
    calls = {w.address: w.plugins["test-recorder"].calls for w in workers}
    by_index = {call[2]: (addr, call) for addr, cs in calls.items() for call in cs}
    assert sorted(by_index) == list(range(4)) and sum(map(len, calls.values())) == 4
    for i, (addr, (token, seq, _, worker, done)) in by_index.items():
        assert addr == job.report.workers[i]  # called on the eval's own worker, with it
        assert worker.address == addr and token == job.token and seq == job.seq
        assert done is False  # wait=4: the job still needed every result
    # unregistered: no hook any more
    await c.unregister_worker_plugin("test-recorder")
    assert all(eval_hooks(w) == [] for w in workers)
    await dask_bacc.map_coded(np.square, X, n_blocks=2, code="repetition", client=c)
    assert eval_hooks() == []  # outside a worker: none


@dataclass
class FailOn(EvalHook):
    """An eval hook that fails the evals of chosen coded tasks."""

    indices: tuple = ()
    name: str = "test-fail-on"

    def after_eval(self, call: EvalCall) -> None:
        if call.index in self.indices:
            raise OSError(f"hook failed task {call.index}")


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4)
async def test_an_eval_hook_that_raises_fails_the_eval(c, s, *workers):
    await c.register_plugin(FailOn((1,)), name="test-fail-on")
    X = np.arange(8.0).reshape(4, 2)
    job = await dask_bacc.submit_coded(
        np.square, X, n_blocks=2, n_coded=4, code="repetition", wait=4, client=c
    )
    np.testing.assert_array_equal(await job, X**2)  # decoded from the other copies
    assert list(job.report.failed) == [1] and "hook failed task 1" in job.report.failed[1]
    await c.unregister_worker_plugin("test-fail-on")


# -- Event-gated stragglers --------------------------------------------------------------------
def test_gate_validation():
    with pytest.raises(ValueError, match="which evals"):
        EventGate("e")
    with pytest.raises(TypeError, match="integers"):
        EventGate("e", indices=frozenset([True]))
    with pytest.raises(ValueError, match="poll"):
        EventGate("e", indices=frozenset([1]), poll=0)
    gate = EventGate("e", indices=frozenset([np.int64(2)]), workers=frozenset([7]))
    assert gate.indices == {2} and gate.workers == {"7"} and gate.name == "bacc-gate-e"

    class W:
        name, address = 7, "tcp://w:1"

    assert gate.holds(2, None) and gate.holds(0, W) and not gate.holds(0, None)


@gen_cluster(client=True, nthreads=EIGHT)
async def test_gated_indices_straggle_until_the_job_decodes(c, s, *workers):
    """Tasks 3 and 5 straggle, with no clock: the job decodes from the other six, and the
    held evals let go at the decode (interruptible), without the release."""
    X = np.random.default_rng(0).standard_normal((16, 2))
    async with gate_stragglers(indices=[3, 5], client=c) as gate:
        assert all(gate.name in w.plugins for w in workers)
        job = await dask_bacc.submit_coded(
            np.tanh, X, n_blocks=4, n_coded=8, wait=6, code="berrut", client=c
        )
        out = await job
        rep = job.report
        assert sorted(rep.straggled) == [3, 5] and rep.cancelled == 2
        assert sorted(rep.returned) == [0, 1, 2, 4, 6, 7]
        assert_decodes_reference(out, rep, np.tanh, X)
        await idle(workers)
        held = [entry for w in workers for entry in w.plugins[gate.name].held]
        assert sorted(index for _, index, _ in held) == [3, 5]
        assert not await Event(gate.event, client=c).is_set()  # never released
    assert await Event(gate.event, client=c).is_set()  # released on leaving the block
    assert not any(gate.name in w.plugins for w in workers)
    await assert_no_bacc_tasks(s)


@gen_cluster(client=True, nthreads=EIGHT)
async def test_gate_by_worker_holds_until_released(c, s, *workers):
    """interruptible=False: a held eval keeps its thread after the decode, like a func that
    cannot be stopped, until the named Event is set."""
    X = np.random.default_rng(1).standard_normal((16, 2))
    slow = workers[6]
    gate = await gate_stragglers(
        workers=[slow.name], event="test-gate-worker", interruptible=False, client=c
    )
    assert gate.event == "test-gate-worker" and gate.name == "bacc-gate-test-gate-worker"
    job = await dask_bacc.submit_coded(
        np.tanh, X, n_blocks=4, n_coded=8, wait=7, code="berrut", client=c
    )
    out = await job
    rep = job.report
    (i_slow,) = [i for i, a in enumerate(rep.workers) if a == slow.address]
    assert rep.straggled == [i_slow] and i_slow not in rep.returned
    assert_decodes_reference(out, rep, np.tanh, X)
    from dask_bacc.runtime.worker import stale_evals

    while (await c.run(stale_evals, workers=[slow.address]))[slow.address] != 1:
        await asyncio.sleep(0.01)  # the job is done; the eval is still held
    assert slow.state.executing_count == 1
    await Event("test-gate-worker", client=c).set()  # gate.release() does the same
    while slow.state.executing_count:
        await asyncio.sleep(0.01)
    await gate.clear()
    assert not any(gate.name in w.plugins for w in workers)
    await assert_no_bacc_tasks(s)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4)
async def test_release_lets_a_job_that_needs_every_result_finish(c, s, *workers):
    X = np.random.default_rng(2).standard_normal((8, 2))
    async with gate_stragglers(indices=[0], client=c) as gate:
        job = await dask_bacc.submit_coded(
            np.tanh, X, n_blocks=2, n_coded=4, wait=4, code="berrut", client=c
        )
        while len(job.decider.usable) < 3:  # the three others landed
            await asyncio.sleep(0.01)
        held = [e for w in workers for e in w.plugins[gate.name].held]
        while not held:
            await asyncio.sleep(0.01)
            held = [e for w in workers for e in w.plugins[gate.name].held]
        assert not job.done() and held[0][1] == 0
        await gate.release()
        out = await job
    assert sorted(job.report.returned) == [0, 1, 2, 3] and job.report.straggled == []
    assert_decodes_reference(out, job.report, np.tanh, X)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 2)
async def test_plain_task_meets_the_gate_too(c, s, a, b):
    async with gate_stragglers(indices=[2], client=c) as gate:
        fut = c.submit(plain_task, np.arange(3.0), 10**9, 2, np.square, workers=[a.address])
        while not a.plugins[gate.name].held:
            await asyncio.sleep(0.01)
        assert list(a.plugins[gate.name].held) == [(10**9, 2, str(a.name))]
        assert not fut.done()  # a plain task is not interruptible: it waits for the release
        await gate.release()
        np.testing.assert_array_equal(await fut, [0.0, 1.0, 4.0])
        # other indices pass
        assert await c.submit(plain_task, 2.0, 10**9, 1, np.sqrt, workers=[a.address]) == 2**0.5


def test_the_testing_page_example_runs():
    """docs/testing.md's test, as a user would write it, passes (run here as written)."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "testing.md").read_text()
    (code,) = re.findall(r"^```python\n(.*?)^```", page, re.S | re.M)
    namespace: dict = {"__name__": "docs_testing_example"}
    exec(compile(code, "docs/testing.md", "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 1
    tests[0]()
