"""The worker side: dask-bacc's ``WorkerPlugin`` (per-worker state) and the task functions.

:class:`BaccWorker` is registered once per cluster (``ensure_worker_plugin``, on a client's
first coded job). Each worker's instance holds a :class:`WorkerState`: the tokens of jobs
that need no more results and the evals executing there. A job that decodes tells its
workers in one scheduler round trip (``runtime.job``): the scheduler sends ``bacc-done`` on
each worker's stream, the plugin marks the token, evals that start afterwards return at
once and the waits of eval hooks end. Task functions find their worker's state through
:func:`state` (a process-wide fallback outside a worker, e.g. when tests call them).

**Eval hooks**, the extension point for what happens to a coded eval after ``func``
returned: any worker plugin that derives from :class:`EvalHook` is called by every eval on
its worker with an :class:`EvalCall` (job token and number, coded index, start time, and
an interruptible ``wait``). Registering the plugin (``client.register_plugin``) turns the
hook on, on every worker and on workers that join later; unregistering it turns it off.
``dask_bacc.testing`` injects its delays this way; the runtime knows nothing of them.

Kept free of client-side state so they pickle by reference; dask-bacc must be installed
on the workers.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict, TypeVar

import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin
from numpy.typing import ArrayLike, NDArray

from .. import config
from ..codes.base import beyond_float64, refuse_rounded_integers, unit_rows
from ..exceptions import InvalidInput, InvalidResult, OutsideTransform
from . import keys

if TYPE_CHECKING:
    from distributed import Worker

    from ..codes._types import FloatArray
    from ..codes.transform import Transform

__all__ = [
    "PLUGIN_NAME",
    "BaccWorker",
    "Decoded",
    "DecodedInfo",
    "EvalCall",
    "EvalFailure",
    "EvalHook",
    "InconsistentResults",
    "NonFiniteResult",
    "ResultSpec",
    "Share",
    "UnsupportedResult",
    "WorkerState",
    "cancelled",
    "check_result",
    "decode_task",
    "decoded_block",
    "decoded_info",
    "encode_eval_task",
    "encode_share",
    "encode_task",
    "eval_hooks",
    "eval_task",
    "hold",
    "hold_share",
    "is_done",
    "majority",
    "mark_done",
    "matmul_tiled",
    "mixed_beyond_float64",
    "picked_dtype",
    "picks",
    "read_only",
    "sketch_task",
    "stack_decode_task",
    "state",
    "wait_done",
    "weighted_sum",
]

PLUGIN_NAME = "bacc-worker"
#: the op the scheduler sends on a worker's stream when a job needs no more results
DONE_OP = "bacc-done"

_current = threading.local()  # the job token of the eval task this thread runs

T = TypeVar("T")
#: ``(shape, dtype.str)`` of a coded result (:func:`spec_of`)
ResultSpec: TypeAlias = tuple[tuple[int, ...], str]
#: A coded share or a decoded block: an array, or a NumPy scalar where the blocks are 0-d
Share: TypeAlias = NDArray[Any] | np.generic


class NonFiniteResult(InvalidResult):
    """A result with NaN/inf entries (:func:`check_result`): for a share that mixes blocks,
    the sign that f is not defined on coded blocks."""


class UnsupportedResult(InvalidResult):
    """A result of a type no decode can rebuild (a masked array or another ndarray
    subclass): f's own output, so the job raises ``TypeError`` instead of writing it off."""


class InconsistentResults(InvalidResult):
    """Results of a decode on the cluster whose shape or dtype differs from the others'.

    ``bad`` holds their positions among the decode's inputs, ``specs`` every input's
    ``(shape, dtype)``, so the job can write them off and decode again without them.
    """

    def __init__(self, message: str, bad: list[int], specs: list[ResultSpec]):
        super().__init__(message)
        self.bad = list(bad)
        self.specs = list(specs)

    def __reduce__(
        self,
    ) -> tuple[type[InconsistentResults], tuple[str, list[int], list[ResultSpec]]]:
        return (type(self), (str(self), self.bad, self.specs))


class WorkerState:
    """Thread-safe per-worker registry: finished job tokens (bounded) and running evals."""

    def __init__(self, max_tokens: int | None = None):
        self.max_tokens = int(max_tokens or config.get("done-tokens"))
        self._lock = threading.Lock()
        self._done: OrderedDict[str, threading.Event] = OrderedDict()
        self._running: dict[tuple[str, int], list[float]] = {}

    def _event(self, token: str) -> threading.Event:
        with self._lock:
            ev = self._done.get(token)
            if ev is None:
                ev = self._done[token] = threading.Event()
                while len(self._done) > self.max_tokens:
                    self._done.popitem(last=False)
            return ev

    def mark_done(self, token: str) -> None:
        """Job ``token`` needs no more coded results from this worker."""
        self._event(token).set()

    def is_done(self, token: str) -> bool:
        with self._lock:
            ev = self._done.get(token)
        return ev is not None and ev.is_set()

    def wait_done(self, token: str, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking early when job ``token`` is done."""
        if timeout <= 0:
            return self.is_done(token)
        return self._event(token).wait(timeout)

    def started(self, token: str, index: int) -> float:
        start = time.perf_counter()
        with self._lock:
            self._running.setdefault((token, index), []).append(start)
        return start

    def ended(self, token: str, index: int, start: float) -> None:
        with self._lock:
            starts = self._running[(token, index)]
            starts.remove(start)
            if not starts:
                del self._running[(token, index)]

    def running(self, token: str) -> list[int]:
        """Indices of job ``token``'s evals executing here."""
        with self._lock:
            return sorted(i for (t, i) in self._running if t == token)

    def stale(self, min_age: float = 0.0) -> int:
        """Evals of finished jobs executing here for ``min_age`` seconds or more."""
        now = time.perf_counter()
        with self._lock:
            ages = [(t, now - s) for (t, _), starts in self._running.items() for s in starts]
        return sum(1 for t, age in ages if age >= min_age and self.is_done(t))


_process_state = WorkerState()  # outside a worker (task functions called directly)


@dataclass
class BaccWorker(WorkerPlugin):
    """dask-bacc's worker plugin: this worker's :class:`WorkerState`, and the ``bacc-done``
    stream handler through which the scheduler marks finished jobs."""

    name: str = PLUGIN_NAME
    state: WorkerState = field(default_factory=WorkerState, repr=False)

    def setup(self, worker: Worker) -> None:
        self.state = WorkerState()  # one per worker, even when the plugin object is shared
        worker.stream_handlers[DONE_OP] = self._done
        # in the heartbeat: the scheduler sends bacc-done only where it has a handler (a
        # stream message with an unknown op closes the worker's stream; the registration
        # may not have reached a frozen worker yet)
        worker.metrics[PLUGIN_NAME] = _ready

    def teardown(self, worker: Worker) -> None:
        # a late bacc-done must find a handler (an unknown op would drop the stream)
        worker.stream_handlers[DONE_OP] = _ignore
        worker.metrics.pop(PLUGIN_NAME, None)

    def _done(self, token: str = "", **_: object) -> None:
        self.state.mark_done(token)

    def __getstate__(self) -> dict[str, str]:
        return {"name": self.name}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.name = state["name"]
        self.state = WorkerState()


def _ready(worker: Worker) -> int:
    """The worker heartbeat's metric that says the plugin is set up here."""
    return 1


def _ignore(**_: object) -> None:
    """The ``bacc-done`` handler once the plugin is gone."""


def _worker(dask_worker: Worker | None = None) -> Worker | None:
    if dask_worker is not None:
        return dask_worker
    from distributed import get_worker

    try:
        return get_worker()
    except ValueError:
        return None


def state(dask_worker: Worker | None = None) -> WorkerState:
    """The :class:`WorkerState` of ``dask_worker`` (default: the worker running this task),
    or the process-wide one outside a worker or before the plugin is registered."""
    worker = _worker(dask_worker)
    plugin = None if worker is None else worker.plugins.get(PLUGIN_NAME)
    return plugin.state if isinstance(plugin, BaccWorker) else _process_state


def mark_done(token: str, dask_worker: Worker | None = None) -> list[int]:
    """Mark job ``token`` done on this worker; return its evals still executing here."""
    st = state(dask_worker)
    st.mark_done(token)
    return st.running(token)


def is_done(token: str) -> bool:
    """Whether job ``token`` has decoded or been cancelled (as far as this worker knows)."""
    return state().is_done(token)


def wait_done(token: str, timeout: float) -> bool:
    """Sleep up to ``timeout`` seconds, waking early when job ``token`` is done."""
    return state().wait_done(token, timeout)


def cancelled() -> bool:
    """Whether the coded job that called this function no longer needs its result.

    Call it from a long-running ``func`` (e.g. between iterations) and return early when
    it is True: the job has decoded without this task or was cancelled. Python cannot
    stop a running thread, so a cancelled straggler otherwise keeps its worker's thread
    until ``func`` returns, and the next job's task on that worker waits behind it.
    Outside a coded task it returns False.
    """
    token = getattr(_current, "token", None)
    return token is not None and is_done(token)


def stale_evals(min_age: float = 0.0, dask_worker: Worker | None = None) -> int:
    """Eval tasks of finished jobs executing on this worker for ``min_age`` seconds or
    more: stragglers whose ``func`` has not returned yet (each holds a thread)."""
    return state(dask_worker).stale(min_age)


def hold(value: T) -> T:
    """A task that holds ``value`` (in its spec, so it is recomputable)."""
    return value


def read_only(share: Share) -> Share:
    """``share`` as a read-only view (a NumPy scalar, immutable already, as it is).

    A view, not a copy: no memory, and the array it views (an input chunk, an in-memory
    client array on an in-process cluster) keeps its own flag. distributed ships the flag
    with the array (``distributed.protocol.numpy``), so a copy sent to another worker for
    a rerouted eval, or spilled and read back, stays read-only too.

    Parameters
    ----------
    share : numpy.ndarray or numpy.generic
        A coded share.

    Returns
    -------
    numpy.ndarray or numpy.generic
        A view of ``share`` that raises ``ValueError`` ("assignment destination is
        read-only") on any write.
    """
    if not isinstance(share, np.ndarray):
        return share
    view: NDArray[Any] = share.view()
    view.flags.writeable = False
    return view


def hold_share(share: Share) -> Share:
    """The task of a ``CodedData`` share of in-memory data: :func:`hold` of ``share`` (in
    its spec, so it is recomputable), :func:`read_only`.

    Every call of ``CodedData.map`` reads the same share object: an ``f`` that changed
    its block in place would change the shares of every later call (and, on an in-process
    cluster, the caller's array), so the share refuses writes and such an ``f`` raises.

    Parameters
    ----------
    share : numpy.ndarray or numpy.generic
        The coded share, encoded on the client.

    Returns
    -------
    numpy.ndarray or numpy.generic
        A read-only view of ``share``.
    """
    return read_only(share)


def encode_share(
    weights: FloatArray, chunks: list[NDArray[Any]], exact: str | None = None
) -> Share:
    """The task of a ``CodedData`` share of data on the cluster: :func:`encode_task`,
    :func:`read_only` (as :func:`hold_share`; a share that is a copy of one chunk is that
    chunk itself, which an in-place ``f`` would otherwise change for every share copying
    it).

    Parameters
    ----------
    weights : numpy.ndarray
        The nonzero weights of the share's row of the encoding matrix.
    chunks : list of numpy.ndarray
        The input chunks those weights mix.
    exact : str, optional
        As in :func:`encode_task`.

    Returns
    -------
    numpy.ndarray or numpy.generic
        The share, read-only.
    """
    return read_only(encode_task(weights, *chunks, exact=exact))


# -- eval hooks: the extension point after func ---------------------------------------------
@dataclass(frozen=True)
class EvalCall:
    """One coded eval, as an :class:`EvalHook` sees it once ``func`` has returned.

    Attributes
    ----------
    token : str
        The job's token (as in its task keys and ``report.token``).
    seq : int
        The job's number in the client process that submitted it (0, 1, 2, ...).
    index : int
        The coded task's index in ``range(N)`` (``K + j`` for a speculative backup of
        block j).
    start : float
        When the eval started, in :func:`time.perf_counter` seconds.
    worker : distributed.worker.Worker or None
        The worker running the eval (None when the task function is called outside one).
    wait : callable
        ``wait(seconds) -> bool`` sleeps up to ``seconds`` and returns True, early, once
        the job needs no more results (it has decoded or been cancelled); ``wait(0)`` only
        asks. A hook that holds the eval should wait through it, so it lets go as soon as
        the job no longer needs the result.
    """

    token: str
    seq: int
    index: int
    start: float
    worker: Worker | None
    wait: Callable[[float], bool]


class EvalHook(WorkerPlugin):
    """Base class of worker plugins that every coded eval on their worker calls.

    Subclass it, give :meth:`after_eval`, and register an instance on the cluster with
    ``client.register_plugin(hook, name=...)``: from then on each coded eval task on each
    worker (and on workers that join later) calls the hook's ``after_eval`` once ``func``
    has returned, before its result is checked and handed back; unregistering the plugin
    (``client.unregister_worker_plugin(name)``) removes it. Hooks run in the eval's thread,
    in the order their plugins were registered; while a hook runs, the eval still counts
    as executing (``stale_evals``), and an exception it raises fails the eval (the job
    writes that result off). Evals that start after their job was done return at once and
    call no hook.
    """

    def after_eval(self, call: EvalCall) -> None:
        """Called by every coded eval on this worker after ``func`` returned."""
        raise NotImplementedError


def eval_hooks(dask_worker: Worker | None = None) -> list[EvalHook]:
    """The :class:`EvalHook` plugins of ``dask_worker`` (default: the worker running this
    task), in registration order; none outside a worker."""
    worker = _worker(dask_worker)
    if worker is None:
        return []
    return [p for p in list(worker.plugins.values()) if isinstance(p, EvalHook)]


# -- the arithmetic -------------------------------------------------------------------------
def _float_dtype(arrays: Sequence[NDArray[Any]]) -> np.dtype[np.floating[Any]]:
    dtype = np.result_type(*arrays)
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


#: Bytes of the reused buffer of :func:`matmul_tiled` for a matrix of weights (the one
#: decode task of a job): large tiles keep BLAS efficient (on 24 inputs of 16-64 MB,
#: 1M-entry tiles ran at 0.6-0.8x ``tensordot`` on pre-stacked input, 64k-entry tiles at
#: 0.3-0.5x), and the buffer stays far below the inputs' size
TILE_BYTES = 128 << 20
#: Columns of a tile for one row of weights (a share's encode, N of them at once in one
#: process): the (L, tile) buffer stays in cache and NumPy's own loop runs it on one
#: thread. BLAS threads, one set per calling thread, oversubscribe the cores when every
#: worker thread encodes at once, and large buffers times N add up: on the 2M-row
#: DataFrame benchmark this took Berrut's peak memory from 7.8x to 3.4x plain's
ROW_TILE = 1 << 14


def matmul_tiled(
    weights: ArrayLike, arrays: Sequence[ArrayLike], tile: int | None = None
) -> NDArray[np.floating[Any]]:
    """``weights @ stack(arrays)`` for equal-shape arrays, without stacking them.

    ``weights`` is (R, L) for L arrays; the result is (R, *shape). Column tiles of the
    inputs are copied into one reused (L, tile) buffer and contracted tile by tile, so
    memory beyond the output is L x tile numbers: with R > 1 (a decode) BLAS on tiles of
    :data:`TILE_BYTES` in all; with R = 1 (an encode) ``np.einsum`` on :data:`ROW_TILE`
    columns. Float dtypes are kept; other numbers become float64.
    """
    arrs = [np.asarray(a) for a in arrays]
    dtype = _float_dtype(arrs)
    W = np.asarray(weights, dtype=dtype)
    one_row = W.shape[0] == 1
    if tile is None:
        tile = ROW_TILE if one_row else max(1 << 16, TILE_BYTES // (dtype.itemsize * len(arrs)))
    flat = [a.reshape(-1) for a in arrs]
    n = flat[0].size
    out = np.empty((W.shape[0], n), dtype=dtype)
    buf = np.empty((len(flat), max(1, min(tile, n))), dtype=dtype)
    for start in range(0, n, tile):
        stop = min(start + tile, n)
        block = buf[:, : stop - start]
        for row, f in enumerate(flat):
            block[row] = f[start:stop]
        if one_row:
            np.einsum("rl,ln->rn", W, block, out=out[:, start:stop])
        else:
            np.matmul(W, block, out=out[:, start:stop])
    return out.reshape((W.shape[0], *arrs[0].shape))


def weighted_sum(
    weights: ArrayLike, arrays: Sequence[ArrayLike], tile: int | None = None
) -> NDArray[np.floating[Any]] | np.floating[Any]:
    """``sum_l weights[l] * arrays[l]`` for equal-shape arrays (:func:`matmul_tiled`; a
    NumPy scalar for 0-d arrays)."""
    out: NDArray[np.floating[Any]] | np.floating[Any]
    out = matmul_tiled(np.asarray(weights)[None, :], arrays, tile)[0]
    return out


def encode_task(weights: FloatArray, *chunks: NDArray[Any], exact: str | None = None) -> Share:
    """One coded share: ``sum_j weights[j] * chunks[j]`` (only nonzero weights are passed).

    ``exact`` names an exact code whose shares mix blocks (Lagrange): 64-bit integer
    chunks beyond 2**53, which the float64 mix would round under an exact label, are
    refused (``InvalidInput``, the job's ``ValueError``)."""
    share: Share
    copy = len(chunks) == 1 and weights[0] == 1.0
    if copy:
        share = np.asarray(chunks[0])  # a copy of X_j: keep its dtype, no arithmetic
    else:
        if exact is not None:
            for chunk in chunks:
                refuse_rounded_integers(chunk, exact)
        share = weighted_sum(weights, chunks)
    if share.dtype.kind not in "biuf":
        raise InvalidInput(f"input chunks must be real numeric, got dtype {share.dtype}")
    # a copy passes NaN/inf on as plain Dask would; a mix would spread them
    if not copy and share.dtype.kind == "f" and not np.isfinite(share).all():
        raise InvalidInput(
            "input chunks contain NaN or inf; a code that mixes blocks needs finite data"
        )
    return share


# -- the coded tasks ------------------------------------------------------------------------
def eval_task(
    token: str,
    index: int,
    seq: int,
    func: Callable[..., Any],
    share: Share,
    call: tuple[tuple[Any, ...], dict[str, Any]],
    finite: bool = True,
) -> NDArray[Any] | EvalFailure | None:
    """Evaluate ``func(share, *args, **kwargs)`` for ``call = (args, kwargs)`` and check
    that the result can be decoded (``finite``: without NaN or inf, for a code that mixes
    blocks; a code that copies them passes f's NaN and inf on, as plain Dask does).

    Returns ``None`` without calling ``func`` when the job already decoded. After ``func``
    the worker's :class:`EvalHook` plugins are called, if any (their waits end early when
    the job is done). An exception raised by ``func``, or a result that cannot be decoded
    (NaN/inf, not numeric), is returned as an :class:`EvalFailure`: the task succeeds,
    the job sees the failure from the result's type alone and judges it.
    """
    worker = _worker()
    st = state(worker)
    if st.is_done(token):
        return None
    start = st.started(token, index)
    _current.token = token
    args, kwargs = call
    try:
        try:
            out = func(share, *args, **kwargs)
        except InvalidInput:
            raise  # the adapter's verdict on the input: the job turns it into ValueError
        except Exception as exc:
            # returned, not raised: the job decides whether func's exception is the
            # user's error or an erasure, and distributed does not log an expected event
            # as "Compute Failed"
            out = EvalFailure.of(exc)
        hooks = eval_hooks(worker)
        if hooks:

            def wait(seconds: float) -> bool:
                return st.wait_done(token, seconds)

            info = EvalCall(
                token=token, seq=seq, index=index, start=start, worker=worker, wait=wait
            )
            for hook in hooks:
                hook.after_eval(info)
    finally:
        _current.token = None
        st.ended(token, index, start)
    if isinstance(out, EvalFailure):
        return out
    try:
        return check_result(out, finite)
    except InvalidResult as exc:
        return EvalFailure.of(exc)


def encode_eval_task(
    token: str,
    index: int,
    seq: int,
    func: Callable[..., Any],
    weights: FloatArray,
    chunks: list[NDArray[Any]],
    call: tuple[tuple[Any, ...], dict[str, Any]],
    exact: str | None = None,
    private: bool = False,
    finite: bool = True,
) -> NDArray[Any] | EvalFailure | None:
    """Encode share ``index`` from the input chunks it mixes (``exact``: as in
    :func:`encode_task`), then :func:`eval_task` on it (data on the cluster: one task per
    coded share, no separate encode task).

    ``finite``: as in :func:`eval_task`. ``private``: a share that is one chunk itself is
    copied first. For the blocks a job
    sent from the client, which other shares read too (a repetition's other copy, on an
    in-process cluster the very same object): an ``f`` that writes to its input must not
    change what they read, as when every task had its own share in its spec."""
    if state().is_done(token):
        return None
    share = encode_task(weights, *chunks, exact=exact)
    if private and len(chunks) == 1 and share is chunks[0]:
        share = np.array(share, copy=True)
    return eval_task(token, index, seq, func, share, call, finite)


@dataclass
class EvalFailure:
    """What an eval returns instead of a result: ``func`` raised, or its result cannot be
    decoded. The job tells it from a result by the task's type (``Future.type``), with no
    transfer; it gathers the (small) failure to judge it.

    Attributes
    ----------
    kind : str
        ``"raised"`` (``func`` raised ``exception``), ``"nonfinite"`` (NaN/inf in the
        result), ``"domain"`` (outside the job's ``transform=``, :class:`OutsideTransform`),
        ``"unsupported"`` (a masked array or other ndarray subclass) or ``"invalid"``
        (not a real numeric array); ``"lost"`` on the client when the failure itself
        could not be fetched.
    reason : str
        ``"<ExceptionType>: message"``.
    exception : BaseException or None
        ``func``'s exception with its traceback (None if it could not be pickled).
    """

    kind: str
    reason: str
    exception: BaseException | None = None

    @classmethod
    def of(cls, exc: BaseException) -> EvalFailure:
        """The failure for ``exc``: ``func``'s exception, or ``check_result``'s verdict."""
        if isinstance(exc, InvalidResult):
            reason = f"InvalidResult: {exc}"  # one name for every kind, as reports read
            kinds = {
                NonFiniteResult: "nonfinite",
                OutsideTransform: "domain",
                UnsupportedResult: "unsupported",
            }
            return cls(kinds.get(type(exc), "invalid"), reason)
        return cls("raised", f"{type(exc).__name__}: {exc}", _picklable(exc))


def _picklable(exc: BaseException) -> BaseException | None:
    """``exc`` with its traceback if it survives the trip to the client (tblib, as
    distributed ships a task's exception), else None (the reason still does)."""
    import tblib.pickling_support  # type: ignore[import-untyped]
    from distributed.core import collect_causes
    from distributed.protocol import pickle

    tblib.pickling_support.install(exc, *collect_causes(exc))
    try:
        pickle.loads(pickle.dumps(exc))  # type: ignore[no-untyped-call]
    except Exception:
        return None
    return exc


def check_result(out: object, finite: bool = True) -> NDArray[Any]:
    """A result is decodable when it is a plain (not a subclass), real numeric array with
    finite entries (``finite=False``: NaN and inf allowed, for a code that only copies
    blocks)."""
    if isinstance(out, np.ndarray) and type(out) is not np.ndarray:
        # np.asarray would drop what makes it a subclass (a mask, units) without a word
        what = f"{type(out).__module__}.{type(out).__name__}"
        raise UnsupportedResult(
            f"func returned a {what}: coded results must be plain NumPy arrays, as "
            "no decode can rebuild a mask or a subclass's other state. Return a plain array "
            "(for a masked array: y.filled(fill_value), and the mask from a separate map), "
            "or run this f with plain Dask"
        )
    try:
        arr = np.asarray(out)
    except Exception as exc:  # e.g. ragged lists
        raise InvalidResult(f"result of type {type(out).__name__} is not an array: {exc}") from exc
    if arr.dtype.kind not in "biuf":
        raise InvalidResult(f"result has dtype {arr.dtype}; coded results must be real numeric")
    if finite and arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise NonFiniteResult(f"result contains {bad} NaN/inf value(s)")
    return arr


def result_shape(result: object) -> tuple[int, ...] | None:
    """The shape of an eval's result, None for a failure (a small task: the result stays
    on its worker)."""
    if result is None or isinstance(result, EvalFailure):
        return None
    return tuple(np.asarray(result).shape)


def spec_of(result: ArrayLike) -> ResultSpec:
    """``(shape, dtype.str)`` of a result."""
    arr = np.asarray(result)
    return tuple(int(s) for s in arr.shape), arr.dtype.str


def consistent(specs: Sequence[ResultSpec]) -> tuple[ResultSpec, list[int]]:
    """The majority shape with the dtype the agreeing results promote to, and the
    positions whose shape differs from it.

    Dtypes are not compared: a systematic share's exact integer result and a mixed
    share's float result of the same f agree once cast to the job's result dtype.
    """
    shape, bad = majority([s[0] for s in specs])
    dtype = np.result_type(*(np.dtype(s[1]) for s in specs if s[0] == shape))
    return (shape, dtype.str), bad


def majority(shapes: Sequence[tuple[int, ...]]) -> tuple[tuple[int, ...], list[int]]:
    """The most common of ``shapes`` (the first seen among equals) and the positions of
    the others."""
    from collections import Counter

    shape = Counter(shapes).most_common(1)[0][0]
    return shape, [p for p, s in enumerate(shapes) if s != shape]


def picks(D: ArrayLike) -> list[int] | None:
    """The result each block takes when decoding with ``D`` only picks results (every row
    one weight 1, the others 0: repetition, an exact set of a systematic code), else None.

    Such a decode is done by selection, not arithmetic: the results' dtype is kept and
    integers beyond 2**53 stay exact."""
    W = np.asarray(D)
    if W.ndim != 2 or W.size == 0:
        return None
    rows = unit_rows(W)
    return [rows[j] for j in range(W.shape[0])] if len(rows) == W.shape[0] else None


def picked_dtype(cols: list[int] | None, dtypes: Sequence[str]) -> np.dtype[Any]:
    """The dtype of a decode from results of ``dtypes``: that of the results it picks,
    ``cols`` (:func:`picks`: an integer dtype is kept even when the float results of
    mixed shares were gathered too), else (None) what they all promote to."""
    return np.result_type(*(np.dtype(dtypes[p]) for p in (cols or range(len(dtypes)))))


def sketch_task(
    result: NDArray[Any] | EvalFailure | None,
    size: int,
    seed: int,
    transform: Transform | None = None,
) -> FloatArray | None:
    """The sketch of one coded result the error estimate needs (``codes.estimate.sketch``:
    a count sketch, or a row sample for a job decoding in a transformed domain).

    Used only by adaptive (``until``) and robust (``adversaries=``) jobs whose results stay
    on the cluster: they need sketches before the decode.
    """
    if result is None or isinstance(result, EvalFailure):  # no result to sketch: its job
        return None  # had already decoded, or the eval failed (the job writes it off)
    from ..codes.estimate import sketch

    return sketch(result, size, seed, transform)


class DecodedInfo(TypedDict):
    """The small summary of a cluster decode (:func:`decoded_info`): the results' common
    shape and ``dtype.str``, their sketches (if asked for) and the check's residual."""

    shape: tuple[int, ...]
    dtype: str
    sketches: list[FloatArray] | None
    residual: float | None
    #: the largest magnitude of integer results beyond 2**53 the decode mixed (rounding
    #: them in float64), else None
    rounded: int | None


@dataclass
class Decoded:
    """What a decode on the cluster holds: the K decoded blocks and a small summary."""

    blocks: NDArray[Any]
    info: DecodedInfo


def stack_decode_task(
    D: FloatArray,
    sketch: tuple[int, int] | None,
    transform: Transform | None,
    check: FloatArray | None,
    *results: NDArray[Any],
) -> Decoded:
    """All K decoded blocks from the used results: one tiled matrix product ``D @ results``
    (then ``transform.inverse`` when the job decodes in a transformed domain), and with a
    ``check`` matrix (an exact code's spare results) the relative residual
    ``||check @ results|| / ||results||`` in the summary.

    Checks first that the results agree in shape and dtype (``InconsistentResults``
    otherwise), and sketches each result when ``sketch = (size, seed)`` is given, so the
    client estimates the error from :func:`decoded_info` without a task per result.
    """
    failed = [p for p, r in enumerate(results) if isinstance(r, EvalFailure)]
    if failed:  # their type did not reach the client (a reconnect): write them off
        specs = [((-1,), "failure") if p in failed else spec_of(r) for p, r in enumerate(results)]
        raise InconsistentResults(f"{len(failed)} result(s) are failures", failed, specs)
    specs = [spec_of(r) for r in results]
    expected, bad = consistent(specs)
    if bad:
        raise InconsistentResults(
            f"{len(bad)} result(s) differ from the shape {expected[0]} of the others",
            bad,
            specs,
        )
    cols = picks(D)
    dtype = picked_dtype(cols, [s[1] for s in specs])
    if transform is not None:
        cols = None  # the inverse map needs the decode in float
    rounded = None
    if cols is not None:  # exact copies: selected, their dtype and digits kept
        blocks = np.stack([np.asarray(results[c]) for c in cols]).astype(dtype, copy=False)
    else:
        rounded = mixed_beyond_float64(results)
        blocks = matmul_tiled(D, results)
        if transform is not None:
            blocks = transform.inverse(blocks)
    sketches = None
    if sketch is not None:
        from ..codes.estimate import sketch as sketch_of

        sketches = [sketch_of(r, sketch[0], sketch[1], transform) for r in results]
    residual = None
    if check is not None:
        # norms in float: a vdot of int64 results beyond 2**31 overflows
        total = math.hypot(*(float(np.linalg.norm(r)) for r in results))
        off = float(np.linalg.norm(matmul_tiled(check, results)))
        residual = off / total if total else 0.0
    info: DecodedInfo = {
        "shape": expected[0],
        "dtype": dtype.str,
        "sketches": sketches,
        "residual": residual,
        "rounded": rounded,
    }
    return Decoded(blocks, info)


def mixed_beyond_float64(results: Sequence[ArrayLike]) -> int | None:
    """The largest magnitude of 64-bit integer ``results`` beyond 2**53, which a decode by
    arithmetic rounds (float64), else None."""
    tops = [t for t in map(beyond_float64, results) if t is not None]
    return max(tops) if tops else None


def decoded_block(decoded: Decoded, j: int) -> NDArray[Any]:
    """Output block ``j`` of a cluster decode (a copy, so it does not pin the others)."""
    return np.array(decoded.blocks[j])


def decoded_info(decoded: Decoded) -> DecodedInfo:
    """The small summary of a cluster decode the client gathers."""
    return decoded.info


def decode_task(weights: FloatArray, *results: NDArray[Any]) -> Share:
    """One decoded block: ``sum_l weights[l] * results[l]`` (only nonzero weights passed)."""
    if len(results) == 1 and weights[0] == 1.0:
        return np.asarray(results[0])  # exact copy (repetition, coincident points)
    return weighted_sum(weights, results)


def run_started(
    token: str, block: int, copy: int, func: Callable[..., T], /, *args: Any, **kwargs: Any
) -> T:
    """Copy ``copy`` of block ``block`` of a redundant layer (``runtime.redundant``): tell
    the job which worker started it, then run it. The late-copy rule needs the run time of
    the copies still running, which the scheduler does not know (it sees a task assigned,
    not started). Positional-only: the task's own keywords (``block=``, ``func=`` ...) pass
    through."""
    worker = _worker()
    if worker is not None:
        worker.log_event(keys.start_topic(token), [block, copy, worker.address])
    return func(*args, **kwargs)
