"""The coded training and inference examples run end to end in their smoke modes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _load(name: str):
    """Import ``examples/<name>.py`` as a module registered under its name (the workers,
    in this process, unpickle its functions by reference)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_gradients_sum_over_blocks_to_the_full_gradient():
    """The per-block gradient is a sum over rows: the K block gradients add up to the
    gradient of all rows (what every strategy relies on), and it matches finite differences."""
    tr = _load("coded_training")
    train, _, _ = tr.load_data(4, seed=1)
    for model in tr.MODELS:
        init, grad, logits = tr.MODEL_FUNCS[model]
        w = init(0) + 0.01 * np.random.default_rng(0).standard_normal(init(0).shape)
        full = grad(train, w)
        parts = sum(grad(b, w) for b in np.split(train, 4))
        np.testing.assert_allclose(parts, full, rtol=1e-10, atol=1e-10)

        def loss(v, logits=logits):
            z = logits(v, train[:, : tr.N_FEATURES])
            z = z - z.max(axis=1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            return -np.sum(train[:, tr.N_FEATURES :] * logp)

        for i in np.random.default_rng(1).choice(w.size, 5, replace=False):
            e = np.zeros_like(w)
            e[i] = 1e-6
            fd = (loss(w + e) - loss(w - e)) / 2e-6
            assert fd == pytest.approx(full[i], rel=1e-4, abs=1e-6)


@pytest.mark.slow
def test_training_smoke_run(tmp_path):
    tr = _load("coded_training")
    assert tr.main(["--smoke", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "training.json").read_text())
    steps = tr.SMOKE.steps
    assert set(result["models"]) == set(tr.MODELS)
    for rec in result["models"].values():
        assert set(rec) == set(tr.STRATEGIES)
        for name, r in rec.items():
            assert len(r["time"]) == len(r["test_accuracy"]) == steps
            assert all(t > 0 for t in r["time"])
            assert r["cumulative_time"][-1] == pytest.approx(r["setup_time"] + sum(r["time"]))
            assert all(0.0 <= a <= 1.0 for a in r["test_accuracy"])
            assert all(np.isfinite(r["grad_rel_error"]))
            assert r["tasks"] == (tr.SMOKE.K if name in ("uncoded", "ignore-stragglers") else 4)
            for t, ttt in r["time_to_target"].items():
                steps_to = r["steps_to_target"][t]
                assert (ttt is None) == (steps_to is None)
                if ttt is not None:
                    assert ttt == r["cumulative_time"][steps_to - 1]
                    assert r["test_accuracy"][steps_to - 1] >= float(t)
                    assert all(a < float(t) for a in r["test_accuracy"][: steps_to - 1])
        # the exact strategies follow the same trajectory: exact gradients every step
        for name in ("uncoded", "repetition"):
            assert all(rec[name]["exact"])
            assert max(rec[name]["grad_rel_error"]) < 1e-10
            assert rec[name]["test_accuracy"] == pytest.approx(rec["uncoded"]["test_accuracy"])
        # Berrut is approximate, never exact
        assert not any(rec["berrut"]["exact"])
        assert 0 < min(rec["berrut"]["grad_rel_error"]) < 1
    # three steps of gradient descent on digits beat chance (10 classes) by far
    for name, r in result["models"]["logreg"].items():
        assert r["test_accuracy"][-1] > 0.5, name
    for model in tr.MODELS:
        png = tmp_path / f"training_{model}.png"
        assert png.stat().st_size > 10_000
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_inference_smoke_run(tmp_path, monkeypatch, capsys):
    """Also the default output folder: without --out, a new folder under the current
    directory (here tmp_path), never docs/iterative."""
    inf = _load("coded_inference")
    monkeypatch.chdir(tmp_path)
    assert inf.main(["--smoke"]) == 0
    (out,) = (tmp_path / "dask-bacc-output").iterdir()
    assert out.name.startswith("coded_inference-")
    assert str(Path("dask-bacc-output", out.name, "inference.json")) in capsys.readouterr().out
    tmp_path = out
    result = json.loads((tmp_path / "inference.json").read_text())
    K, N = inf.SMOKE.K, inf.SMOKE.N
    assert set(result["classifiers"]) == set(inf.CLASSIFIERS)
    for cname, rec in result["classifiers"].items():
        sw = rec["sweep"]
        assert sw["uncoded"] > 0.5, cname  # well above chance (0.1)
        assert set(sw["codes"]) == set(inf.CODES)
        for r in sw["codes"].values():
            assert r["stragglers"] == list(range(N - K + 1))
            for p in inf.PATTERNS:
                assert len(r[p]["mean"]) == N - K + 1
            # the worst set is no better than the worst adjacent run or the random mean
            assert all(
                w <= a + 1e-12 and w <= m + 1e-12
                for w, a, m in zip(
                    r["worst"]["min"], r["adjacent"]["min"], r["random"]["mean"], strict=True
                )
            )
        # exact codes give the uncoded answers when nothing straggles
        for code in ("repetition", "systematic-berrut"):
            assert sw["codes"][code]["random"]["mean"][0] == pytest.approx(sw["uncoded"])
        # repetition at N = 2K loses a block when both its copies straggle (2 stragglers)
        rep = sw["codes"]["repetition"]
        assert rep["answered_worst"][:2] == [1.0, 1.0] and rep["answered_worst"][2] < 1.0
        # Berrut always answers every query
        assert all(a == 1.0 for a in sw["codes"]["berrut"]["answered_worst"])
        # the cluster decodes what NumPy decodes from the same returned workers
        cl = rec["cluster"]
        assert set(cl) == {"uncoded", *inf.CODES}
        for code, r in cl.items():
            assert len(r["latency"]) == inf.SMOKE.rounds
            assert r["summary"]["max_abs_diff"] < 1e-8, code
            assert r["summary"]["accuracy_mean"] > 0.3, code
        assert cl["uncoded"]["accuracy"] == pytest.approx([sw["uncoded"]] * inf.SMOKE.rounds)
    for cname in inf.CLASSIFIERS:
        assert (tmp_path / f"inference_{cname}.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("name", ["coded_training", "coded_inference"])
def test_default_output_is_a_new_folder_under_the_working_directory(name, tmp_path, monkeypatch):
    """Scripts in examples/ write to --out, else to a fresh ./dask-bacc-output/<script>-<time>/
    (D9: they used to overwrite the tracked docs/iterative)."""
    mod = _load(name)
    monkeypatch.chdir(tmp_path)
    first, second = mod.output_dir(None), mod.output_dir(None)  # same second: still two
    assert first != second
    for path in (first, second):
        assert Path(path).is_dir() and not any(Path(path).iterdir())
        assert Path(path).resolve().parent == tmp_path / "dask-bacc-output"
        assert Path(path).name.startswith(f"{name}-")
    assert mod.output_dir(str(tmp_path / "given")) == str(tmp_path / "given")
    assert (tmp_path / "given").is_dir()


@pytest.mark.parametrize("name", ["getting_started", "coded_training"])
def test_notebooks_are_saved_without_outputs(name):
    """Tracked notebooks carry no outputs, execution counts or widget state (ci/notebooks.sh
    executes them in smoke mode, DASK_BACC_SMOKE=1, from copies)."""
    raw = (EXAMPLES / f"{name}.ipynb").read_text()
    nb = json.loads(raw)
    assert len(raw) < 50_000
    assert "widgets" not in nb["metadata"]
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    compile(code, f"{name}.ipynb", "exec")
    assert "DASK_BACC_SMOKE" in code


def test_notebook_is_valid_and_follows_the_script():
    nb = json.loads((EXAMPLES / "coded_training.ipynb").read_text())
    assert nb["nbformat"] == 4
    kinds = {c["cell_type"] for c in nb["cells"]}
    assert kinds == {"markdown", "code"}
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    compile(code, "coded_training.ipynb", "exec")  # every code cell is valid Python
    for needle in ("dask_bacc.encode", ".map(", 'combine="stack"', "load_digits"):
        assert needle in code, needle


@pytest.mark.slow
def test_parameter_sweep_smoke_run(capsys):
    """The pricer sweep: plain, hedged (exact) and systematic spline, with the error at the
    sweep's scale (hedged is exact: its error is zero)."""
    ps = _load("parameter_sweep")
    results = ps.run(K=4, N=6, rows=16, paths=300, p=0.3, delay=0.1, rounds=1)
    assert set(results) == set(ps.STRATEGIES)
    for name in ("plain", "hedged"):
        assert results[name][0]["error"]["max_abs"] == 0.0
    spline = results["systematic-spline"][0]
    assert spline["error"]["median_price"] > 1.0
    assert spline["error"]["rel"] < 0.05  # a few stragglers interpolated at most
    assert ps.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    for name in ps.STRATEGIES:
        assert name in out
    assert "median price" in out


@pytest.mark.slow
def test_smooth_field_smoke_run(capsys):
    sf = _load("smooth_field")
    r = sf.run(24, 8, 8, K=4, N=6, code="spline", noise=0.0)
    assert r["same_coords"]
    # K=4 chunks over one cycle is coarse for the spline: measured 0.03
    assert 0 < r["rel"] < 0.1 and r["error_estimate"] is not None
    assert sf.main(["--smoke"]) == 0
    assert "degrees" in capsys.readouterr().out
