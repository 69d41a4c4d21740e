"""One job, one story: the report, its reprs and the ``/bacc`` page tell the same numbers.

Issue 28, item 1: for the same job the HTML repr, the ``/bacc`` table and the ``/bacc``
timeline gave three decode times, and the trigger said "wait" when the systematic
shortcut decoded. Every figure below comes from the job's report once the client sent it.
"""

from __future__ import annotations

import sys
from html import unescape

import cloudpickle
import numpy as np
import pytest
from cluster_helpers import gen_cluster

import dask_bacc
from dask_bacc.codes.registry import get_code
from dask_bacc.diagnostics import PLUGIN_NAME
from dask_bacc.diagnostics.dashboard import BaccPage
from dask_bacc.diagnostics.words import describe_method, describe_trigger
from dask_bacc.runtime.report import JobReport
from dask_bacc.testing import gate_stragglers

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8


def story(x):
    return np.tanh(x)


async def closed_stats(s, token):
    import asyncio

    plugin = s.plugins[PLUGIN_NAME]
    while token not in plugin.jobs or plugin.jobs[token].closed is None:
        await asyncio.sleep(0.01)
    return plugin.stats(token)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT, scheduler_kwargs={"dashboard": True})
async def test_systematic_shortcut_one_story(c, s, *workers):
    pytest.importorskip("bokeh")
    K, N = 4, 8
    rows = get_code("systematic-spline", K, N).data_rows()
    parity = [i for i in range(N) if i not in rows]
    X = np.random.default_rng(0).standard_normal((40, 3))
    gate = await gate_stragglers(indices=parity, interruptible=False, client=c)
    job = await dask_bacc.submit_coded(
        story, X, n_blocks=K, n_coded=N, client=c, code="systematic-spline"
    )
    await job
    rep = job.report
    # every block's own data was in before the (default) wait target, 6: an exact early decode
    assert sorted(rep.returned) == sorted(rows) and rep.error_estimate == 0
    assert rep.trigger == "exact"
    stats = await closed_stats(s, job.token)

    # the dashboard's table row and timeline, from the same report
    assert stats["trigger"] == rep.trigger
    assert stats["decode_seconds"] == pytest.approx(rep.time_to_decode)
    assert stats["used"] == len(rep.returned)
    assert stats["cancelled"] == rep.cancelled
    assert stats["straggled"] == len(rep.straggled)
    assert stats["late"] == len(rep.late)
    outcomes = [t["outcome"] for t in stats["tasks"]]
    assert outcomes.count("cancelled") == rep.cancelled
    assert outcomes.count("used") == len(rep.returned)

    page = BaccPage(s)
    page.selected = job.token
    page.update()
    assert page.decode_line.location == pytest.approx(rep.time_to_decode)
    assert f"{rep.time_to_decode:.3f}s" in page.decode_label.text
    title = page.timeline.title.text
    assert f"{rep.cancelled} cancelled" in title
    assert describe_trigger(rep.trigger) in title

    # the text and HTML reprs: the same decode time, trigger and method, in words
    text, html = repr(rep), unescape(rep._repr_html_())
    for shown in (text, html):
        assert f"{rep.time_to_decode:.3f}" in shown
        assert describe_trigger(rep.trigger) in shown
        assert f"cancelled {rep.cancelled}" in shown
    # and the report the scheduler holds rebuilds to the same text
    held = {**stats["report"], "token": job.token, "func": "story", "code": stats["code_config"]}
    assert repr(JobReport.from_dict(held)).splitlines()[1:3] == text.splitlines()[1:3]
    await gate.release()
    await gate.clear()


def test_every_trigger_and_method_has_words():
    for trigger in ("wait", "exact", "all", "error", "exhausted", "timeout"):
        words = describe_trigger(trigger)
        assert words and words != trigger and "[" not in words
    for method in ("embedded-fh1", "embedded-fh3", "exact", "ill-conditioned", "unreliable"):
        assert method in describe_method(method) and len(describe_method(method)) > len(method)


def test_text_repr_explains_the_estimate_method():
    rep = JobReport(
        token="ab",
        func="f",
        code={"name": "berrut", "K": 4, "N": 8},
        K=4,
        N=8,
        wait_target=6,
        returned=[0, 1, 2, 3, 4, 5],
        trigger="wait",
        time_to_decode=0.5,
        status="finished",
        error_estimate=0.01,
        estimate_method="embedded-fh1",
    )
    text = repr(rep)
    assert "[embedded-fh1]" not in text
    assert describe_method("embedded-fh1") in text
    assert describe_method("embedded-fh1") in unescape(rep._repr_html_())
