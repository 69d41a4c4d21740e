"""Screenshot of a JobReport's HTML repr in a notebook (docs/images/jobreport-repr.png).

Runs a three-cell notebook in a real kernel (nbclient: a 4-worker LocalCluster with a
dashboard, one coded job with injected stragglers, ``job.report``), renders it with
nbconvert's JupyterLab template and photographs the page with headless Chromium
(Playwright driving Debian's /usr/bin/chromium, as tests/test_browser.py does).

    .venv/bin/pip install nbclient nbconvert ipykernel playwright
    .venv/bin/python docs/_tools/screenshot_repr.py [--out docs/images/jobreport-repr.png]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbconvert import HTMLExporter

CELLS = [
    """import numpy as np
from distributed import Client, LocalCluster
import dask_bacc
from dask_bacc.testing import SlowWorkers, inject_stragglers

client = Client(LocalCluster(n_workers=4, threads_per_worker=1, processes=False))
X = np.random.default_rng(0).standard_normal((4000, 16))
W = np.random.default_rng(1).standard_normal((16, 4))
def predict(block, weights):
    return np.tanh(block @ weights)""",
    """with inject_stragglers(SlowWorkers(names=["3"], delay=5.0)):  # worker 3 is 5 s late
    job = dask_bacc.submit_coded(predict, X, W, n_blocks=2, wait=3, code="berrut", progress=False)
    Y = job.result()""",
    "job.report",
]


async def _shoot(page_html: Path, out: Path) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"]
        )
        page = await browser.new_page(viewport={"width": 1000, "height": 700})
        await page.goto(page_html.as_uri())
        await page.wait_for_timeout(500)
        await page.screenshot(path=str(out), full_page=True)
        await browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/images/jobreport-repr.png", type=Path)
    args = parser.parse_args()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    html, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(html)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        asyncio.run(_shoot(page, args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
