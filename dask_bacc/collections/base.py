"""What every input adapter provides: K equal blocks in, an output of the same kind back."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "FLOAT64_INTEGER_LIMIT",
    "Blocks",
    "beyond_float64",
    "check_dtype",
    "combine_rule",
    "lossy_cast",
    "undeclared_values_message",
]

COMBINE_CHOICES = ("auto", "concat", "stack")

#: float64 holds every integer of magnitude up to 2**53 exactly (its 53-bit significand)
#: and rounds some larger ones. ``codes.base`` has the same check: collections/ may not
#: import codes/ (tests/test_package.py::test_layers_import_one_way).
FLOAT64_INTEGER_LIMIT = 2**53


def beyond_float64(values: Any) -> int | None:
    """The largest magnitude in integer ``values`` when it exceeds 2**53 (float64 would
    round some of them), else None (float data, or integers float64 holds exactly).

    Only 64-bit integers can exceed it: smaller integer dtypes always fit.
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu" or arr.dtype.itemsize < 8 or arr.size == 0:
        return None
    # Python ints: -int64.min and uint64.max do not fit in the array's own dtype
    top = max(int(arr.max()), -int(arr.min()))
    return top if top > FLOAT64_INTEGER_LIMIT else None


def rounding_message(
    what: str, dtype: Any, top: int, beside: str, fix: str, output: bool = False
) -> str:
    """Why integers beyond 2**53 that would be stacked with other dtypes into one float64
    array are refused, and what to do (``fix``, the kind's own spelling of it).

    Parameters
    ----------
    what : str
        The column, variable or block, e.g. ``"data column 'i'"``.
    dtype : dtype
        Its dtype.
    top : int
        Its largest magnitude (:func:`beyond_float64`).
    beside : str
        What forces float64, e.g. ``"the float column(s) ['f']"``.
    fix : str
        How to cast it explicitly, or to code it on its own, for this kind of data.
    output : bool
        ``what`` is part of f's output (decoded), not of the data (which f sees).
    """
    seen = "" if output else "f would see them rounded, and "
    return (
        f"{what} ({dtype}) holds integers beyond 2**53 (up to {top}): beside {beside} it "
        "would be coded in one float64 array with them, which rounds such integers, so "
        f"{seen}an exact decode (repetition, a systematic code's exact set, Lagrange) would "
        f"return other integers than f's own. {fix}"
    )


def lossy_cast(values: Any, dtype: Any) -> str | None:
    """What a cast of ``values`` to ``dtype`` would change, in words (``"NaN"``,
    ``"inf"``, ``"fractions"``, ``"values out of its range"``), or None when it keeps
    every value. Integers beyond 2**53 cast to float64 are :func:`beyond_float64`'s
    (callers refuse them with their own advice): here they count as kept.

    Only the casts NumPy does not call safe are looked at, so the usual case (the data
    in its declared dtype) costs a dtype comparison.
    """
    arr = np.asarray(values)
    target = np.dtype(dtype)
    if arr.dtype == target or np.can_cast(arr.dtype, target, "safe"):
        return None
    if arr.dtype.kind in "iub" and target.kind == "f":
        return None  # beyond 2**53: beyond_float64's
    if arr.dtype.kind in "fc" and target.kind in "biu":
        if np.isnan(arr).any():
            return "NaN"
        if np.isinf(arr).any():
            return "inf"
        if target.kind == "b":
            return None if np.isin(arr, (0, 1)).all() else "values other than 0 and 1"
        if (arr != np.trunc(arr)).any():
            return "fractions"
        info = np.iinfo(target)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            return "values out of its range"
        return None
    with np.errstate(all="ignore"):
        back = arr.astype(target).astype(arr.dtype)
    same = np.array_equal(back, arr, equal_nan=arr.dtype.kind in "fc")
    return None if same else "values out of its range"


def undeclared_values_message(what: str, found: str, own: Any, declared: Any) -> str:
    """Why data whose values its declared dtype cannot hold is refused: it is coded in
    the declared dtype, and the cast would change it (NaN read as int64 is -9.2e18)
    where plain Dask hands f the values unchanged. The advice works when followed: NaN
    and inf need filling too under a code that mixes blocks."""
    fill = (
        " and fill them (e.g. fillna): a code that mixes blocks needs finite numbers"
        if found in ("NaN", "inf")
        else ""
    )
    return (
        f"{what} holds {found} in dtype {own}, but the collection declares it "
        f"{np.dtype(declared)} (its meta or dtype): the data is coded in the declared "
        f"dtype, and the cast would change those values, where plain Dask gives f them "
        f"unchanged. Declare the real dtype before the map (meta=/dtype=/template= with "
        f"{own}, or .astype('float64')){fill}; or use an exact code that copies blocks "
        f"(code='repetition', 'hedged' or 'speculative'), which runs f on the chunks as "
        f"plain Dask does"
    )


def check_dtype(dtype: np.dtype, what: str = "data") -> np.dtype:
    """Coded computing mixes blocks linearly: only real numbers (bool/int/uint/float)."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "biuf":
        raise TypeError(
            f"{what} has dtype {dtype}; coded computing needs real numeric data "
            "(bool, integer or float), not object, complex, string or datetime"
        )
    return dtype


def combine_rule(combine: str, out_shape: tuple[int, ...], block_rows: int | None) -> str:
    """``"concat"`` or ``"stack"`` for f's per-block output shape.

    ``"auto"`` concatenates along axis 0 when f keeps the rows of its block (its output's
    first dimension equals the block's), and stacks into a new leading axis of length K
    otherwise (f reduces a block, e.g. to a scalar or to per-column statistics).
    """
    if combine not in COMBINE_CHOICES:
        raise ValueError(f"combine must be one of {COMBINE_CHOICES}, got {combine!r}")
    if combine != "auto":
        if combine == "concat" and len(out_shape) == 0:
            raise ValueError(
                "f returns a 0-d scalar per block, which cannot be joined along axis 0 "
                "(combine='concat'; coded() joins the blocks of x.map_blocks so): return "
                "it with the block's dimensions, as the map's chunks declare (e.g. "
                "b.sum(keepdims=True)); map_coded also takes combine='stack'"
            )
        return combine
    if block_rows is not None and len(out_shape) >= 1 and out_shape[0] == block_rows:
        return "concat"
    return "stack"


class Blocks:
    """K equal-shape blocks of the user's data.

    Attributes
    ----------
    K : int
        Number of blocks.
    block_shape : tuple of int
        Shape of every block.
    dtype : numpy.dtype
        Dtype of the data.
    gather_output : bool
        True when the output is built from decoded values on the client (NumPy input),
        False when it is built lazily from the decoded futures (dask input).
    """

    kind = "abstract"
    gather_output = True
    #: The decode gives f's own outputs (an exact code that copies, no transform): the
    #: rebuild may restore per-column dtypes that travelled as one float dtype. The job
    #: sets it.
    exact_decode = False
    #: The blocks are in this process (NumPy): encoding them here costs one matmul and ships
    #: N coded shares, instead of K chunks that every one of N encode tasks must fetch.
    local = False

    def __init__(self, K: int, block_shape: tuple[int, ...], dtype: np.dtype):
        if K < 1:
            raise ValueError("data is empty: there are no blocks to map over")
        if 0 in block_shape:
            raise ValueError(f"blocks are empty (block shape {block_shape})")
        self.K = K
        self.block_shape = tuple(int(s) for s in block_shape)
        self.dtype = np.dtype(dtype)

    #: f's output length may depend on the values and nothing about the map declares it
    #: (pandas: a row filter, ``drop_duplicates``); a job that mixes blocks then checks
    #: it on real data. Not for arrays (the map declares its chunks) nor xarray (the
    #: template its sizes).
    length_varies = False

    def length_unproven(self, out_shape: tuple[int, ...]) -> bool:
        """Whether f's output of ``out_shape`` per block does not keep the block's rows
        and has rows of its own, whose number nothing fixes (with :attr:`length_varies`)."""
        return False

    @property
    def block_rows(self) -> int | None:
        return self.block_shape[0] if self.block_shape else None

    def forget(self) -> None:
        """Drop what :meth:`to_futures` keeps on the cluster besides the block futures
        (a failed or cancelled job's inputs must leave the scheduler at once)."""

    async def to_futures(self, client: Any) -> list[Any]:
        """Futures of the K blocks on the cluster (one per block, in order).

        By default one task per block of :meth:`stacked` (blocks held in this process):
        tasks, not scatter, because the scheduler keeps each block in its task spec, so a
        block lost with its worker is recomputed elsewhere (scattered data would be gone).
        Adapters whose blocks are on the cluster override this.
        """
        name = f"bacc-chunk-{uuid.uuid4().hex}"
        return [
            client.submit(np.asarray, block, key=(name, j))
            for j, block in enumerate(self.stacked())
        ]

    def wrap(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """What runs on each coded share (a NumPy array of ``block_shape``).

        Called once on the client before anything is submitted. The default runs ``func``
        on the array itself; labelled adapters (dataframes, xarray) return a picklable
        callable that rebuilds the labelled block around the share, calls ``func`` and
        turns its output back into an array. They may run ``func`` on a small mock block
        here to learn the output's labels, and raise ``TypeError``/``ValueError`` early.
        """
        return func

    def check_finite(self) -> None:
        """Raise ``ValueError`` when the blocks (``local`` adapters) hold NaN or inf: a
        code that mixes blocks would spread them to every block it mixes. The runtime
        calls it for those codes only; a code that copies blocks (repetition, hedged,
        speculative) passes NaN and inf through, as plain Dask does. Adapters whose
        blocks are on the cluster check the shares where they are encoded."""
        if self.local:
            refuse_nonfinite(self.stacked(), "data")

    def stacked(self) -> np.ndarray:
        """The K blocks as one (K, ...) array (``local`` adapters only)."""
        raise NotImplementedError(f"{type(self).__name__} keeps its blocks on the cluster")

    def assemble(
        self,
        decoded: Sequence[Any],
        out_shape: tuple[int, ...],
        out_dtype: np.dtype,
        combine: str = "auto",
    ) -> Any:
        """Build the output from the K decoded blocks (values or futures)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} K={self.K} block_shape={self.block_shape} dtype={self.dtype}>"
        )


def refuse_nonfinite(arr: np.ndarray, what: str) -> None:
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ValueError(
            f"{what} contains NaN or inf; a code that mixes blocks needs finite data (the "
            "exact codes that copy blocks, repetition, hedged and speculative, pass them "
            "through)"
        )
