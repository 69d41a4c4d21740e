"""``dask bacc bench``: the benchmark harness on the command line."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .harness import (
    DEFAULT_STRATEGIES,
    STRAGGLER_KINDS,
    STRATEGIES,
    TASK_FUNCS,
    BenchConfig,
    StragglerSpec,
    TaskModel,
)

__all__ = ["bench"]


#: packages of the ``[bench]`` extra that ``dask bacc bench`` needs (plots, workloads)
BENCH_PACKAGES = ("matplotlib", "sklearn")


def missing_packages() -> list[str]:
    """The packages of :data:`BENCH_PACKAGES` not installed here."""
    from importlib.util import find_spec

    return [name for name in BENCH_PACKAGES if find_spec(name) is None]


def _ints(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[int, ...]:
    """``--K 8 --K 16`` or ``--K 8,16`` -> (8, 16)."""
    out: list[int] = []
    for value in values:
        for part in str(value).split(","):
            part = part.strip()
            if not part:
                continue
            try:
                n = int(part)
            except ValueError:
                raise click.BadParameter(f"{part!r} is not an integer") from None
            if n < 1:
                raise click.BadParameter(f"must be >= 1, got {n}")
            out.append(n)
    if not out:
        raise click.BadParameter("give at least one value")
    return tuple(out)


def _strategies(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[str, ...] | None:
    if value is None or value.strip().lower() in ("", "auto", "all"):
        return None
    names = tuple(s.strip().lower().replace("_", "-") for s in value.split(",") if s.strip())
    unknown = [s for s in names if s not in STRATEGIES]
    if unknown:
        raise click.BadParameter(
            f"unknown strateg{'y' if len(unknown) == 1 else 'ies'} "
            f"{', '.join(map(repr, unknown))}; choose from {', '.join(STRATEGIES)}"
        )
    return names


def _wait(ctx: click.Context, param: click.Parameter, value: str | None) -> int | float | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        pass
    try:
        x = float(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither a count of results nor a fraction in (0, 1]"
        ) from None
    if not 0 < x <= 1:
        raise click.BadParameter(f"a fraction must lie in (0, 1], got {x}")
    return x


@click.command(name="bench", context_settings={"show_default": True})
@click.option(
    "--scheduler",
    metavar="ADDRESS",
    default=None,
    help="Connect to this scheduler instead of starting an embedded LocalCluster.",
)
@click.option(
    "--workers",
    type=int,
    default=32,
    help="Workers of the embedded cluster (1 thread each).",
)
@click.option(
    "--processes/--threads",
    default=False,
    help="Embedded workers in their own processes, or as threads of this process.",
)
@click.option(
    "-K",
    "--K",
    "K",
    multiple=True,
    metavar="K[,K...]",
    default=("16",),
    callback=_ints,
    help="Data blocks; repeat or comma-separate for a grid.",
)
@click.option(
    "-N",
    "--N",
    "N",
    multiple=True,
    metavar="N[,N...]",
    default=("32",),
    callback=_ints,
    help="Coded tasks; repeat or comma-separate for a grid (cells need K < N <= workers).",
)
@click.option(
    "--strategies",
    metavar="NAME[,NAME...]",
    default=None,
    callback=_strategies,
    help=f"Comma list from {', '.join(STRATEGIES)} [default: "
    f"{', '.join(s for s in DEFAULT_STRATEGIES if s != 'lagrange')}, and lagrange with a "
    "polynomial --func].",
    show_default=False,
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=30,
    help="Jobs per strategy, cell and condition.",
)
@click.option(
    "--base-duration",
    type=click.FloatRange(min=0),
    default=0.2,
    help="Seconds every task sleeps (task model).",
)
@click.option(
    "--work",
    type=click.IntRange(min=1),
    default=128,
    help="Hidden units of the NumPy matmul per block (task model).",
)
@click.option(
    "--output-size", type=click.IntRange(min=1), default=16, help="Output columns per row."
)
@click.option("--rows", type=click.IntRange(min=1), default=64, help="Rows per block.")
@click.option(
    "--func",
    type=click.Choice(list(TASK_FUNCS)),
    default="mlp",
    help="Task function: mlp (tanh, any f), square (degree 2) or linear (degree 1).",
)
@click.option(
    "--straggler",
    type=click.Choice(list(STRAGGLER_KINDS)),
    default="bimodal",
    help="Straggler model.",
)
@click.option(
    "--p",
    type=click.FloatRange(0, 1),
    default=0.1,
    help="bimodal: probability that a task straggles.",
)
@click.option(
    "--factor",
    type=click.FloatRange(min=1),
    default=10.0,
    help="bimodal/slow-workers: a straggler takes factor x its time.",
)
@click.option(
    "--delay",
    type=click.FloatRange(min=0),
    default=0.0,
    help="bimodal/slow-workers: extra seconds on top of the factor.",
)
@click.option(
    "--scale",
    type=click.FloatRange(min=0),
    default=None,
    help="shifted-exp: mean of the exponential delay [default: --base-duration].",
)
@click.option("--shift", type=click.FloatRange(min=0), default=0.0, help="shifted-exp: shift.")
@click.option(
    "--slow-workers",
    type=click.IntRange(min=1),
    default=3,
    help="slow-workers: how many workers are slow (a seeded choice).",
)
@click.option(
    "--kills",
    type=click.IntRange(min=1),
    default=1,
    help="kills: workers killed (and replaced) per job.",
)
@click.option(
    "--wait",
    metavar="COUNT|FRACTION",
    default=None,
    callback=_wait,
    help="Berrut strategies: decode after this many results (int) or fraction of N "
    "[default: bacc.wait.berrut, 0.75].",
)
@click.option(
    "--speculative-rule",
    type=click.Choice(["spark", "cubed"]),
    default=None,
    help="Rule of the speculative strategy [default: bacc.speculative.rule].",
)
@click.option("--seed", type=int, default=0, help="Seed of data, stragglers, kills and order.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bacc-bench"),
    help="Directory for bench.json, bench.md and the PNG figures.",
)
@click.option(
    "--baseline/--no-baseline",
    default=True,
    help="Also run every strategy without stragglers (for the no-straggler ratios).",
)
@click.option(
    "--job-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=120.0,
    help="Seconds before a job counts as failed.",
)
@click.option("--progress/--no-progress", default=True, help="Progress bar on stderr.")
@click.option(
    "--accuracy",
    is_flag=True,
    help="Run the accuracy benchmark instead (pure NumPy, no cluster): every code's decoded "
    "error and the calibration of the error estimate, K in -K (if given, else 4,8,16,32), "
    "N/K in 1.25,1.5,2,4, six workloads; writes accuracy.json/.md and PNGs into --out.",
)
@click.option(
    "--full",
    is_flag=True,
    help="--accuracy: every straggler count S in 0..N-K, 10 trials a cell (default: S = 0, "
    "1 and the quarters of N-K, 6 trials).",
)
@click.option(
    "--compare",
    is_flag=True,
    help="--accuracy: the code comparison instead (Berrut, spline, their systematic variants "
    "and repetition, with and without the log transforms; K=8, N=16,32, s=1,2,4,7, 50 "
    "straggler sets a cell; digits and tanh tasks; convergence in N); writes "
    "compare.json/.md and PNGs into --out.",
)
@click.pass_context
def bench(
    ctx: click.Context,
    scheduler: str | None,
    workers: int,
    processes: bool,
    K: tuple[int, ...],
    N: tuple[int, ...],
    strategies: tuple[str, ...] | None,
    jobs: int,
    base_duration: float,
    work: int,
    output_size: int,
    rows: int,
    func: str,
    straggler: str,
    p: float,
    factor: float,
    delay: float,
    scale: float | None,
    shift: float,
    slow_workers: int,
    kills: int,
    wait: int | float | None,
    speculative_rule: str | None,
    seed: int,
    out: Path,
    baseline: bool,
    job_timeout: float,
    progress: bool,
    accuracy: bool,
    full: bool,
    compare: bool,
) -> None:
    """Benchmark coded computing against plain Dask, speculation and the other codes.

    Runs JOBS jobs of every strategy in every (K, N) cell with injected stragglers (and
    as many without), interleaved in a seeded order, on an embedded LocalCluster or the
    cluster at --scheduler. Prints a markdown table (latency p50/p90/p99, ratios to
    uncoded and to the strategy's own no-straggler runs, relative error, compute spent)
    and writes bench.json, bench.md and PNG figures (latency CDF, error vs stragglers)
    into --out.

    The defaults are the reference bench: K=16, N=32, 32 in-process workers, base task
    0.2 s, each task 10x slower with probability 0.1, 30 jobs.
    """
    missing = missing_packages()
    if missing:
        raise click.ClickException(
            f"`dask bacc bench` needs {', '.join(missing)}, which the [bench] extra "
            "installs: pip install 'dask-bacc[bench]'"
        )
    if compare:
        return _compare(seed, out, progress)
    if accuracy:
        given = ctx.get_parameter_source("K") is not click.core.ParameterSource.DEFAULT
        return _accuracy(K if given else None, full, seed, out, progress)
    from .harness import run_bench
    from .report import markdown_report, write_outputs

    config = BenchConfig(
        K=K,
        N=N,
        strategies=strategies,
        jobs=jobs,
        workers=workers,
        processes=processes,
        scheduler=scheduler,
        task=TaskModel(
            func=func, base_duration=base_duration, work=work, output_size=output_size, rows=rows
        ),
        stragglers=StragglerSpec(
            kind=straggler,
            p=p,
            factor=factor,
            delay=delay,
            scale=scale,
            shift=shift,
            slow_workers=slow_workers,
            kills=kills,
        ),
        wait=wait,
        speculative_rule=speculative_rule,
        baseline=baseline,
        seed=seed,
        job_timeout=job_timeout,
    )
    try:
        config.plan()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        result = run_bench(config, progress=progress)
    except ValueError as exc:  # found once connected, e.g. too few workers at --scheduler
        raise click.ClickException(str(exc)) from None
    click.echo(markdown_report(result), nl=False)
    paths = write_outputs(result, out)
    files = [paths["json"], paths["markdown"], *paths["plots"]]
    click.echo("wrote " + ", ".join(str(f) for f in files), err=True)
    if result.skipped:
        for name, why in result.skipped.items():
            click.echo(f"note: {name} skipped: {why}", err=True)
    sys.stdout.flush()


def _accuracy(K: tuple[int, ...] | None, full: bool, seed: int, out: Path, progress: bool) -> None:
    """``dask bacc bench --accuracy``: see :mod:`dask_bacc.bench.accuracy`."""
    from .accuracy import DEFAULT_K, AccuracyConfig, accuracy_markdown, run_accuracy, write_accuracy

    config = AccuracyConfig(K=K or DEFAULT_K, trials=10 if full else 6, full=full, seed=seed)
    result = run_accuracy(config, progress=progress)
    click.echo(accuracy_markdown(result, cells_table=False), nl=False)
    paths = write_accuracy(result, out)
    files = [paths["json"], paths["markdown"], *paths["plots"]]
    click.echo("wrote " + ", ".join(str(f) for f in files), err=True)
    for name, why in config.skipped.items():
        click.echo(f"note: {name} skipped: {why}", err=True)


def _compare(seed: int, out: Path, progress: bool) -> None:
    """``dask bacc bench --accuracy --compare``: see :func:`.accuracy.run_compare`."""
    from .accuracy import CompareConfig, compare_markdown, run_compare, write_compare

    config = CompareConfig(seed=seed)
    result = run_compare(config, progress=progress)
    click.echo(compare_markdown(result), nl=False)
    paths = write_compare(result, out)
    files = [paths["json"], paths["markdown"], *paths["plots"]]
    click.echo("wrote " + ", ".join(str(f) for f in files), err=True)
    for name, why in config.skipped.items():
        click.echo(f"note: {name} skipped: {why}", err=True)
