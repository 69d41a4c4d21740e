"""The package's shape: one-way imports, a cheap top-level import, optional extras.

- ``import dask_bacc`` and ``import dask_bacc.codes`` work with dask and distributed absent
  (a subprocess whose import system refuses them);
- ``import dask_bacc`` imports neither distributed nor the runtime, the benchmark
  harness, the testing tools or any package of an extra;
- no import cycle among dask_bacc's modules, and the layers import one way
  (docs/design.md, "Which layer may import which");
- a coded job runs with the ``[diagnostics]`` extra's packages (bokeh, prometheus_client)
  absent, and ``dask bacc bench`` names the ``[bench]`` extra when its packages are.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dask_bacc

PACKAGE = Path(dask_bacc.__file__).parent
ROOT = PACKAGE.parent

# makes the packages in BLOCKED absent, as if not installed: every finder is wrapped so that
# it finds no spec for them (importlib.util.find_spec returns None, import raises
# ModuleNotFoundError), which is what xarray's optional-dependency checks expect
BLOCKER = textwrap.dedent(
    """
    import sys

    class Absent:
        def __init__(self, finder):
            self.finder = finder

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                return None
            return self.finder.find_spec(name, path, target)

        def __getattr__(self, attr):
            return getattr(self.finder, attr)

    sys.meta_path[:] = [Absent(f) for f in sys.meta_path]
    for blocked in BLOCKED:
        try:
            __import__(blocked)
        except ModuleNotFoundError:
            pass
        else:
            raise SystemExit(f"the blocker failed to block {blocked}")
    """
)


def run_python(code: str, blocked: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    script = f"BLOCKED = {blocked!r}\n" + BLOCKER + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


# -- imports without dask ------------------------------------------------------------------
@pytest.mark.slow
def test_the_real_package_and_its_codes_import_without_dask():
    proc = run_python(
        """
        import numpy as np
        import dask_bacc
        import dask_bacc.codes as codes

        for name in codes.registered_codes():
            code = codes.get_code(name, 3, 3 if name == "uncoded" else 7)
            blocks = np.arange(6.0).reshape(3, 2)
            returned = list(range(code.N))
            assert np.allclose(code.decode(code.encode(blocks)[returned], returned), blocks)
        try:
            codes.get_code("fountain", 3, 7)
        except dask_bacc.UnknownCodeError:
            pass
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        assert not loaded, loaded
        try:
            dask_bacc.map_coded
        except ImportError as exc:  # the runtime needs distributed: said on first use
            assert exc.name in BLOCKED, exc
        else:
            raise SystemExit("map_coded imported without distributed")
        print("ok")
        """,
        blocked=("dask", "distributed"),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.slow
def test_top_level_import_is_lazy():
    proc = run_python(
        """
        import dask_bacc, dask

        assert dask.config.get("bacc.code") == "repetition"  # defaults registered
        heavy = ("distributed", "dask_bacc.runtime", "dask_bacc.collections",
                 "dask_bacc.diagnostics", "dask_bacc.bench", "dask_bacc.testing",
                 "matplotlib", "bokeh", "prometheus_client", "sklearn", "tqdm")
        loaded = [m for m in heavy if m in sys.modules]
        assert not loaded, loaded
        assert callable(dask_bacc.map_coded) and "distributed" in sys.modules
        assert "map_coded" in dir(dask_bacc)
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.slow
def test_the_worker_side_imports_neither_pandas_nor_xarray():
    """What a worker imports when the scheduler sends it dask-bacc's plugin (unpickled in
    its event loop: seconds of pandas and xarray on a loaded machine); the accessor is
    still there once xarray is imported, before or after dask_bacc."""
    proc = run_python(
        """
        import dask_bacc.runtime.worker
        loaded = [m for m in ("pandas", "xarray") if m in sys.modules]
        assert not loaded, loaded
        import xarray as xr
        assert xr.DataArray([1.0]).bacc is not None and hasattr(xr.Dataset(), "bacc")
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    proc = run_python(
        """
        import xarray as xr
        import dask_bacc
        assert hasattr(xr.DataArray([1.0]), "bacc")
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr


def test_the_accessor_survives_a_check_for_xarray_before_its_import():
    """The scheduler plugin asks ``importlib.util.find_spec("xarray")`` before importing
    it; with the scheduler in the client's process (a ``LocalCluster``) that check used up
    the import hook, and ``.bacc`` was never registered (the README's xarray block failed
    from a fresh clone). The hook now stays until xarray has been imported."""
    proc = run_python(
        """
        import importlib.util
        import dask_bacc
        assert "xarray" not in sys.modules
        assert importlib.util.find_spec("xarray") is not None
        assert importlib.util.find_spec("xarray") is not None  # asked twice
        import xarray as xr
        assert hasattr(xr.DataArray([1.0]), "bacc") and hasattr(xr.Dataset(), "bacc")
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_lazy_names_resolve_to_their_definitions():
    from dask_bacc.runtime import coded_data, driver, job, report, submit, wait, worker

    assert dask_bacc.map_coded is submit.map_coded
    assert dask_bacc.coded is driver.coded
    assert dask_bacc.CodedJob is job.CodedJob
    assert dask_bacc.JobReport is report.JobReport
    assert dask_bacc.until is wait.until
    assert dask_bacc.CodedData is coded_data.CodedData
    assert dask_bacc.cancelled is worker.cancelled
    for name in dask_bacc.__all__:
        assert getattr(dask_bacc, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        dask_bacc.nope  # noqa: B018
    with pytest.warns(FutureWarning, match="renamed dask_bacc.ErrorTarget"):
        assert dask_bacc.UntilError is dask_bacc.ErrorTarget


def test_unknown_code_is_a_typed_error():
    from dask_bacc.codes import get_code

    with pytest.raises(dask_bacc.UnknownCodeError, match="did you mean 'berrut'"):
        get_code("berut", 3, 7)
    assert issubclass(dask_bacc.UnknownCodeError, ValueError)  # 0.1 callers catch ValueError


# -- the import graph -----------------------------------------------------------------------
def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _toplevel_imports(tree: ast.Module):
    """Import statements run when the module is imported: module level, inside module-level
    ``try``/``if``/``with`` blocks, but not in functions, classes or ``if TYPE_CHECKING``."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            todo.extend(node.orelse if _is_type_checking(node.test) else node.body + node.orelse)
        elif isinstance(node, ast.Try):
            todo.extend(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                todo.extend(handler.body)
        elif isinstance(node, ast.With):
            todo.extend(node.body)


def _all_imports(tree: ast.Module):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def import_graph(modules_only: bool = True) -> dict[str, set[str]]:
    """dask_bacc module -> the dask_bacc modules importing it runs (their packages
    included: importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first; but
    not the module's own packages, whose import is already under way when it runs).

    ``modules_only``: only the imports that run at import time; else every import statement.
    """
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        nodes = _toplevel_imports(tree) if modules_only else _all_imports(tree)
        for node in nodes:
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                mod = node.module or ""
                base = ".".join(p for p in (base if node.level else "", mod) if p)
                found = [base] + [f"{base}.{a.name}" for a in node.names]
            for target in found:
                if target.split(".")[0] != "dask_bacc":
                    continue
                while target and target not in files:  # an attribute, not a module
                    target = target.rpartition(".")[0]
                parts = target.split(".")
                targets |= {".".join(parts[: i + 1]) for i in range(len(parts))}
        # the module's own packages: already being imported when it runs, not an edge
        parts = name.split(".")
        targets -= {".".join(parts[: i + 1]) for i in range(len(parts))}
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    graph = import_graph()
    assert "dask_bacc.runtime.job" in graph["dask_bacc.runtime.submit"]
    assert cycles(graph) == []


def test_no_cycle_among_the_runtime_modules_counting_every_import():
    """The runtime's modules as rooms (docs/design.md): no cycle even counting the imports
    inside functions and under ``TYPE_CHECKING`` (a job's collaborators see it through
    ``runtime.jobview``'s protocols)."""
    graph = import_graph(modules_only=False)
    prefix = "dask_bacc.runtime."
    runtime = {
        m: {t for t in targets if t.startswith(prefix)}
        for m, targets in graph.items()
        if m.startswith(prefix)
    }
    assert "dask_bacc.runtime.jobview" in runtime["dask_bacc.runtime.launch"]
    assert cycles(runtime) == []
    # negative control: the annotation import that made job <-> launch a cycle
    runtime["dask_bacc.runtime.launch"].add("dask_bacc.runtime.job")
    assert any("dask_bacc.runtime.launch" in c for c in cycles(runtime))


def test_the_cycle_check_finds_a_cycle():
    """Negative control: a made-up back edge from codes to runtime is a cycle."""
    graph = import_graph()
    graph["dask_bacc.codes.base"] = graph["dask_bacc.codes.base"] | {"dask_bacc.runtime.job"}
    assert any("dask_bacc.runtime.job" in c and "dask_bacc.codes.base" in c for c in cycles(graph))


#: modules every layer may import: the package root and what it imports itself
FOUNDATIONS = {"dask_bacc", "dask_bacc._lazy", "dask_bacc.exceptions", "dask_bacc.config"}
#: foundations a layer may not import: codes/ is pure NumPy, and config imports dask
BELOW_DASK = {"codes": {"dask_bacc.config"}}
#: layer -> the dask_bacc layers its modules may import (any import, even in a function)
ALLOWED = {
    "codes": set(),
    "collections": set(),
    "runtime": {"codes", "collections", "diagnostics"},
    "diagnostics": {"codes", "runtime.keys"},
    "accessor": {"runtime"},
}


def _layer_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def layer_problems(graph: dict[str, set[str]]) -> list[str]:
    """Imports against the layering: collections and diagnostics sit below runtime, codes
    below all three; the core never imports the benchmark harness or the testing tools."""
    problems = []
    for module, targets in graph.items():
        layer = _layer_of(module)
        for target in targets:
            target_layer = _layer_of(target)
            if target_layer == layer or target in FOUNDATIONS - BELOW_DASK.get(layer, set()):
                continue
            if layer in ALLOWED:
                # "runtime.keys" allows that module and its (lazy) package's __init__
                exact = {f"dask_bacc.{a}" for a in ALLOWED[layer]}
                exact |= {m.rpartition(".")[0] for m in exact if m.count(".") > 1}
                if target_layer not in ALLOWED[layer] and target not in exact:
                    problems.append(f"{module} imports {target}")
            elif layer not in ("bench", "testing", "stragglers", "cli") and target_layer in (
                "bench",
                "testing",
            ):
                problems.append(f"{module} imports {target}")
    return sorted(problems)


def test_layers_import_one_way():
    assert layer_problems(import_graph(modules_only=False)) == []


def test_the_layer_check_finds_back_edges():
    graph = import_graph(modules_only=False)
    graph["dask_bacc.codes.base"].add("dask_bacc.config")
    graph["dask_bacc.collections.numpy"].add("dask_bacc.runtime.job")
    graph["dask_bacc.runtime.job"].add("dask_bacc.testing")
    assert layer_problems(graph) == [
        "dask_bacc.codes.base imports dask_bacc.config",
        "dask_bacc.collections.numpy imports dask_bacc.runtime.job",
        "dask_bacc.runtime.job imports dask_bacc.testing",
    ]


# -- optional extras ------------------------------------------------------------------------
@pytest.mark.slow
def test_a_coded_job_runs_without_the_diagnostics_extra():
    proc = run_python(
        """
        import numpy as np
        from distributed import Client, LocalCluster

        import dask_bacc

        with LocalCluster(n_workers=4, threads_per_worker=1, processes=False,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            X = np.random.default_rng(0).standard_normal((8, 3))
            out = dask_bacc.map_coded(np.square, X, code="repetition", n_blocks=2)
            assert np.array_equal(out, X**2)
            stats = dask_bacc.diagnostics.get_stats(client)
            assert stats is not None and len(stats["jobs"]) == 1, stats
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        assert not loaded, loaded
        print("ok")
        """,
        blocked=("bokeh", "prometheus_client"),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_bench_names_its_extra_when_its_packages_are_missing(monkeypatch):
    from click.testing import CliRunner

    from dask_bacc import cli
    from dask_bacc.bench import cli as bench_cli

    assert bench_cli.missing_packages() == []  # the test environment has the [bench] extra
    monkeypatch.setattr(bench_cli, "BENCH_PACKAGES", ("matplotlib", "no_such_package_xyz"))
    assert bench_cli.missing_packages() == ["no_such_package_xyz"]
    result = CliRunner().invoke(cli.bacc, ["bench", "--jobs", "1"])
    assert result.exit_code == 1
    assert result.output.count("no_such_package_xyz") == 1
    assert "pip install 'dask-bacc[bench]'" in result.output
