"""The progress bar as a notebook saves it: what a static render (nbconvert, GitHub) shows.

In Jupyter the bar is a tqdm widget; a static render shows the ``text/plain`` fallback
saved next to the widget's view. That text was the bar's state when the widget was first
displayed (``0%| 0/3``) however far the job went (issue 28, item 9); the bar now updates
its display when it closes, so the saved text is its final state.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

WIDGET = "application/vnd.jupyter.widget-view+json"

#: a job's report as the bar reads it: 3 results needed, decoded, 1 straggler cancelled
FAKE_JOB = """\
from types import SimpleNamespace
from dask_bacc.diagnostics.progress import ProgressBar

report = SimpleNamespace(
    wait_target=3, code="berrut", func="predict", failed=[], status="finished",
    time_to_decode=0.25, trigger="wait", cancelled=1,
)
"""


def _execute(tmp_path: Path, cells: list[str]) -> list[dict]:
    """Run ``cells`` in a fresh ipykernel (as ci/notebooks.sh does); the saved outputs."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("ipywidgets")  # without it tqdm.auto draws text, not a widget
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, path)  # what ci/notebooks.sh saves; read back as a renderer would
    return [json.loads(path.read_text())["cells"][i]["outputs"] for i in range(len(cells))]


def _bars(outputs: list[dict]) -> list[str]:
    """The text fallbacks of the progress widgets among ``outputs``."""
    return [
        "".join(out["data"]["text/plain"])
        for out in outputs
        if out.get("output_type") == "display_data" and WIDGET in out.get("data", {})
    ]


@pytest.mark.slow
def test_a_static_render_shows_the_final_state_of_the_bar(tmp_path):
    one_job = textwrap.dedent(
        """\
        bar = ProgressBar(report)
        for landed in (1, 2, 3):
            bar.update(landed)
        bar.close()
        """
    )
    # two jobs in one cell share one bar (reset for the second), closed when the cell ends
    two_jobs = textwrap.dedent(
        """\
        for _ in range(2):
            bar = ProgressBar(report)
            for landed in (1, 2, 3):
                bar.update(landed)
            bar.close()
        """
    )
    setup, single, shared = _execute(tmp_path, [FAKE_JOB, one_job, two_jobs])
    assert not _bars(setup)
    (text,) = _bars(single)
    assert "bacc berrut predict" in text
    assert "100%" in text and "3/3" in text, text
    assert "decoded=0.250s" in text and "cancelled=1" in text, text
    (text,) = _bars(shared)  # one widget for the cell
    assert "(job 2 of this cell)" in text and "3/3" in text, text
