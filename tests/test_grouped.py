"""Grouped coding for many blocks (issue 29): K blocks in groups coded on their own, the
shares of a group on distinct workers, a wait counted per group."""

from __future__ import annotations

import numpy as np
import pytest
from cluster_helpers import gen_cluster, until
from hypothesis import given, settings
from hypothesis import strategies as st

import dask_bacc
from dask_bacc.codes import InsufficientResults, estimate_error, get_code
from dask_bacc.codes.grouped import GroupedCode, cyclic_placement, plan_groups
from dask_bacc.testing import gate_stragglers, relative_error, smooth_blocks


def grouped(K=20, k=4, n=8, inner="bspline", **options) -> GroupedCode:
    sizes, shares = plan_groups(K, k, n)
    return GroupedCode(K, sum(shares), inner, sizes, shares, **options)


def test_groups_are_even_and_block_diagonal():
    code = grouped(K=22, k=4, n=8)
    assert code.sizes == [4, 4, 4, 4, 3, 3] and code.shares_per_group == [8, 8, 8, 8, 6, 6]
    E = code.encoding_matrix()
    for g in code.groups:
        rows = E[g.shares.start : g.shares.stop]
        # a share reads only blocks of its own group
        assert not rows[:, : g.blocks.start].any() and not rows[:, g.blocks.stop :].any()
    # data linear in the block index within each group: every inner code reproduces it
    a, b = np.random.default_rng(0).standard_normal((2, 5))
    X = np.concatenate([a + b * np.arange(len(g.blocks))[:, None] for g in code.groups])
    np.testing.assert_allclose(code.decode(code.encode(X), range(code.N)), X, atol=1e-10)


@settings(deadline=None, max_examples=40, database=None)
@given(
    st.lists(st.integers(1, 9), min_size=1, max_size=30),
    st.integers(2, 24),
)
def test_cyclic_placement_never_puts_two_shares_of_a_group_on_one_worker(blocks, workers):
    shares = [min(workers, k + 1 + k // 2) for k in blocks]
    if any(n <= k for n, k in zip(shares, blocks, strict=True)):
        return  # a group of k blocks needs more than k workers
    place = cyclic_placement(shares, workers)
    start = 0
    for n in shares:
        assert len(set(place[start : start + n])) == n
        start += n
    load = np.bincount(place, minlength=workers)
    assert load.max() - load.min() <= 1  # every worker serves as many shares, +-1


def test_a_group_wider_than_the_cluster_is_refused():
    with pytest.raises(ValueError, match="needs as many workers"):
        cyclic_placement([4, 6], 5)


def test_the_wait_counts_per_group():
    code = grouped(K=8, k=4, n=8)  # two groups of 4 blocks, 8 shares each
    first, second = list(range(8)), list(range(8, 16))
    # 12 results, but all of one group and half of the other: a fraction 0.75 of N is
    # 12, yet the second group has only 4 of its 6
    lopsided = first + second[::2]
    assert code.can_decode(lopsided)
    assert not code.enough(lopsided, 12)
    assert code.enough(first[:6] + second[:6], 12)


def test_a_group_with_a_gap_is_named():
    code = grouped(K=8, k=4, n=8)
    returned = [*range(8), 8, 15]  # second group: its two end shares only
    with pytest.raises(InsufficientResults, match=r"group 1 \(blocks 4\.\.7"):
        code.decoding_matrix(returned)


def test_one_slow_worker_costs_each_group_one_share_and_the_estimate_holds():
    """200 blocks, groups of 10 coded with 20 shares on 20 workers: every result of one
    worker missing, the decode of smooth data is within bacc.warn-error (0.1), and the
    estimate is not below half the true error."""
    code = grouped(K=200, k=10, n=20)
    place = cyclic_placement(code.shares_per_group, 20)
    returned = [i for i in range(code.N) if place[i] != 7]
    assert all(local.size == 19 for _, _, local in code.split(returned))
    rng = np.random.default_rng(5)
    X = smooth_blocks(200, 20, 6, rng)
    W = rng.standard_normal((6, 3))
    results = np.tanh(code.encode(X)[returned] @ W)
    truth = np.tanh(X @ W)
    err = relative_error(code.decode(results, returned), truth)
    est = estimate_error(code, results, returned)
    assert err < 0.1
    assert est.overall >= 0.5 * err
    assert est.per_block.shape == (200,)


EIGHT = [("127.0.0.1", 1)] * 8


@gen_cluster(client=True, nthreads=EIGHT)
async def test_many_chunks_on_few_workers_are_coded_in_groups(c, s, *workers):
    """A dask array of 24 chunks on 8 workers (no single code fits: N > K > W): coded in
    groups; no group has two shares on one worker; with every task of one worker held,
    each group decodes from its other shares; the report gives the groups."""
    import dask.array as da

    X = smooth_blocks(24, 10, 4, np.random.default_rng(1)).reshape(240, 4)
    x = c.persist(da.from_array(X, chunks=(10, 4)))
    await x
    async with gate_stragglers(indices=range(0, 200, 8), client=c):
        job = await dask_bacc.submit_coded(np.tanh, x, code="bspline", client=c)
        out = await job
        rep = job.report
        code = rep.code
        assert code["name"] == "grouped" and code["code"] == "bspline" and code["K"] == 24
        assert max(code["shares"]) <= 8
        start = 0
        for n in code["shares"]:
            where = rep.workers[start : start + n]
            assert len(set(where)) == n, where
            start += n
        # every held task is on one worker, and no group waited for it
        held = {rep.workers[i] for i in range(0, code["N"], 8)}
        assert len(held) == 1
        assert not set(range(0, code["N"], 8)) & set(rep.returned)
        groups = rep.groups
        assert groups is not None and len(groups) == len(code["sizes"])
        assert [g["blocks"][1] - g["blocks"][0] + 1 for g in groups] == code["sizes"]
        assert all(g["returned"] >= 1 for g in groups)
        assert "groups" in repr(rep)
        # the /bacc page's timeline gives each coded task its group
        from dask_bacc.diagnostics import PLUGIN_NAME

        detail = s.plugins[PLUGIN_NAME].stats(job.token)
        assert detail["code"] == f"bspline in {len(groups)} groups"
        by_task = {t["index"]: t["group"] for t in detail["tasks"]}
        assert set(by_task.values()) == set(range(len(groups)))
        assert all(by_task[i] == 0 for i in range(code["shares"][0]))
        err = relative_error(await c.compute(out), np.tanh(X))
        assert err < 0.1 and rep.error_estimate >= 0.5 * err
        await until(lambda: rep.bytes_moved is not None, "bytes moved")
    del x, out


def test_exact_codes_are_not_grouped():
    with pytest.raises(ValueError, match="approximate code"):
        grouped(K=8, k=4, n=8, inner="repetition")
    assert get_code("bspline", 4, 8).enough(list(range(6)), 6)
