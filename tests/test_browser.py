"""The ``/bacc`` dashboard page in a real browser: headless Chromium driven by Playwright.

Debian's ``chromium`` at ``/usr/bin/chromium`` is used (Playwright's own browser download
is not needed). The test does not install it: ``ci/browser.sh`` does (as root, with
apt-get; ``.ci/run`` calls it before the tests), and the test skips, saying so, when it is
missing. The whole module is marked ``browser`` (deselect it with ``-m "not browser"``).
Set ``BACC_DASHBOARD_SCREENSHOT=path.png`` to also keep a copy of the screenshot
(``docs/dashboard.png`` is made that way).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import cloudpickle
import numpy as np
import pytest
from cluster_helpers import gen_cluster

import dask_bacc
from dask_bacc.testing import gate_stragglers

cloudpickle.register_pickle_by_value(sys.modules[__name__])

CHROMIUM = Path("/usr/bin/chromium")
# as root in a container: no sandbox; and no background traffic to Google's hosts
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.browser


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of Debian's Chromium, as installed by ``ci/browser.sh``; skips when missing."""
    pytest.importorskip("playwright.async_api", reason="playwright is in the test extra")
    if not CHROMIUM.exists():
        pytest.skip(f"chromium not found at {CHROMIUM}: run `bash ci/browser.sh` (needs root)")
    return str(CHROMIUM)


def predict(x, weights):
    return np.tanh(x @ weights)


@pytest.fixture
def browser_test(chromium, tmp_path):
    """Run the page check (a gen_cluster test) with the fixture's Chromium and folder."""

    @gen_cluster(
        client=True,
        nthreads=[("127.0.0.1", 1)] * 10,
        scheduler_kwargs={"dashboard": True, "dashboard_address": "127.0.0.1:0"},
        timeout=180,
    )
    async def run(c, s, *workers):
        from playwright.async_api import async_playwright

        rng = np.random.default_rng(0)
        X, W = rng.standard_normal((50, 6)), rng.standard_normal((6, 3))
        # uncoded: every task is needed (none cancelled), so the totals below are the
        # gated job's
        await dask_bacc.map_coded(np.tanh, X, n_blocks=5, code="uncoded", client=c)
        # the first three workers' tasks are held (still running at the decode)
        slow = [w.name for w in workers[:3]]
        gate = await gate_stragglers(workers=slow, interruptible=False, client=c)
        job = await dask_bacc.submit_coded(
            predict, X, W, n_blocks=5, code="systematic-spline", n_coded=10, wait=7, client=c
        )
        await job
        plugin = s.plugins["bacc-diagnostics"]
        while plugin.jobs[job.token].closed is None:
            await asyncio.sleep(0.01)  # its stragglers were released: the figures are final

        url = f"http://127.0.0.1:{s.http_server.port}/bacc"
        shot = tmp_path / "bacc-dashboard.png"
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 720})
                await page.goto(url)
                # the table's cells (Bokeh renders them in shadow roots; Playwright's
                # locators pierce those): the job that just ran, its function and figures
                await page.get_by_text(job.token[:8], exact=True).wait_for(timeout=60_000)
                await page.get_by_text("predict", exact=True).first.wait_for()
                await page.get_by_text("7 / 7", exact=True).wait_for()
                # the totals line above the table (the plot itself is a canvas)
                await page.get_by_text("3 cancelled, 0 failed").wait_for()
                await page.wait_for_timeout(700)  # let the plot draw before the picture
                await page.screenshot(path=str(shot), full_page=True)
            finally:
                await browser.close()
        await gate.release()
        await gate.clear()
        return shot

    return run


def test_dashboard_page_shows_the_job_in_chromium(browser_test, tmp_path):
    shot = tmp_path / "bacc-dashboard.png"
    browser_test()
    assert shot.exists() and shot.stat().st_size > 10_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    copy = os.environ.get("BACC_DASHBOARD_SCREENSHOT")
    if copy:
        shutil.copyfile(shot, copy)
