"""Settings come from dask.config under bacc:, read at call time."""

from __future__ import annotations

import os
import subprocess
import sys

import dask
import numpy as np
import pytest
from cluster_helpers import gen_cluster

import dask_bacc
from dask_bacc import config


def test_defaults_registered():
    assert dask.config.get("bacc.code") == "repetition"
    assert dask.config.get("bacc.redundancy") == 2.0
    assert dask.config.get("bacc.wait.berrut") == 0.75
    assert dask.config.get("bacc.wait.spline") == 0.75
    assert dask.config.get("bacc.warn-error") == 0.1
    assert dask.config.get("bacc.oversubscribe") == "raise"


def test_defaults_come_back_after_a_reset():
    with dask.config.set({"bacc": {}}):
        dask.config.config.pop("bacc", None)
        assert config.get("redundancy") == 2.0


@pytest.mark.slow
def test_environment_variable_overrides():
    env = dict(os.environ, DASK_BACC__REDUNDANCY="3.5", DASK_BACC__WAIT__BERRUT="0.5")
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import dask_bacc, dask; print(dask.config.get('bacc.redundancy'), "
            "dask.config.get('bacc.wait.berrut'))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["3.5", "0.5"]


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 8)
async def test_config_read_at_call_time(c, s, *workers):
    X = np.random.default_rng(0).standard_normal((12, 2))
    job = await dask_bacc.submit_coded(np.tanh, X, n_blocks=3, client=c)
    await job
    assert job.report.code["name"] == "repetition"  # the default
    with dask.config.set({"bacc.code": "systematic-spline"}):
        job = await dask_bacc.submit_coded(np.tanh, X, n_blocks=3, client=c)
        await job
    assert (job.report.K, job.report.N, job.report.wait_target) == (3, 6, 5)  # ceil(0.75*6)
    assert job.report.code == {
        "name": "spline",
        "K": 3,
        "N": 6,
        "smoothing": 0.0,
        "systematic": True,
    }
    spline = {"bacc.code": "systematic-spline"}
    with dask.config.set({**spline, "bacc.redundancy": 1.5, "bacc.wait.spline": 1.0}):
        job = await dask_bacc.submit_coded(np.tanh, X, n_blocks=3, client=c)
        await job
    assert (job.report.N, job.report.wait_target) == (5, 5)  # ceil(1.5*3) = 5
    with dask.config.set({"bacc.code": "repetition"}):
        job = await dask_bacc.submit_coded(np.tanh, X, n_blocks=3, client=c)
        out = await job
    assert job.report.code["name"] == "repetition"
    np.testing.assert_array_equal(out, np.tanh(X))
    # N is capped by the workers: 4 blocks at redundancy 2 would want 8 -> 8 workers; 5 -> 8
    job = await dask_bacc.submit_coded(np.tanh, np.ones((5, 1)), n_blocks=5, client=c)
    await job
    assert job.report.N == 8


def _yaml_keys() -> set[str]:
    """Every dotted key of bacc.yaml, sections and leaves."""
    import yaml

    def walk(tree: dict, prefix: str) -> set[str]:
        out = set()
        for k, v in tree.items():
            out.add(prefix + k)
            if isinstance(v, dict):
                out |= walk(v, f"{prefix}{k}.")
        return out

    with open(os.path.join(os.path.dirname(config.__file__), "bacc.yaml")) as f:
        return walk(yaml.safe_load(f)["bacc"], "")


def _package_strings() -> tuple[list[tuple[str, str, int]], set[str]]:
    """The keys of ``config.get``/``config.seconds`` calls in dask_bacc (with where), and
    every string constant of the package."""
    import ast
    import pathlib

    reads, strings = [], set()
    for path in pathlib.Path(dask_bacc.__file__).parent.rglob("*.py"):
        # codes/ never reads dask.config (its ``config`` names are a code's own dicts)
        settings = path.parent.name != "codes"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.add(node.value)
            if (
                settings
                and isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "seconds")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "config"
                and node.args
            ):
                arg = node.args[0]
                assert len(node.args) == 1 and not node.keywords, (
                    f"{path}:{node.lineno}: config.{node.func.attr}(...) with a "
                    "fallback: defaults live in bacc.yaml only"
                )
                if isinstance(arg, ast.Constant):  # else a name bound to literal keys
                    reads.append((arg.value, str(path), node.lineno))
    return reads, strings


def test_every_setting_read_has_its_default_in_the_yaml():
    reads, _ = _package_strings()
    keys = _yaml_keys()
    assert reads
    missing = [(key, f"{p}:{n}") for key, p, n in reads if key not in keys]
    assert not missing


def test_no_dead_settings():
    """Each leaf of bacc.yaml is read by name somewhere in the package (``wait.<code>``
    by the code's name, in runtime/wait.py)."""
    from dask_bacc.codes import registered_codes

    reads, strings = _package_strings()
    read = {key for key, _, _ in reads} | strings
    leaves = {k for k in _yaml_keys() if not isinstance(config.get(k), dict)}
    dead = sorted(
        k
        for k in leaves
        if k not in read and not (k.startswith("wait.") and k[5:] in registered_codes())
    )
    assert not dead


def test_tau_default_is_the_codes_default():
    """``accuracy.tau: null`` means the codes' DEFAULT_TAU (one definition); a set value wins."""
    from dask_bacc.codes import BerrutCode
    from dask_bacc.codes.robust import DEFAULT_TAU
    from dask_bacc.runtime.quality import JobQuality

    class Job:  # what JobQuality reads of a CodedJob
        code, transform, policy, token = BerrutCode(3, 6), None, None, "ab" * 16

    job = Job()
    assert config.get("accuracy.tau") is None
    assert JobQuality(job).tau == DEFAULT_TAU
    with dask.config.set({"bacc.accuracy.tau": 2.5}):
        assert JobQuality(job).tau == 2.5


def test_unknown_setting_is_a_key_error():
    with pytest.raises(KeyError):
        config.get("no-such-setting")
