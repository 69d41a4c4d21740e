"""``dask_bacc.coding()`` with no distributed client, and with one made inside the block
(in a module of their own: ``test_coding.py`` keeps a client for its whole module)."""

from __future__ import annotations

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
from cluster_helpers import checked_local_cluster
from distributed import Client

import dask_bacc


def twice(b):
    return b * 2


def test_without_a_client_it_warns_and_dask_computes_locally():
    from distributed import default_client

    with pytest.raises(ValueError):
        default_client()  # (no client of another test is current here)
    y = da.ones(20, chunks=5).map_blocks(twice)
    with pytest.warns(RuntimeWarning, match="no distributed Client"):
        with dask_bacc.coding(only=twice) as block:
            np.testing.assert_array_equal(y.compute(), np.full(20, 2.0))
            (z,) = dask.persist(y)
            np.testing.assert_array_equal(z.compute(), np.full(20, 2.0))
    assert block.layers == []


def test_a_client_made_inside_the_block_is_named_on_exit():
    with checked_local_cluster(n_workers=1, threads_per_worker=1) as cluster:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # (no client yet)
            block = dask_bacc.coding().__enter__()
        with Client(cluster):
            with pytest.warns(RuntimeWarning, match="Client created there"):
                block.__exit__(None, None, None)

    # the block restored dask's scheduler setting: computations go on as before
    np.testing.assert_array_equal(da.ones(4, chunks=2).map_blocks(twice).compute(), np.full(4, 2.0))
