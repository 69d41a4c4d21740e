"""What a job's errors say (issue 28, item 9): the blocks a repetition code has no copy of,
and the user's own exception text with its numbers as they were."""

from __future__ import annotations

import sys

import cloudpickle
import dask
import numpy as np
import pytest
from cluster_helpers import gen_cluster

import dask_bacc

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8
MARK = 7.25  # the data of the block f refuses


def picky(x):
    if np.all(x == MARK):
        raise ValueError(f"out of range: {MARK} > 2.5 at row 12")
    return np.tanh(x)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_repetition_names_the_blocks_with_no_copy(c, s, *workers):
    X = np.random.default_rng(3).standard_normal((16, 2))
    X[8:12] = MARK  # block 2 of 4: repetition with N=6 copies blocks 0 and 1 only
    with dask.config.set({"bacc.on-error": "erase"}):
        job = await dask_bacc.submit_coded(
            picky, X, n_blocks=4, n_coded=6, code="repetition", client=c
        )
        with pytest.raises(dask_bacc.InsufficientResults) as info:
            await job
    text = str(info.value)
    # five results arrived and four would do, but none of them is block 2
    assert "block 2" in text and "no usable copy" in text, text
    # the user's message as raised: its numbers are not folded into "#"
    assert f"out of range: {MARK} > 2.5 at row 12" in text, text
    assert "#" not in text.split("missing:", 1)[1], text
