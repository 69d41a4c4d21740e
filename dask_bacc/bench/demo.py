"""``dask bacc demo``: dask-bacc against plain Dask when 10% of the tasks straggle.

Run it with::

    dask bacc demo                       # 10 workers, K=5 blocks, N=10 coded tasks, ~10-20 s
    dask bacc demo --rounds 10 --straggler-delay 1
    dask bacc demo --help

It starts an embedded ``LocalCluster`` (no outside services), makes every task straggle
with probability 10% (``Bimodal(p=0.1, delay=...)``), and maps a small two-layer MLP
forward pass (fixed random weights, passed as ``*args``) over a NumPy array split into K
row blocks: with plain Dask and with each code of ``--codes`` (default :data:`CODED`):

- ``plain``: ``client.map(func, blocks)`` + ``client.gather``: uncoded Dask, waits for
  every block;
- ``systematic-spline``: ``dask_bacc.submit_coded(..., code="systematic-spline")`` then
  ``job.result()`` (what ``map_coded`` does): N coded tasks, the K blocks themselves among
  them, decodes from the first 75% of them and cancels the rest (exact for each block whose
  own task returned, approximate for the others);
- ``berrut``: Berrut interpolation, decoding from the first 75% of the N tasks
  (approximate);
- ``systematic-berrut``: Berrut with the K blocks themselves among the worker inputs;
- ``repetition`` (the default code): every block computed N/K times, exact once a copy of
  each returned.

``--codes`` takes any code of the registry (:func:`dask_bacc.codes.registered_codes` and
the ``systematic-`` aliases) but ``lagrange``, which needs a polynomial ``f``
(:data:`DEMO_CODES`); ``uncoded`` runs K pinned tasks.

How the plain baseline meets the same stragglers
------------------------------------------------
The straggler plugin only delays dask-bacc's own eval tasks, so the plain tasks run
through :func:`dask_bacc.testing.plain_task`, a wrapper that asks the same worker plugin
for a delay after ``func`` returns and sleeps for it. The draw for a task depends only on
``(seed, seq, index)``; plain jobs use their own ``seq`` numbers (from
:data:`dask_bacc.testing.PLAIN_SEQ_BASE` on), disjoint from dask-bacc's per-process job
counter, so every task of every strategy straggles independently with the same probability
and the same delay. A plain task cannot be cancelled, so its delay is a plain ``sleep``; a dask-bacc
straggler's delay ends early once its job has decoded.
"""

from __future__ import annotations

import itertools
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import click
import numpy as np
from distributed import Client, LocalCluster

from ..codes.registry import ALIASES, registered_codes
from ..exceptions import ApproximationWarning
from ..runtime import submit_coded
from ..testing.stragglers import (
    PLAIN_SEQ_BASE,
    Bimodal,
    clear_stragglers,
    draw_delay,
    inject_stragglers,
    plain_task,
)

__all__ = [
    "CODED",
    "DEMO_CODES",
    "DemoSettings",
    "StrategyStats",
    "demo",
    "format_table",
    "mlp",
    "mlp_workload",
    "run_demo",
]

#: The codes the demo compares with plain Dask by default, in table order.
CODED = ("systematic-spline", "berrut", "systematic-berrut", "repetition")
#: Codes of the registry the demo leaves out, and why.
EXCLUDED = {"lagrange": "needs a polynomial f; the demo's f is an MLP"}
#: Every code ``--codes`` accepts: the registry's codes and aliases but :data:`EXCLUDED`.
DEMO_CODES: tuple[str, ...] = tuple(
    name for name in (*registered_codes(), *ALIASES) if name not in EXCLUDED
)


def mlp(
    x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray
) -> np.ndarray:
    """A two-layer perceptron forward pass, row by row: ``tanh(x W1 + b1) W2 + b2``.

    Parameters
    ----------
    x : numpy.ndarray
        Input rows, shape ``(rows, d_in)``.
    w1, b1, w2, b2 : numpy.ndarray
        Weights ``(d_in, d_hidden)``, ``(d_hidden,)``, ``(d_hidden, d_out)``, ``(d_out,)``.

    Returns
    -------
    numpy.ndarray
        Predictions, shape ``(rows, d_out)``.
    """
    return np.tanh(x @ w1 + b1) @ w2 + b2


@dataclass(frozen=True)
class DemoSettings:
    """What the demo runs; :meth:`check` validates it.

    Parameters
    ----------
    workers : int
        Workers of the ``LocalCluster``, one thread each.
    blocks : int
        K, the data blocks.
    coded : int or None
        N, the coded tasks; ``None`` means ``min(2K, workers)``.
    rows : int
        Rows of the input array (divisible by K).
    rounds : int
        Jobs per strategy.
    p : float
        Probability that a task straggles.
    straggler_delay : float
        Seconds a straggling task waits after ``func`` returned.
    seed : int
        Seed of the data, the weights and the straggler draws.
    processes : bool
        One process per worker instead of threads.
    codes : tuple of str
        The codes to compare with plain Dask, from :data:`DEMO_CODES`, in table order.
    """

    workers: int = 10
    blocks: int = 5
    coded: int | None = None
    rows: int = 6000
    rounds: int = 5
    p: float = 0.1
    straggler_delay: float = 2.0
    seed: int = 0
    processes: bool = False
    codes: tuple[str, ...] = CODED

    @property
    def n_coded(self) -> int:
        """N: ``coded`` if given, else ``min(2K, workers)``."""
        return self.coded if self.coded is not None else min(2 * self.blocks, self.workers)

    def check(self) -> None:
        """Raise ``ValueError`` with a message naming the option at fault."""
        K, N, W = self.blocks, self.n_coded, self.workers
        if K < 1:
            raise ValueError(f"--blocks must be >= 1, got {K}")
        if W < 1:
            raise ValueError(f"--workers must be >= 1, got {W}")
        if self.coded is None and W <= K:
            raise ValueError(
                f"--workers {W} leaves no room for coded tasks: K={K} blocks need at least "
                f"{K + 1} workers (one per coded task, N > K)"
            )
        if N <= K:
            raise ValueError(
                f"--coded must be greater than --blocks (coded computing adds redundancy): "
                f"got N={N}, K={K}"
            )
        if N > W:
            raise ValueError(
                f"--coded {N} needs {N} workers, one per coded task, but --workers is {W}"
            )
        if self.rows < K or self.rows % K:
            raise ValueError(f"--rows {self.rows} is not a positive multiple of --blocks {K}")
        if self.rounds < 1:
            raise ValueError(f"--rounds must be >= 1, got {self.rounds}")
        if not 0 <= self.p <= 1:
            raise ValueError(f"--p must lie in [0, 1], got {self.p}")
        if not np.isfinite(self.straggler_delay) or self.straggler_delay < 0:
            raise ValueError(f"--straggler-delay must be >= 0 seconds, got {self.straggler_delay}")
        if not self.codes:
            raise ValueError("--codes: give at least one code")
        for code in self.codes:
            if code in EXCLUDED:
                raise ValueError(f"--codes: the demo cannot run {code!r}: {EXCLUDED[code]}")
            if code not in DEMO_CODES:
                raise ValueError(
                    f"--codes: unknown code {code!r}; choose from {', '.join(DEMO_CODES)}"
                )


@dataclass
class StrategyStats:
    """Per-job figures of one strategy over the rounds.

    Attributes
    ----------
    tasks : int
        Tasks per job (K for plain, N for coded).
    time : list of float
        Seconds from submission to the output in hand, per job.
    drawn : list of int
        Tasks per job that drew a straggler delay.
    stragglers_cancelled : list of int
        Of those, tasks dask-bacc cancelled instead of waiting for (0 for plain).
    cancelled : list of int
        All coded tasks cancelled when the job decoded (stragglers and slow non-stragglers).
    error : list of float
        Relative error ``||out - f(X)||_F / ||f(X)||_F`` per job.
    """

    tasks: int
    time: list[float] = field(default_factory=list)
    drawn: list[int] = field(default_factory=list)
    stragglers_cancelled: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    error: list[float] = field(default_factory=list)

    @property
    def mean_time(self) -> float:
        """Mean time to answer over the rounds, seconds."""
        return statistics.fmean(self.time)


def mlp_workload(rows: int, seed: int) -> tuple[np.ndarray, tuple[np.ndarray, ...], np.ndarray]:
    """The demo's data and model: ``X`` (rows, 32), MLP weights (32-128-16), ``mlp(X)``.

    Parameters
    ----------
    rows : int
        Rows of ``X`` (i.i.d. standard normal).
    seed : int
        Seed of the data and the weights.
    """
    rng = np.random.default_rng(seed)
    d_in, d_hidden, d_out = 32, 128, 16
    X = rng.standard_normal((rows, d_in))
    params = (
        rng.standard_normal((d_in, d_hidden)) / np.sqrt(d_in),
        0.1 * rng.standard_normal(d_hidden),
        rng.standard_normal((d_hidden, d_out)) / np.sqrt(d_hidden),
        0.1 * rng.standard_normal(d_out),
    )
    return X, params, mlp(X, *params)


def run_demo(
    settings: DemoSettings, echo: Callable[[str], None] | None = None
) -> dict[str, StrategyStats]:
    """Run the comparison on a fresh embedded ``LocalCluster``.

    Parameters
    ----------
    settings : DemoSettings
        What to run (validated with :meth:`DemoSettings.check` first).
    echo : callable, optional
        Called with one progress line per round.

    Returns
    -------
    dict of str to StrategyStats
        ``"plain"`` and every code of ``settings.codes``, in table order.
    """
    settings.check()
    s = settings
    K, N = s.blocks, s.n_coded
    X, params, exact = mlp_workload(s.rows, s.seed)
    blocks = np.split(X, K)
    model = Bimodal(p=s.p, delay=s.straggler_delay)

    def drawn(seq: int, n: int) -> set[int]:
        # the same draw the worker plugin makes (Bimodal's ignores worker and runtime)
        return {i for i in range(n) if draw_delay(model, s.seed, seq, i) > 0}

    def rel_err(out: np.ndarray) -> float:
        return float(np.linalg.norm(out - exact) / np.linalg.norm(exact))

    codes = tuple(dict.fromkeys(s.codes))
    stats = {
        name: StrategyStats(tasks=K if name in ("plain", "uncoded") else N)
        for name in ("plain", *codes)
    }
    with (
        LocalCluster(
            n_workers=s.workers,
            threads_per_worker=1,
            processes=s.processes,
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,
    ):
        plain_seq = itertools.count(PLAIN_SEQ_BASE)

        def plain(seq: int) -> np.ndarray:
            futures = client.map(
                plain_task,
                blocks,
                [seq] * K,
                range(K),
                [mlp] * K,
                *[[w] * K for w in params],
                pure=False,  # a fresh computation every round, never a cached result
            )
            return np.concatenate(client.gather(futures), axis=0)

        def coded(code: str):
            n_coded = None if code == "uncoded" else N  # uncoded: N = K tasks
            job = submit_coded(
                mlp, X, *params, code=code, n_coded=n_coded, n_blocks=K, client=client
            )
            with warnings.catch_warnings():  # the demo prints each code's error itself
                warnings.simplefilter("ignore", ApproximationWarning)
                return job.result(), job

        # warm up (imports, connections, first serialisations) before any straggler
        plain(next(plain_seq))
        for code in codes:
            coded(code)
        inject_stragglers(model, seed=s.seed, client=client)

        for r in range(s.rounds):
            seq = next(plain_seq)
            t0 = time.perf_counter()
            out = plain(seq)
            st = stats["plain"]
            st.time.append(time.perf_counter() - t0)
            st.drawn.append(len(drawn(seq, K)))
            st.stragglers_cancelled.append(0)
            st.cancelled.append(0)
            st.error.append(rel_err(out))
            for code in codes:
                t0 = time.perf_counter()
                out, job = coded(code)
                st = stats[code]
                st.time.append(time.perf_counter() - t0)
                hit = drawn(job.seq, st.tasks)
                st.drawn.append(len(hit))
                st.stragglers_cancelled.append(len(hit & set(job.report.straggled)))
                st.cancelled.append(job.report.cancelled)
                st.error.append(rel_err(out))
            if echo is not None:
                echo(
                    f"round {r + 1}/{s.rounds}: "
                    + ", ".join(f"{name} {st.time[-1]:.2f}s" for name, st in stats.items())
                )
        clear_stragglers(client)
    return stats


def format_table(stats: dict[str, StrategyStats]) -> str:
    """The demo's result as a Markdown table (one row per strategy).

    Parameters
    ----------
    stats : dict of str to StrategyStats
        What :func:`run_demo` returned; must contain ``"plain"``.

    Returns
    -------
    str
        Header, separator and one row per strategy.
    """
    plain_mean = stats["plain"].mean_time
    header = (
        "| strategy | tasks | time to answer, mean (s) | worst (s) | speed-up vs plain "
        "| stragglers drawn | stragglers cancelled | decoded error (median) |"
    )
    lines = [header, "|---|" + "--:|" * header.count(" | ")]
    for name, st in stats.items():
        lines.append(
            f"| {name} | {st.tasks} | {st.mean_time:.3f} | {max(st.time):.3f} "
            f"| {plain_mean / st.mean_time:.1f}x | {sum(st.drawn)} "
            f"| {sum(st.stragglers_cancelled)} | {statistics.median(st.error):.2e} |"
        )
    return "\n".join(lines)


_NOTES = (
    "Summed over rounds: 'stragglers drawn' = tasks that drew a delay; 'stragglers "
    "cancelled' = of those, tasks the coded job\ndid not wait for (cancelled when it "
    "decoded; their delay ends early). Plain Dask cannot cancel: it waits for every\n"
    "straggler. Decoded error = ||out - f(X)||_F / ||f(X)||_F of the output.\n"
    "Spline and Berrut coded computing are APPROXIMATE, even for a linear f: the decoded "
    "blocks are interpolants of f at\nthe data points, not f(X_j). Their error depends on "
    "f, the data and which results arrive first, and shrinks as N\ngrows and as fewer "
    "tasks straggle. Plain Dask and repetition (the default code) are exact; the systematic\n"
    "codes (systematic spline, systematic Berrut) are exact for each block whose own task is "
    "among the results decoded from."
)


def _codes(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    """``--codes berrut,spline`` -> ("berrut", "spline"), checked against :data:`DEMO_CODES`."""
    names = tuple(
        dict.fromkeys(c.strip().lower().replace("_", "-") for c in value.split(",") if c.strip())
    )
    if not names:
        raise click.BadParameter("give at least one code")
    for name in names:
        if name in EXCLUDED:
            raise click.BadParameter(f"the demo cannot run {name!r}: {EXCLUDED[name]}")
        if name not in DEMO_CODES:
            raise click.BadParameter(f"unknown code {name!r}; choose from {', '.join(DEMO_CODES)}")
    return names


def _help() -> str:
    """The demo's ``--help`` text, naming the codes it runs (from :data:`CODED`)."""
    return (
        "Plain Dask against coded computing with injected stragglers.\n\n"
        "Starts an embedded LocalCluster (no other service), makes each task straggle with "
        "probability --p, and maps a two-layer MLP forward pass over K row blocks of a random "
        "array with plain Dask (client.map + gather), and with dask-bacc's "
        f"{', '.join(CODED[:-1])} and {CODED[-1]} codes (--codes) at N coded tasks. Prints "
        "the time to answer, the speed-up over plain Dask, the stragglers cancelled and the "
        "decoded error."
    )


@click.command(name="demo", help=_help())
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Workers of the embedded LocalCluster, 1 thread each.",
)
@click.option(
    "--blocks", type=click.IntRange(min=1), default=5, show_default=True, help="K, the data blocks."
)
@click.option(
    "--coded",
    type=click.IntRange(min=1),
    default=None,
    help="N, the coded tasks, K < N <= workers.  [default: min(2K, workers)]",
)
@click.option(
    "--rows",
    type=click.IntRange(min=1),
    default=6000,
    show_default=True,
    help="Rows of the input array (a multiple of K).",
)
@click.option(
    "--rounds", type=click.IntRange(min=1), default=5, show_default=True, help="Jobs per strategy."
)
@click.option(
    "--p",
    "p",
    type=click.FloatRange(0, 1),
    default=0.1,
    show_default=True,
    help="Probability that a task straggles.",
)
@click.option(
    "--straggler-delay",
    type=click.FloatRange(min=0),
    default=2.0,
    show_default=True,
    help="Seconds a straggling task is late.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the data, the weights and the straggler draws.",
)
@click.option(
    "--processes",
    is_flag=True,
    default=False,
    help="One process per worker (default: threads in this process).",
)
@click.option(
    "--codes",
    metavar="CODE[,CODE...]",
    default=",".join(CODED),
    callback=_codes,
    help=f"Codes to compare with plain Dask, a comma list from {', '.join(DEMO_CODES)} "
    f"(the codes registry; {', '.join(f'{k}: {v}' for k, v in EXCLUDED.items())}).  "
    f"[default: {', '.join(CODED)}]",
)
def demo(
    workers: int,
    blocks: int,
    coded: int | None,
    rows: int,
    rounds: int,
    p: float,
    straggler_delay: float,
    seed: int,
    processes: bool,
    codes: tuple[str, ...],
) -> None:
    # the help text is _help(), generated from CODED
    settings = DemoSettings(
        workers=workers,
        blocks=blocks,
        coded=coded,
        rows=rows,
        rounds=rounds,
        p=p,
        straggler_delay=straggler_delay,
        seed=seed,
        processes=processes,
        codes=codes,
    )
    try:
        settings.check()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    K, N = settings.blocks, settings.n_coded
    click.echo(
        f"LocalCluster: {workers} workers x 1 thread ({'processes' if processes else 'threads'}); "
        f"f = 2-layer MLP on X ({rows}, 32), K={K} blocks, N={N} coded tasks; stragglers: "
        f"each task with p={p:g} is {straggler_delay:g}s late; {rounds} round(s)"
    )
    stats = run_demo(settings, echo=lambda line: click.echo(line, err=True))
    click.echo()
    click.echo(format_table(stats))
    click.echo()
    click.echo(_NOTES)
