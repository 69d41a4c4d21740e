"""How a coded job decodes: on the client (one gather, one matrix product) or on the
cluster (one graph near the first result), the checks of the results it decodes from,
why it could not, and what it saved against plain Dask. The base of
:class:`~.job.CodedJob` that holds it, above :class:`~.judge.JudgingJob`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from dask._task_spec import TaskRef
from distributed.client import FutureCancelledError
from numpy.typing import NDArray

from .. import config, diagnostics
from ..codes.base import contract, decode_residual
from ..codes.transform import Transform
from ..collections import Blocks
from ..exceptions import ApproximationWarning, InsufficientResults
from . import _dist, keys
from .decide import Decode, GiveUp
from .graph import TaskSpec, submit_graph
from .handle import describe
from .judge import JudgingJob
from .quality import JobQuality
from .report import split_redundant
from .savings import cpu_split, plain_ready, uncoded_tasks, write_counterfactual
from .sending import TRANSFER_GRACE, watched_gather
from .wait import WaitPolicy
from .worker import (
    DecodedInfo,
    EvalFailure,
    InconsistentResults,
    ResultSpec,
    consistent,
    decoded_block,
    decoded_info,
    majority,
    mixed_beyond_float64,
    picked_dtype,
    picks,
    result_shape,
    spec_of,
    stack_decode_task,
)

if TYPE_CHECKING:
    from distributed import Future
    from distributed.scheduler import Scheduler

__all__ = ["DecodingJob"]


def _model_quantiles(
    workers: list[str], dask_scheduler: Scheduler | None = None
) -> dict[str, list[float]] | None:
    """On the scheduler: the straggler model's relative latency quantiles (q50, q90, q99)
    of ``workers``; None when the diagnostics plugin or its model is off."""
    assert dask_scheduler is not None
    plugin = dask_scheduler.plugins.get(diagnostics.PLUGIN_NAME)
    model = getattr(plugin, "model", None)
    if model is None:
        return None
    out = {}
    for w in workers:
        ws = dask_scheduler.workers.get(w)
        p = model.predict(w, ws.host if ws is not None else None)
        if p.n_eff > 0:  # a prior is no estimate of this worker
            out[w] = [p.q50, p.q90, p.q99]
    return out


def _quiet(task: asyncio.Future[Any]) -> None:
    """Retrieve a background request's exception (best effort: nothing depends on it)."""
    if not task.cancelled():
        task.exception()


class _Nothing(enum.Enum):
    """No output this time: a decode's inputs were rejected or lost (decide again)."""

    NOTHING = enum.auto()


_NOTHING: Literal[_Nothing.NOTHING] = _Nothing.NOTHING


class DecodingJob(JudgingJob):
    """The decode stage of a coded job (the attributes are the job's; the hooks below
    are its loop's, defined by :class:`~.job.CodedJob`)."""

    blocks: Blocks
    policy: WaitPolicy
    timeout: float | None
    combine: str
    transform: Transform | None
    quality: JobQuality
    task_seconds: dict[int, float]
    _ac: _dist.FutureQueue | None
    _evals: dict[int, Future[Any]]
    _values: dict[int, NDArray[Any]]
    _stage: list[Future[Any]]
    _round: int
    _shapes: dict[int, tuple[int, ...]]
    _probe: Future[Any] | None
    mixes: bool
    func: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    _plain: list[int] | None
    _quantiles: asyncio.Future[Any] | None

    @property
    def decode_here(self) -> bool:
        raise NotImplementedError

    def _elapsed(self) -> float:
        raise NotImplementedError

    def _sync_report(self) -> None:
        raise NotImplementedError

    async def _arrived(self, fut: Future[Any]) -> None:
        raise NotImplementedError

    async def _check_workers(self) -> None:
        raise NotImplementedError

    async def _decode(self, action: Decode) -> Any:
        self._raise_unjudged()
        self.report.trigger = action.trigger
        self._sync_report()
        self._note_stragglers()
        self._fetch_quantiles()
        # adversaries=: leave out the results located as corrupted
        used = await self.quality.screen(action.used)
        if self.decode_here:
            output = await self._decode_here(used)
        else:
            output = await self._decode_on_cluster(used)
        if output is _NOTHING:
            self.decider.decode_abandoned()
            return _NOTHING
        rep = self.report
        rep.returned = list(used)
        rep.late = [i for i in self.decider.usable if i not in set(used)]
        rep.slowest_used = max(rep.arrival[i] for i in used)
        self._note_stragglers()
        await self.quality.finalize(used)  # error estimate into the report
        rep.time_to_decode = self._elapsed()
        if self._mixed_failed and not self.domain_failure:
            # no share of real data to compare with (Berrut, Lagrange): the protection
            # those shares gave is lost, and the user should know why
            self.warn(
                ApproximationWarning(
                    "func raised, returned NaN/inf or a value outside transform= on coded "
                    f"share(s) {sorted(self._mixed_failed)}, which mix blocks: they were written "
                    f"off, so the job had {len(self._mixed_failed)} fewer result(s) to "
                    "decode from. If f is not defined on mixtures of blocks (log, sqrt, a "
                    "division), use an exact code: code='repetition' or 'speculative'."
                )
            )
        return output

    def _note_stragglers(self) -> None:
        """The tasks still out now, as stragglers and redundancy not needed."""
        rep = self.report
        rep.straggled, rep.not_needed = split_redundant(
            self.decider.straggled(),
            list(self.decider.usable),
            set(rep.plain_shares),
            self._data_rows,
            self.code.K,
        )

    def _fetch_quantiles(self) -> None:
        """Ask the scheduler's straggler model about the workers of the plain shares still
        out, in the background while the decode runs (never waited for: a reply that has
        not come by the end leaves a lower bound). Only when there are such shares and the
        diagnostics plugin is on."""
        monitor = self._monitor
        if self._quantiles is not None or self._plain is None or not monitor or not monitor.send:
            return
        arrived = self.decider.arrival
        out = sorted({self.workers[i] for i in self._plain if i not in arrived})
        if out:
            self._quantiles = asyncio.ensure_future(
                _dist.run_on_scheduler(self.client, _model_quantiles, out)
            )
            self._quantiles.add_done_callback(_quiet)

    def _fill_savings(self) -> None:
        """The uncoded counterfactual into the report (``docs/diagnostics.md``, "What a job
        saved"), from the arrivals and, if it answered already, the straggler model."""
        rep = self.report
        if rep.status != "finished" or rep.time_to_decode is None:
            return
        predictions = None
        q = self._quantiles
        if q is not None and q.done() and not q.cancelled() and q.exception() is None:
            predictions = q.result()
        # a plain share still out had not finished by the decode; one still pending now,
        # not by now (the result is being handed over)
        now = self._elapsed()
        since = {
            i: now
            if getattr(self._evals.get(i), "status", None) == "pending"
            else rep.time_to_decode
            for i in self._plain or ()
        }
        cf = plain_ready(self._plain, rep.arrival, rep.failed, since, rep.workers, predictions)
        write_counterfactual(rep, cf)
        rep.uncoded_tasks = uncoded_tasks(self._data_rows, self._plain, rep.returned) or []

    def _fill_cpu(self, cpu: dict[Any, float] | None) -> None:
        """Thread-seconds of the coded tasks (the scheduler plugin's measure) into the
        report: in total, and beyond what an uncoded run would have spent."""
        if cpu is None:
            return
        rep = self.report
        per_task = {int(i): float(v) for i, v in cpu.items()}
        self.task_seconds = per_task
        uncoded = rep.uncoded_tasks if self._plain is not None and rep.uncoded_tasks else None
        rep.total_cpu, rep.redundant_cpu = cpu_split(per_task, self.code.K, rep.N, uncoded)

    def _out_dtype(self, dtype: str, selects: bool) -> np.dtype[Any]:
        """The output's dtype: the results' own where the decode ``selects`` them
        (:func:`.worker.picks`), float64 where it mixes integer results."""
        out = np.dtype(dtype)
        if self.transform is not None:  # what the inverse map gives, in float
            return out if out.kind == "f" else np.dtype(np.float64)
        if not selects and out.kind != "f":
            out = np.dtype(np.float64)
        return out

    def transfer_bound(self) -> float | None:
        """Seconds a transfer from the workers may still take: up to the job's timeout
        plus ``TRANSFER_GRACE`` (the results a timeout decodes from are fetched after
        it); None without a timeout.

        A frozen worker (SIGSTOP, a long pause) still counts as running on the scheduler
        until ``worker-ttl`` removes it, and a transfer from it never ends: a decode
        waiting on one would hold the job past its timeout for as long as the worker is
        frozen.
        """
        if self.timeout is None:
            return None
        return max(self.timeout - self._elapsed(), 0.0) + TRANSFER_GRACE

    async def gather_values(self, indices: list[int]) -> None:
        """Bring the results of ``indices`` to the client (those not here yet); a result
        whose worker left, or (with a timeout) did not send it in time, is written off."""
        want = {i: self._evals[i] for i in indices if i not in self._values and i in self._evals}
        if not want:
            return
        bound = self.transfer_bound()
        got = await self.watched_gather(want, timeout=bound)
        for i in want:
            if isinstance(got.get(i), EvalFailure):  # its type did not reach the client
                self.decider.rejected(i, got[i].reason)
            elif i in got and got[i] is not None:
                self._values[i] = np.asarray(got[i])
            elif self.timeout is not None and self._elapsed() >= self.timeout:
                self.decider.lost(
                    i,
                    f"result not sent by worker {self.workers[i]} within the timeout of "
                    f"{self.timeout}s (the worker does not answer: frozen?)",
                )
            else:
                self.decider.lost(i, f"result lost with worker {self.workers[i]}")

    async def watched_gather(
        self, want: dict[int, Future[Any]], timeout: float | None = None
    ) -> dict[int, Any]:
        """``dask_bacc.runtime.sending.watched_gather`` of ``want`` (coded index -> a
        future on that result's worker: the result or its sketch), the job's workers
        watched."""
        evals = self._evals
        return await watched_gather(
            self.client,
            want,
            self.workers,
            lambda i: getattr(evals.get(i), "status", None),
            timeout,
        )

    def _reject(self, used: list[int], specs: list[ResultSpec]) -> bool:
        """Write off the results whose shape differs from the majority; True if any.

        The shapes are counted over every result this job's decodes have seen, whatever
        their arrival order. One odd result is an erasure (a faulty worker). Two or more
        results whose shapes differ from the majority mean f's output shape depends on
        the values in its block (a boolean mask, a groupby of mixed values): no decode can
        rebuild that, so the job fails with a ``ValueError``. Judged one decode at a time,
        each odd result arriving alone was written off as a faulty worker's, and the job
        decoded from the few that happened to agree.
        """
        self._shapes.update((i, spec[0]) for i, spec in zip(used, specs, strict=True))
        seen = sorted(self._shapes)
        self._refuse_value_dependent_length()
        expected, bad = majority([self._shapes[i] for i in seen])
        if len(bad) >= 2:
            shapes = sorted({self._shapes[seen[p]] for p in bad})
            raise ValueError(
                f"func's output shape depends on the values in its block: the coded results "
                f"have shapes {[expected, *shapes][:6]} (and {len(bad)} of {len(seen)} "
                "differ from the most common one). Coded computing decodes f's outputs "
                "from combinations of blocks, so the shape of f(block) must depend only on "
                "the block's shape (no boolean masks or value-dependent groupbys); run this "
                "f with plain Dask (e.g. map_blocks / map_partitions)."
            )
        odd = [i for i, spec in zip(used, specs, strict=True) if spec[0] != expected]
        for i in odd:
            self.decider.rejected(
                i,
                f"InvalidResult: result shape {self._shapes[i]} differs from the shape "
                f"{expected} of the other results",
            )
        return bool(odd)

    def _refuse_value_dependent_length(
        self,
        real: dict[int, tuple[int, ...]] | None = None,
        decoded: tuple[int, ...] | None = None,
    ) -> None:
        """Fail the job when f's output shape on a block's own data differs from its shape
        on the shares that mix blocks (``real``: f's output shape on real blocks, by
        block, when a probe found it; else the results of shares of real data seen;
        ``decoded``: the shape the mixed shares decoded to).

        f's output length then depends on the values (a row filter, ``drop_duplicates``,
        a merge): a mix of blocks shows no such length, and every mixed share may agree
        on a wrong one (a merge that matches nothing in a float mixture returns 0 rows
        on every share). One such result is f's own answer on real data, not a faulty
        worker's: it is not erased."""
        if not self.mixes:
            return
        mixed = {s for i, s in self._shapes.items() if i not in self._data_rows}
        if decoded is not None:
            mixed.add(decoded)
        if real is None:
            real = {self._data_rows[i]: s for i, s in self._shapes.items() if i in self._data_rows}
        odd = {b: s for b, s in real.items() if any(s != m for m in mixed)}
        if not odd:
            return
        block, shape = min(odd.items())
        raise ValueError(
            f"func's output length depends on the values in its block: on block {block}'s "
            f"own data it has shape {shape}, on shares that mix blocks "
            f"{sorted(mixed)[:3]} (coded job {self.token}). A code that mixes blocks decodes "
            "f from mixtures of rows, which keep no row filter, drop_duplicates or merge "
            "of the real rows. Use an exact code that copies blocks (code='repetition', "
            "'hedged' or 'speculative'), which runs f on the blocks as plain Dask does."
        )

    async def _check_length_on_real_data(self, shape: tuple[int, ...], used: list[int]) -> None:
        """Before decoding, from the results ``used`` (of that ``shape``), an output whose
        length may depend on the values (a DataFrame's: :attr:`Blocks.length_varies`),
        make sure f gives that length on real data as on mixed shares, whatever arrived
        first. Decoded from mixed shares alone: f on block 0 (:meth:`_probe_block`, one
        task) must give it too, or a filter that every mixture passes whole or drops
        whole would decode. From shares of real data alone, an output that does not keep
        the block's rows (:meth:`Blocks.length_unproven`) is compared with the first mixed
        share to finish (no compute of its own)."""
        if not self.mixes or not self.blocks.length_varies or not shape:
            return
        real = [i for i in used if i in self._data_rows]
        if real and len(real) < len(used):
            return  # both kinds, of one shape (else _reject refused them)
        if real:
            if self.blocks.length_unproven(shape):
                mixed = await self._first_mixed_shape()
                if mixed is not None:
                    self._refuse_value_dependent_length({self._data_rows[real[0]]: shape}, mixed)
            return
        probe = self._probe_block()
        out = await probe
        self._refuse_value_dependent_length({0: tuple(np.shape(out))}, shape)

    def _probe_block(self) -> Future[Any]:
        """f on block 0 (the future of one task, started once per job): the length of f's
        output on real data, for a job that may decode from mixed shares alone."""
        if self._probe is None:
            block: Any = self._chunks[0] if self._chunks else self.blocks.stacked()[0]
            self._probe = self.client.submit(
                self.func, block, *self.args, key=keys.probe_key(self.token), **self.kwargs
            )
        return self._probe

    async def _first_mixed_shape(self) -> tuple[int, ...] | None:
        """The shape of the first result of a share that mixes blocks to finish, or None
        when none gives one (they failed, or were cancelled)."""
        pending = [f for i, f in self._evals.items() if i not in self._data_rows]
        while pending:
            done, _ = await _dist.wait_first(pending)
            for fut in done:
                pending.remove(fut)
                if fut.status != "finished":
                    continue
                shape = await self.client.submit(result_shape, fut, pure=False)
                if shape is not None:
                    return tuple(shape)
        return None

    def _refuse_rounding(self, top: int | None) -> None:
        """An exact code's decode mixed f's integer results beyond 2**53 (up to ``top``)
        in float64: the answer would be rounded under an exact label (Lagrange). Refused
        with a ``ValueError``; an approximate code's answer is approximate anyway, and a
        transform's is float, exact up to rounding as documented."""
        if top is None or not self.code.exact or self.transform is not None:
            return
        raise ValueError(
            f"func returned integers beyond 2**53 (up to {top}) and {self.code!r} decodes "
            "them by float64 arithmetic, which rounds them, while its answer is labelled "
            "exact. Return floats if float64 precision is enough, or use code='repetition' "
            "(its decode selects results, keeping every digit)."
        )

    async def _decode_here(self, used: list[int]) -> Any:
        """One gather of the used results and one matrix product on the client."""
        await self.gather_values(used)
        if any(i not in self._values for i in used):
            return _NOTHING
        specs = [spec_of(self._values[i]) for i in used]
        if self._reject(used, specs):
            return _NOTHING
        (shape, _), _ = consistent(specs)
        D = self.code.decoding_matrix(used)
        cols = picks(D)
        dtype = picked_dtype(cols, [spec[1] for spec in specs]).str
        stacked = np.stack([self._values[i] for i in used])
        if self.transform is not None:
            cols = None  # the inverse map needs the decode in float
        if cols is not None:  # exact copies: selected, their dtype and digits kept
            decoded = np.stack([self._values[used[c]] for c in cols])
        else:
            self._refuse_rounding(mixed_beyond_float64([self._values[i] for i in used]))
            decoded = contract(D, stacked)  # code.decode, with the matrix already built
        self.quality.residual = decode_residual(self.code, stacked, used)
        if self.transform is not None:
            decoded = self.transform.inverse(decoded)
        out_dtype = self._out_dtype(dtype, cols is not None)
        values = list(decoded.astype(out_dtype, copy=False))
        await self._check_length_on_real_data(shape, used)
        return self.blocks.assemble(values, shape, out_dtype, self.combine)

    async def _decode_on_cluster(self, used: list[int]) -> Any:
        """One graph: a decode task next to the first used result (a tiled matrix product
        over the used results, which also sketches them), one task per output block and a
        small summary the client gathers for the shapes and the error estimate."""
        self._round += 1
        tok, r = self.token, self._round
        near = [self.workers[used[0]]]
        stack_key = keys.stack_key(tok, r)
        sketch = self.quality.decode_sketch()
        D = self.code.decoding_matrix(used)
        tasks = [
            TaskSpec(
                stack_key,
                stack_decode_task,
                (
                    D,
                    sketch,
                    self.transform,
                    self.code.check_matrix(used),
                    *[self._evals[i] for i in used],
                ),
                workers=near,
                loose=True,
                keep=False,
            ),
            TaskSpec(keys.info_key(tok, r), decoded_info, (TaskRef(stack_key),), near, True),
        ]
        tasks += [
            TaskSpec(keys.decode_key(tok, j, r), decoded_block, (TaskRef(stack_key), j), near, True)
            for j in range(self.code.K)
        ]
        futures = submit_graph(self.client, tasks)
        info_fut = futures.pop(keys.info_key(tok, r))
        blocks = list(futures.values())
        self._stage = [info_fut, *blocks]
        ac = self._ac
        assert ac is not None  # the loop that runs this decode made it
        ac.add(info_fut)
        info = await self._await_stage(info_fut, used)
        if info is _NOTHING:
            await self._drop_stage()
            return _NOTHING
        self._refuse_rounding(info.get("rounded"))
        self.quality.add_sketches(used, info.get("sketches"))
        self.quality.residual = info.get("residual")
        shape, dtype = tuple(info["shape"]), info["dtype"]
        await self._check_length_on_real_data(shape, used)
        out_dtype = self._out_dtype(dtype, picks(D) is not None and self.transform is None)
        if self.blocks.gather_output:
            values = await self._gather_from(blocks, near[0])
            if values is None:  # the decode's worker left with the blocks: decode again
                await self._check_workers()
                await self._drop_stage()
                return _NOTHING
            self._stage = []
            return self.blocks.assemble(
                [np.asarray(v).astype(out_dtype, copy=False) for v in values],
                shape,
                out_dtype,
                self.combine,
            )
        self._stage = []
        return self.blocks.assemble(blocks, shape, out_dtype, self.combine)

    async def _gather_from(self, futures: list[Future[Any]], where: str) -> list[Any] | None:
        """Gather ``futures``, computed on worker ``where``; None once that worker left.

        Bounded: were the worker to leave, the scheduler would recompute the decode from
        coded results pinned strictly to their workers, one of them the departed worker
        (the decode runs next to its first result), and a plain gather would wait for
        ever.
        """
        poll = min(config.seconds("poll-interval"), 0.25)
        gather = asyncio.ensure_future(_dist.gather(self.client, futures))
        while True:
            done, _ = await asyncio.wait({gather}, timeout=poll)
            if done:
                try:
                    return list(gather.result())
                except (Exception, FutureCancelledError):
                    if where not in set(await _dist.running_workers(self.client)):
                        return None  # lost with the worker, mid-transfer: decode again
                    raise  # any other failure ends the job (a redo would meet it again)
            if where not in set(await _dist.running_workers(self.client)):
                gather.cancel()
                with contextlib.suppress(BaseException):
                    await gather
                return None
            try:
                self._check_overdue("the transfer of the decoded blocks")
            except InsufficientResults:
                gather.cancel()
                with contextlib.suppress(BaseException):
                    await gather
                raise

    async def _await_stage(
        self, info_fut: Future[Any], used: list[int]
    ) -> DecodedInfo | Literal[_Nothing.NOTHING]:
        """Wait for the decode's summary while following the coded tasks (late results
        land, workers leave); ``_NOTHING`` when the decode must be redone."""
        poll = config.seconds("poll-interval")
        ac = self._ac
        assert ac is not None
        while True:
            if self._cancel_requested:
                raise asyncio.CancelledError
            fut: Future[Any] | None
            try:
                fut = await asyncio.wait_for(ac.__anext__(), timeout=poll)
            except (asyncio.TimeoutError, StopAsyncIteration):
                fut = None
            if fut is None:
                await self._check_workers()
                if self.decider.decoding is None:
                    return _NOTHING  # a used result was lost with its worker
                self._check_overdue("the decode on the cluster")
                continue
            if fut.key != info_fut.key:
                await self._arrived(fut)
                continue
            if fut.status == "finished":
                try:  # bounded by the timeout: the decode's worker may not answer
                    info: DecodedInfo = await asyncio.wait_for(
                        _dist.gather(self.client, fut), self.transfer_bound()
                    )
                except asyncio.TimeoutError:
                    self._check_overdue("the decode on the cluster", now=True)
                    raise
                return info
            exc = await _dist.exception(fut) if fut.status == "error" else None
            if isinstance(exc, InconsistentResults):
                failures = [p for p, spec in enumerate(exc.specs) if spec[1] == "failure"]
                for p in failures:  # evals that failed, their type unknown here
                    self.decider.rejected(used[p], "the eval failed (seen by the decode)")
                if not failures:
                    self._reject(used, exc.specs)
                return _NOTHING
            await self._check_workers()
            if self.decider.decoding is None:
                return _NOTHING
            error = RuntimeError(
                f"coded job {self.token}: decode task failed: "
                f"{describe(exc) if exc else fut.status}"
            )
            raise error from exc

    def _check_overdue(self, what: str, now: bool = False) -> None:
        """Past the timeout (and ``TRANSFER_GRACE``), a decode on the cluster still
        running ends the job: a worker it needs does not answer (frozen: the scheduler
        still counts it as running), and waiting for it would hold the job past its
        timeout for as long as that lasts. ``now``: the bound ran out already (a wait
        bounded by :meth:`transfer_bound`)."""
        if self.timeout is None:
            return
        if not now and self._elapsed() < self.timeout + TRANSFER_GRACE:
            return
        exc = InsufficientResults(
            f"coded job {self.token}: {what} did not finish within the timeout of "
            f"{self.timeout}s: a worker holding a result it decodes from, or running it, "
            f"does not answer (frozen?); results used: {self.decider.decoding}"
        )
        self._sync_report()
        exc.report = self.report
        raise exc

    async def _drop_stage(self) -> None:
        stage, self._stage = self._stage, []
        if stage:
            with contextlib.suppress(Exception):
                await _dist.cancel(self.client, stage)

    def _insufficient(self, action: GiveUp) -> Exception:
        rep, need = self.report, self.policy.target(self.code)
        self._sync_report()
        why = []
        if self.code.exact or self.decider.exact_only:
            # an exact decode needs each block's own data: say which blocks lack it
            # (repetition: "5 of 6 arrived, needs 4" reads as if enough did)
            rows = self.code.data_rows()
            if len(rows) == self.code.N or self.decider.exact_only:
                have = {rows[i] for i in action.usable if i in rows}
                if lacking := [b for b in range(self.code.K) if b not in have]:
                    blocks = ", ".join(map(str, lacking[:8])) + (
                        ", ..." if len(lacking) > 8 else ""
                    )
                    why.append(f"no usable copy of block{'s' * (len(lacking) > 1)} {blocks}")
        # one line per kind of failure ("worker <addr> left", "func raised on coded share 3
        # ...: ValueError: ..."): reasons that differ only in their numbers and addresses
        # are one kind, shown by its first reason as it was (the user's message intact)
        kinds: dict[str, list[str]] = {}
        for r in rep.failed.values():
            kind = re.sub(r"\d+", "#", re.sub(r"[a-z]+://\S+", "<addr>", r))
            kinds.setdefault(kind, []).append(r)
        for same in sorted(kinds.values(), key=len, reverse=True):
            like = "" if len(set(same)) == 1 else ", for example"
            why.append(f"{len(same)} x{like} {same[0][:300]}")
        if action.pending and self.timeout is not None:
            why.append(f"{len(action.pending)} still running at the timeout of {self.timeout}s")
        elif action.pending:
            why.append(f"{len(action.pending)} still running")
        if self.decider.exact_only:
            why.append(
                "only an exact decode would do (func failed on coded shares that mix "
                "blocks) and the shares of some block's own data are all gone"
            )
        exc = InsufficientResults(
            f"coded job {self.token}: {len(action.usable)} usable result(s) of N={self.code.N} "
            f"arrived and {type(self.code).__name__} cannot decode from them (it waits for "
            f"{need}, at least {self.code.min_results} that make a decodable set); missing: "
            + ("; ".join(why) or "none")
            + f" [{action.trigger}]"
        )
        exc.report = rep
        exc.__cause__ = self._cause
        return exc
