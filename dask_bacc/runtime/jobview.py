"""What a coded job's collaborators see of it: the launch policies (:mod:`.launch`) and
the error estimates (:mod:`.quality`) work on a :class:`JobView`, so neither imports the
job (:mod:`.job` imports them), and a launch over encoded data sees the data as a
:class:`SharesView`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from dask._task_spec import TaskRef
    from distributed import Client, Future
    from numpy.typing import NDArray

    from ..codes import Code
    from ..codes.transform import Transform
    from ..collections import Blocks
    from . import _dist
    from .decide import Decider
    from .graph import TaskSpec
    from .report import JobReport
    from .sending import ClientBlocks
    from .wait import WaitPolicy

__all__ = ["CallArg", "JobView", "SharesView"]

#: ``(args, kwargs)`` of f, in the eval specs, or a reference to the one task holding them
CallArg: TypeAlias = "tuple[tuple[Any, ...], dict[str, Any]] | TaskRef"


class JobView(Protocol):
    """A coded job as its launch policy and its quality checks use it
    (:class:`~dask_bacc.CodedJob` is one)."""

    client: Client
    token: str
    seq: int
    code: Code
    blocks: Blocks
    func: Callable[..., Any]
    transform: Transform | None
    policy: WaitPolicy
    report: JobReport
    decider: Decider
    #: coded task index -> its worker
    workers: dict[int, str]
    #: some share mixes blocks
    mixes: bool
    sent: ClientBlocks | None
    _chunks: list[Future[Any]]
    _evals: dict[int, Future[Any]]
    _values: dict[int, NDArray[Any]]
    _ac: _dist.FutureQueue | None
    _start: float

    @property
    def decode_here(self) -> bool: ...

    def _elapsed(self) -> float: ...

    def warn(self, warning: Warning) -> None: ...

    def eval_spec(
        self,
        i: int,
        share: Any,
        call: CallArg,
        backup: bool = False,
        round: int = 1,
    ) -> TaskSpec: ...

    def _launch_graph(self, tasks: list[TaskSpec]) -> None: ...

    async def gather_values(self, indices: list[int]) -> None: ...

    async def watched_gather(
        self, want: dict[int, Future[Any]], timeout: float | None = None
    ) -> dict[int, Any]: ...


class SharesView(Protocol):
    """Encoded data (:class:`~dask_bacc.CodedData`) as a launch over its shares uses it."""

    shares: list[Future[Any]]

    def hold_for_next_call(self, job: JobView, running: dict[int, Future[Any]]) -> None: ...
