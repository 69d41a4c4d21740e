"""Placement: one worker per coded task, hosts interleaved, least busy first; launch order."""

from __future__ import annotations

import itertools

import pytest

from dask_bacc.runtime.placement import choose_workers, spread_order


def info(host, busy=0, status="running"):
    return {"host": host, "status": status, "metrics": {"task_counts": {"executing": busy}}}


def test_hosts_are_interleaved_and_busy_workers_go_last():
    workers = {
        "tcp://a:1": info("a"),
        "tcp://a:2": info("a"),
        "tcp://b:1": info("b", busy=3),
        "tcp://b:2": info("b"),
        "tcp://c:1": info("c", status="paused"),
    }
    picked = choose_workers(workers, 4)
    assert len(set(picked)) == 4 and "tcp://c:1" not in picked
    assert {picked[0].split(":")[1], picked[1].split(":")[1]} == {"//a", "//b"}  # two hosts
    assert picked[-1] == "tcp://b:1"  # the busy one last
    assert choose_workers(workers, 2, spread_hosts=False) == ["tcp://a:1", "tcp://a:2"]


def test_more_tasks_than_workers():
    workers = {"tcp://a:1": info("a"), "tcp://a:2": info("a")}
    with pytest.raises(ValueError, match="need 3 distinct workers"):
        choose_workers(workers, 3)
    with pytest.warns(RuntimeWarning, match="correlated"):
        assert len(choose_workers(workers, 3, oversubscribe="warn")) == 3
    with pytest.raises(ValueError, match="no running workers"):
        choose_workers({"tcp://x:1": info("x", status="closing")}, 1)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 32, 33, 100])
def test_spread_order_is_a_permutation_whose_tail_is_spread(n):
    order = spread_order(n)
    assert sorted(order) == list(range(n))
    if n >= 8:
        # the last quarter to launch leaves no run of 2+ adjacent indices out
        tail = sorted(order[-(n // 4) :])
        assert all(b - a >= 2 for a, b in itertools.pairwise(tail))
