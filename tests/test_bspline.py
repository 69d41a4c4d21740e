"""The local-support code (issue 29): each share reads at most ``support`` blocks, gaps are
named, never decoded silently, and a job waits for a covering share."""

from __future__ import annotations

import numpy as np
import pytest

from dask_bacc.codes import BSplineCode, InsufficientResults, estimate_error, get_code
from dask_bacc.codes.bspline import local_basis, windowed_spline
from dask_bacc.testing import relative_error, smooth_blocks


@pytest.mark.parametrize("support", [2, 4])
@pytest.mark.parametrize("K,N", [(2, 4), (5, 11), (8, 16), (30, 61)])
@pytest.mark.parametrize("systematic", [False, True])
def test_each_share_reads_at_most_its_support(K, N, support, systematic):
    code = BSplineCode(K, N, support=support, systematic=systematic)
    E = code.encoding_matrix()
    reads = (E != 0).sum(axis=1)
    assert reads.max() <= support and reads.min() >= 1
    # the blocks a share reads are neighbours
    for row in E:
        nz = np.flatnonzero(row)
        assert nz.max() - nz.min() < support
    # and the encoder interpolates the blocks: u(alpha_j) = X_j
    np.testing.assert_allclose(local_basis(code.data_points, K, support), np.eye(K), atol=1e-12)


def test_systematic_shares_are_the_blocks_themselves():
    code = get_code("systematic-bspline", 8, 16)
    rows = code.data_rows()
    assert sorted(rows.values()) == list(range(8))
    assert sorted(rows) == sorted(code.systematic_workers.tolist())


def test_the_decode_is_local():
    code = BSplineCode(16, 32)
    D = code.decoding_matrix(list(range(32)))
    assert ((np.abs(D) > 0).sum(axis=1) <= 6).all()


def test_a_gap_is_named_and_not_decoded():
    code = BSplineCode(8, 16)
    # shares 5..10 lie around blocks 3 and 4 (points 1 - 2i/15 against 1 - 2j/7)
    returned = [i for i in range(16) if not 4 <= i <= 11]
    assert code.uncovered(returned) == [3, 4]
    assert not code.can_decode(returned)
    with pytest.raises(InsufficientResults, match=r"blocks \[3, 4\]"):
        code.decode(np.zeros((len(returned), 2)), returned)
    with pytest.raises(InsufficientResults):
        estimate_error(code, np.zeros((len(returned), 2)), returned)
    # one share back in the gap covers both
    assert code.can_decode([*returned, 8])


def test_min_results_is_the_fewest_covering_shares():
    code = BSplineCode(8, 16)
    assert code.min_results == 4
    assert not any(code.can_decode(list(s)) for s in [(0, 5, 10), (1, 6, 11), (2, 7, 15)])


def test_windowed_spline_interpolates_and_reproduces_cubics():
    x = np.sort(np.random.default_rng(0).uniform(-1, 1, 12))
    np.testing.assert_allclose(windowed_spline(x, x), np.eye(12), atol=1e-12)
    t = np.linspace(-0.8, 0.8, 9)
    # a natural spline reproduces straight lines everywhere
    np.testing.assert_allclose(windowed_spline(t, x) @ (3 * x - 1), 3 * t - 1, atol=1e-10)


@pytest.mark.parametrize("kind", ["smooth", "random"])
def test_median_error_no_worse_than_berrut(kind):
    """K = 8, N = 16, 4 random stragglers, tanh(X W): the local code's median error over
    40 straggler sets is at most Berrut's (docs/codes.md has the full table)."""
    rng = np.random.default_rng(3)
    W = rng.standard_normal((6, 3))
    errs: dict[str, list[float]] = {"bspline": [], "berrut": []}
    for _ in range(40):
        X = smooth_blocks(8, 100, 6, rng) if kind == "smooth" else rng.standard_normal((8, 100, 6))
        truth = np.tanh(X @ W)
        ret = np.sort(rng.choice(16, 12, replace=False)).tolist()
        for name in errs:
            code = get_code(name, 8, 16)
            if not code.can_decode(ret):
                continue
            out = np.tanh(code.encode(X)[ret] @ W)
            errs[name].append(relative_error(code.decode(out, ret), truth))
    assert np.median(errs["bspline"]) <= np.median(errs["berrut"])


# -- on a cluster: what each share reads, and the bytes moved per answer ---------------------

SIXTEEN = [("127.0.0.1", 1)] * 17


def _reads_per_share(s, token):
    """Dependencies (input blocks) of each of the job's eval tasks on the scheduler."""
    from dask_bacc.runtime.keys import parse as parse_key

    out = {}
    for key, ts in s.tasks.items():
        p = parse_key(key) if isinstance(key, tuple) else None
        if p is not None and p.kind == "eval" and p.token == token:
            out[int(p.index)] = len(ts.dependencies)
    return out


@pytest.mark.parametrize("code,most", [("bspline", 4), ("systematic-bspline", 4), ("berrut", 8)])
def test_each_share_of_a_job_reads_at_most_its_support_and_bytes_moved_follow(code, most):
    """A persisted dask array in 8 chunks on 17 workers, N = 16: every eval task of a
    bspline job depends on at most 4 chunks (Berrut: all 8), and ``report.bytes_moved`` is
    the blocks the shares read plus the results the decode read, as counted here."""
    import asyncio

    import dask.array as da
    from cluster_helpers import gen_cluster, until

    import dask_bacc

    X = np.random.default_rng(0).standard_normal((800, 10))

    @gen_cluster(client=True, nthreads=SIXTEEN)
    async def run(c, s, *workers):
        x = c.persist(da.from_array(X, chunks=(100, 10)))
        await x
        gate = asyncio.Event()
        seen: dict[int, int] = {}

        job = await dask_bacc.submit_coded(np.tanh, x, code=code, n_coded=16, wait=16, client=c)
        while not gate.is_set():
            seen.update(_reads_per_share(s, job.token))
            if len(seen) == 16 or job.done():
                gate.set()
            await asyncio.sleep(0)
        out = await job
        assert out.shape == X.shape
        await until(lambda: job.report.bytes_moved is not None, "bytes moved")
        assert len(seen) == 16
        assert max(seen.values()) <= most and (code == "berrut") == (max(seen.values()) == 8)
        E = dask_bacc.codes.get_code(code, 8, 16).encoding_matrix()
        block, result = X[:100].nbytes, X[:100].nbytes  # tanh keeps the shape
        expected = int((E != 0).sum()) * block + len(job.report.returned) * result
        assert job.report.bytes_moved == expected
        del x, out

    run()


@pytest.mark.parametrize("K", [8, 16, 32, 50])
def test_every_systematic_share_is_an_exact_unit_row(K):
    """Points computed in floating point land exactly on the data points: every block's
    systematic share ships the block itself (data_rows), so its decode is exact."""
    code = get_code("systematic-bspline", K, 2 * K)
    assert sorted(code.data_rows().values()) == list(range(K))
