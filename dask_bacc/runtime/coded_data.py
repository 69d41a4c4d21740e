"""Encode once, compute many times: coded shares kept on the workers (``dask_bacc.encode``).

Training loops and prediction serving call a new function on the same data at every step.
:func:`encode` computes the N coded shares once, as tasks one per distinct worker, and
:class:`CodedData` keeps their futures; each :meth:`CodedData.map` runs one coded job
whose eval tasks read the shares where they already are.

- The shares are tasks, never scattered data: a share lost with its worker is recomputed
  by Dask from its lineage (its task spec for in-memory data, the input chunks otherwise),
  on another worker. Share tasks are pinned loosely for that reason; each call pins its
  eval tasks strictly to the worker that holds the share at that moment.
- A straggler of an earlier call may still run on its worker (Python cannot stop a
  thread). Each call waits for the previous call's clean-up (which tells the workers the
  job is over and learns which stragglers still run ``func``: the job holds those until
  they end), and evaluates the shares whose worker still runs such a straggler, started
  ``bacc.reroute-busy-after`` ago or more, on spare workers instead of queueing behind
  them (``bacc.reroute-busy``). That is known on the client: no message is sent for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .. import config
from ..codes import Code, RepetitionCode
from ..codes.transform import Transform, TransformSpec, get_transform
from ..collections import Blocks
from . import _dist, keys
from ._dist import default_client
from .auto import AUTO, AUTO_CODES, NoSetting, expected_latency
from .graph import TaskSpec, submit_graph
from .handle import sync_guarded
from .job import CodedJob
from .keys import function_key
from .launch import (
    SharedLaunch,
    SpeculativeLaunch,
    check_encoded,
    mixes_blocks,
    mixes_exactly,
)
from .placement import choose_workers
from .rules import Speculation, backup_code
from .speculative import speculative_job
from .submit import (
    _adapt,
    _auto_spelling,
    _build_code,
    _check_common,
    _live_workers,
    auto_view,
    check_error_budget,
    learn_calibration,
    plan_job,
    planned_wait,
    safe_code,
)
from .wait import WaitPolicy, resolve_timeout, resolve_wait
from .worker import encode_share, hold_share

if TYPE_CHECKING:
    from distributed import Client, Future

    from .jobview import JobView

__all__ = ["CodedData", "encode"]


class CodedData:
    """N coded shares of K data blocks, held in cluster memory (made by :func:`encode`).

    Use :meth:`map` (or :meth:`submit`) to run a function on the shares, :meth:`release`
    (or a ``with`` block) to free them. The shares are read-only: a function that changes
    its block in place raises ``ValueError`` instead of changing them for later calls.

    Attributes
    ----------
    code : Code
        The code the shares were made with (K, N).
    token : str
        Names the share tasks ``("bacc-encode-<token>", i)``.
    workers : list of str
        The worker each share was placed on at encoding time.
    auto : dict or None
        ``encode(n_coded="auto")``: what was chosen and why (as ``report.auto``).
    backups : object or None
        ``encode(code="hedged")`` (or ``"speculative"``): the backup rule (a
        ``dask_bacc.runtime.rules.Speculation``); the shares are the K blocks
        themselves (``code`` is the identity, N = K), and each call backs up its late
        evals by this rule, as :func:`~dask_bacc.map_coded` does. None for other codes.
    """

    auto: dict[str, Any] | None = None
    backups: Speculation | None = None

    def __init__(self, client: Client, code: Code, blocks: Blocks, workers: list[str]):
        self.client = client
        self.code = code
        self.blocks = blocks
        self.workers = list(workers)
        self.token = uuid.uuid4().hex
        self.shares: list[Future[Any]] = []
        self._chunks: list[Future[Any]] = []  # the input chunks' futures: the shares' lineage
        self._released = False
        # worker -> (start, future) of earlier calls' stragglers still running there
        self._held: dict[str, list[tuple[float, Future[Any]]]] = {}
        # the previous call, weakly: holding it would keep its output on the cluster
        self._last: weakref.ref[CodedJob] | None = None

    async def _launch(self) -> None:
        """The N share tasks, in one graph, each placed on its worker (loosely: a share
        lost with its worker is recomputed elsewhere from its spec or the input chunks).

        Each share is read-only (:func:`~.worker.read_only`): every call's eval reads the
        same object, so an ``f`` that changed its block in place would corrupt every later
        call's answer; it raises instead."""
        code = self.code
        recipes: list[tuple[Callable[..., Any], tuple[Any, ...]]]
        mixes = mixes_blocks(code)
        if mixes:
            self.blocks.check_finite()
        if self.blocks.local:
            coded = code.shares(self.blocks.stacked())
            if mixes:
                check_encoded(coded)
            recipes = [(hold_share, (coded[i],)) for i in range(code.N)]
        else:
            self._chunks = await self.blocks.to_futures(self.client)
            E = code.encoding_matrix()
            recipes = []
            for i in range(code.N):
                nz = np.flatnonzero(E[i])
                chunks = [self._chunks[j] for j in nz]
                recipes.append((encode_share, (E[i, nz], chunks, mixes_exactly(code))))
        specs = [
            TaskSpec(keys.share_key(self.token, i), fn, args, [self.workers[i]], loose=True)
            for i, (fn, args) in enumerate(recipes)
        ]
        futures = submit_graph(self.client, specs)
        self.shares = [futures[spec.key] for spec in specs]

    # -- user API --------------------------------------------------------------------
    def map(
        self,
        func: Callable[..., Any],
        *args: Any,
        wait: int | float | str | WaitPolicy | None = None,
        timeout: float | None = None,
        combine: str = "auto",
        meta: Any = None,
        transform: TransformSpec = None,
        error: float | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``func`` on every coded share; decode and return the output.

        Same semantics, report and errors as :func:`dask_bacc.map_coded` on the data
        that was encoded (``transform=`` included); ``args``/``kwargs`` larger than
        ``bacc.args-inline-limit`` are sent once per call. With an asynchronous client,
        returns an awaitable.

        ``wait="auto"`` adapts every call to the scheduler's straggler model: a share
        whose worker is predicted slow is evaluated on a spare worker predicted fast
        (``report.rerouted``), and the number of results to wait for is the one with the
        least expected time whose predicted error is within ``error`` (default
        ``bacc.auto.error``); ``report.auto`` says what was chosen. N, the shares, is
        fixed at :func:`encode` (``n_coded="auto"`` chooses it there).
        """
        job = self.submit(
            func,
            *args,
            wait=wait,
            timeout=timeout,
            combine=combine,
            meta=meta,
            transform=transform,
            error=error,
            **kwargs,
        )
        if self.client.asynchronous:
            # an asynchronous client's submit gives an awaitable of the job
            pending = cast("Awaitable[CodedJob]", job)

            async def run() -> Any:
                return await (await pending)._result_warn()

            return run()
        return job._result_sync(None, stacklevel=3)

    def submit(
        self,
        func: Callable[..., Any],
        *args: Any,
        wait: int | float | str | WaitPolicy | None = None,
        timeout: float | None = None,
        combine: str = "auto",
        meta: Any = None,
        transform: TransformSpec = None,
        error: float | None = None,
        **kwargs: Any,
    ) -> CodedJob:
        """Like :meth:`map`, but return the :class:`~dask_bacc.CodedJob` at once (with an
        asynchronous client, an awaitable that gives one)."""
        if self._released:
            raise RuntimeError("this CodedData was released; encode the data again")
        _check_common(func, self.code, None, timeout, None)
        transform = get_transform(transform)
        from ..collections.base import COMBINE_CHOICES

        if combine not in COMBINE_CHOICES:
            raise ValueError(f"combine must be one of {COMBINE_CHOICES}, got {combine!r}")
        wait = _auto_spelling(wait)
        if self.backups is not None and wait is not None:
            name = "hedged" if self.backups.hedges else "speculative"
            raise ValueError(
                f"this data was encoded with code={name!r}: each call runs the "
                "K blocks plus backups of the late ones and waits for every block (wait= "
                "does not apply)"
            )
        auto = wait == AUTO
        budget = check_error_budget(error, auto)
        policy = None if auto else resolve_wait(wait, self.code)
        timeout = resolve_timeout(timeout)
        blocks = self.blocks
        if meta is not None:
            if not hasattr(blocks, "meta"):
                raise ValueError(f"meta applies to dataframes and xarray, not to {blocks.kind}")
            blocks = copy.copy(blocks)  # this call's output template only
            blocks.meta = meta
        return sync_guarded(
            self.client,
            f"CodedData.map on {self.token}",
            self._submit,
            func,
            args,
            kwargs,
            policy,
            timeout,
            combine,
            copy.copy(blocks),
            transform,
            budget,
        )

    async def _submit(
        self,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        policy: WaitPolicy | None,
        timeout: float | None,
        combine: str,
        blocks: Blocks,
        transform: Transform | None = None,
        error: float | None = None,
    ) -> CodedJob:
        last = self._last() if self._last is not None else None
        if last is not None and last._task is not None and not last._task.done():
            # its clean-up marks its stragglers stale on their workers: see _placement
            await asyncio.wait({last._task})
        placement, rerouted, live = await self._placement()
        auto = None
        if policy is None:  # wait="auto"
            assert error is not None
            key = function_key(func)
            policy, auto = await self._adapt(placement, rerouted, live, error, key)
        timeout = None if timeout is None else float(timeout)
        if self.backups is not None:
            launch = SpeculativeLaunch(self.backups, function_key(func), self)
            job = speculative_job(
                self.client,
                blocks,
                func,
                args,
                kwargs,
                self.backups,
                timeout,
                combine,
                placement,
                transform,
                launch,
            )
        else:
            job = CodedJob(
                self.client,
                self.code,
                blocks,
                func,
                args,
                kwargs,
                policy,
                timeout,
                combine,
                placement,
                launch=SharedLaunch(self),
                transform=transform,
            )
        job.report.rerouted = rerouted
        job.report.auto = auto
        await job._submit()
        if auto is not None and job._task is not None:
            job._task.add_done_callback(lambda _: learn_calibration(job, key))
        self._last = weakref.ref(job)
        return job

    async def _adapt(
        self,
        where: list[str],
        rerouted: dict[int, str],
        live: dict[str, Any],
        error: float,
        func_name: str,
    ) -> tuple[WaitPolicy, dict[str, Any]]:
        """``wait="auto"``: move shares off workers predicted slow (onto spare ``live``
        workers predicted fast; ``where`` and ``rerouted`` are updated) and choose the
        wait."""
        view, why = await auto_view(self.client, live)
        if view is None:
            return resolve_wait(None, self.code), {"chosen": None, "reason": why}
        late_cost = float(config.get("auto.late-cost"))
        expected = expected_latency(view, late_cost)
        spare = sorted((a for a in live if a not in set(where)), key=lambda a: expected[a])
        for i in sorted(range(len(where)), key=lambda i: -expected.get(where[i], 1.0)):
            # worth a move when the share's worker is predicted a straggler and a spare
            # one is predicted at least twice as fast
            slow = expected.get(where[i], 1.0)
            if not spare or slow <= view.late_factor or expected[spare[0]] * 2 > slow:
                break
            rerouted[i] = where[i] = spare.pop(0)
        code = self.code
        options = {a: v for a, v in code.get_config().items() if a not in ("name", "K", "N")}
        try:
            chosen = plan_job(
                view,
                code.K,
                [(code.name, options)],
                error,
                func_name,
                n_coded=code.N,
                wait=AUTO,
                placement=where,
            )
        except NoSetting as exc:
            return resolve_wait(None, self.code), {"chosen": None, "reason": f"{exc}: the defaults"}
        policy = resolve_wait(None, self.code) if self.code.exact else planned_wait(chosen)
        return policy, chosen.as_dict()

    async def _placement(self) -> tuple[list[str], dict[int, str], dict[str, Any]]:
        """Where each share's eval runs this call: where the share is, unless that worker
        left, holds another share too, or still runs a cancelled straggler; and the
        running workers (address to info)."""
        client = self.client
        workers, _ = await _live_workers(client)
        up = {a: w for a, w in workers.items() if w.get("status", "running") == "running"}
        live = set(up)
        holders = await _dist.who_has(client, [s.key for s in self.shares])
        where = []
        for i, share in enumerate(self.shares):
            held = sorted(a for a in holders.get(share.key, ()) if a in live)
            # where it was placed, while it is still there (copies made by an earlier
            # reroute must not shift the placement)
            where.append(self.workers[i] if self.workers[i] in held or not held else held[0])
        busy: set[str] = set()
        if config.get("reroute-busy"):
            # known here, with no message: the stragglers of earlier calls still running
            min_age = config.seconds("reroute-busy-after")
            now = time.perf_counter()
            for addr, running in list(self._held.items()):
                running[:] = [(t, f) for t, f in running if f.status == "pending"]
                if not running:
                    del self._held[addr]
                elif any(now - t >= min_age for t, _ in running):
                    busy.add(addr)
        taken: set[str] = set()
        move = []
        for i, addr in enumerate(where):
            if addr not in live or addr in taken or addr in busy:
                move.append(i)
            else:
                taken.add(addr)
        rerouted: dict[int, str] = {}
        if move:
            free = {a: w for a, w in workers.items() if a in live and a not in taken | busy}
            spare = choose_workers(free, len(free)) if free else []
            for i in move:
                if spare:
                    rerouted[i] = where[i] = spare.pop(0)
                elif where[i] not in live:  # nowhere better: any live worker, shared
                    where[i] = sorted(live)[i % len(live)] if live else where[i]
        return where, rerouted, up

    def wait(self) -> Any:
        """Block until every share is computed (and raise if encoding failed).

        Waits on the CodedData's own client, whichever client is the default (or none).
        With an asynchronous client, returns an awaitable.
        """
        return sync_guarded(self.client, f"CodedData.wait on {self.token}", self._wait)

    async def _wait(self) -> None:
        # not distributed.wait: it waits on the default client, which may be another one
        # (an error, or a deadlock when that one is asynchronous on another loop)
        if self._released:
            raise RuntimeError("this CodedData was released; encode the data again")
        shares = list(self.shares)
        queue = _dist.as_completed(self.client)
        for share in shares:
            queue.add(share)
        for _ in shares:
            await queue.__anext__()
        for share in shares:
            if share.status == "error":
                await _dist.gather(self.client, share)  # raises the encoding error
            elif share.status != "finished":
                raise RuntimeError(f"share {share.key} of this CodedData was {share.status}")

    def release(self) -> Any:
        """Free the shares (and the input chunks kept as their lineage) on the cluster, and
        cancel the stragglers of earlier calls that still run ``func``.

        Those stragglers are held while the CodedData lives (so that the scheduler still
        sees their workers busy, and each call reroutes around them); once it is released
        nothing will run there again, and a held eval would keep its share, a ``bacc-``
        task, on the scheduler until ``func`` returns (never, for a frozen worker). Their
        threads run on until ``func`` returns (Python cannot stop them), their results
        dropped. A call still running finishes; its stragglers are cancelled as it ends.

        Returns
        -------
        None or asyncio.Task
            With an asynchronous client, a task that ends once the scheduler has cancelled
            the stragglers (awaiting it is optional); None otherwise, once it has.
        """
        if self._released:
            return _run(self.client, _nothing)
        self._released = True
        futures = self.shares + self._chunks
        self.shares, self._chunks = [], []
        for f in futures:
            _dist.release(f)
        held = [f for running in self._held.values() for _, f in running]
        self._held.clear()
        if not held:
            return _run(self.client, _nothing)
        return _run(self.client, _cancel_held, self.client, held)

    def hold_for_next_call(self, job: JobView, running: dict[int, Future[Any]]) -> None:
        """A call ended with these evals still running ``func`` (called by its launch
        policy, on the client's loop): the next call evaluates their shares elsewhere
        (``CodedData._placement``)."""
        if self._released:
            # released while this call ran: no next call to reroute, and a held eval would
            # keep its share on the scheduler until func returns; cancelled as release()
            # cancels the others (the job's hold then lets go of them)
            self._cancel_late(list(running.values()))
            return
        # the next call reroutes around them, with no message
        for i, fut in running.items():
            self._held.setdefault(job.workers[i], []).append((job._start, fut))

    def _cancel_late(self, running: list[Future[Any]]) -> None:
        """Cancel the stragglers of a call that ended after :meth:`release`, on the
        client's loop, where a synchronous wait would block it."""
        if running:
            task = asyncio.ensure_future(_cancel_held(self.client, running))
            _releasing.add(task)
            task.add_done_callback(_releasing.discard)

    def __enter__(self) -> CodedData:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _repr_html_(self) -> str:
        from ..diagnostics.html import coded_data_html

        return coded_data_html(self)

    def __repr__(self) -> str:
        state = "released" if self._released else f"{len(self.shares)} shares"
        return (
            f"<CodedData {self.code.name} K={self.code.K} N={self.code.N} "
            f"{self.blocks.kind} {state} token={self.token}>"
        )


#: release() tasks of asynchronous clients, kept until they end (the loop holds tasks weakly)
_releasing: set[asyncio.Task[None]] = set()


async def _cancel_held(client: Client, held: list[Future[Any]]) -> None:
    """Cancel the held stragglers that still run (one scheduler round trip, best effort:
    a worker or scheduler gone takes its tasks with it). The job's hold of each
    (``job._drop_when_done``) sees them cancelled and lets go at its next poll."""
    running = [f for f in held if f.status == "pending"]
    if running:
        with contextlib.suppress(Exception):
            await _dist.cancel(client, running, reason="bacc: CodedData released")


async def _nothing() -> None:
    return None


def _run(client: Client, func: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> Any:
    """``func(*args)`` on the client's loop: waited for with a synchronous client; with
    an asynchronous one, started as a task and returned (awaiting it is optional, and an
    unawaited task, unlike a coroutine, warns about nothing)."""
    if not client.asynchronous:
        if func is not _nothing:  # no trip to the loop for nothing
            _dist.sync(client, func, *args)
        return None
    task = asyncio.ensure_future(func(*args))
    _releasing.add(task)
    task.add_done_callback(_releasing.discard)
    return task


def encode(
    data: Any,
    code: str | Code | None = None,
    n_coded: int | str | None = None,
    client: Client | None = None,
    *,
    n_blocks: int | None = None,
    blocks: int | None = None,
    code_options: dict[str, Any] | None = None,
    columns: Any = None,
    dim: str | None = None,
    error: float | None = None,
) -> CodedData:
    """Encode ``data`` once and keep the N coded shares on the workers.

    Parameters
    ----------
    data, code, n_coded, client, n_blocks, blocks, code_options, columns, dim
        As in :func:`dask_bacc.map_coded` (every input kind it accepts).
        ``code="speculative"`` does not apply (it has no shares).
    error : float, optional
        With ``n_coded="auto"`` (and ``code="auto"``): N (and the code) are chosen from
        the scheduler's straggler model as in :func:`dask_bacc.map_coded`, within this
        error budget (default ``bacc.auto.error``); ``CodedData.auto`` says what was
        chosen. Each :meth:`CodedData.map` with ``wait="auto"`` then adapts the wait and
        the placement.

    Returns
    -------
    CodedData
        Call :meth:`CodedData.map` as often as needed; :meth:`CodedData.release` (or a
        ``with`` block) frees the shares.

    Notes
    -----
    The share tasks are submitted, not waited for (like ``persist``);
    :meth:`CodedData.wait` blocks until they are in memory. For in-memory input each share
    task holds its share in its spec, so the scheduler holds a copy of the coded data as
    long as the shares exist.
    """
    if code is None:
        code = config.get("code")
    code, n_coded = _auto_spelling(code), _auto_spelling(n_coded)
    _check_common(len, code, n_coded, None, code_options)
    if backup_code(code) and n_coded is not None:
        raise ValueError(
            f"code={code!r} keeps the K blocks as they are and backs up late evals at "
            "each call: n_coded does not apply"
        )
    if code == AUTO and n_coded != AUTO:
        raise ValueError("encode(code='auto') chooses the code with N: pass n_coded='auto'")
    error = check_error_budget(error, n_coded == AUTO)
    client = client if client is not None else default_client()
    labels = {"columns": columns, "dim": dim}
    return sync_guarded(
        client,
        "encode",
        _encode,
        client,
        data,
        code,
        n_coded,
        n_blocks,
        blocks,
        dict(code_options or {}),
        labels,
        error,
    )


async def _encode(
    client: Client,
    data: Any,
    code: str | Code,
    n_coded: int | None,
    n_blocks: int | None,
    blocks: int | None,
    code_options: dict[str, Any],
    labels: dict[str, Any],
    error: float | None = None,
) -> CodedData:
    workers, n_workers = await _live_workers(client)
    data_blocks = _adapt(data, code, n_workers, n_blocks, blocks, labels)
    auto: dict[str, Any] | None = None
    placement: list[str] | None = None
    if isinstance(n_coded, str):  # "auto": N (and the code) for the cluster seen now
        assert error is not None and isinstance(code, str)
        view, why = await auto_view(client, workers)
        n_coded, auto = None, {"chosen": None, "reason": why}
        if view is not None:
            name = code.lower().replace("_", "-")
            codes = [(c, {}) for c in AUTO_CODES] if name == AUTO else [(name, code_options)]
            try:
                # no function yet: the accuracy model uncalibrated (a key never learned)
                chosen = plan_job(view, data_blocks.K, codes, error, "", wait=AUTO)
            except NoSetting as exc:
                auto = {"chosen": None, "reason": f"{exc}: the defaults"}
            else:
                code, code_options = chosen.chosen.code, dict(codes)[chosen.chosen.code]
                n_coded, placement, auto = chosen.chosen.N, chosen.workers, chosen.as_dict()
        if code == AUTO:
            code = safe_code()
    backups = backup_code(code)
    if backups is not None:  # the blocks as they are, one per worker
        coder: Code = RepetitionCode(data_blocks.K, data_blocks.K)
    else:
        coder = _build_code(code, data_blocks.K, n_coded, max(n_workers, 1), code_options)
    if placement is None:
        placement = choose_workers(
            workers,
            coder.N,
            spread_hosts=bool(config.get("spread-hosts")),
            oversubscribe=str(config.get("oversubscribe")),
        )
    coded = CodedData(client, coder, data_blocks, placement)
    coded.auto = auto
    if backups is not None:
        coded.backups = Speculation.from_options(code_options, backups)
    await coded._launch()
    return coded
