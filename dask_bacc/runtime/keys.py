"""Every ``bacc-*`` task key, built and parsed in one place.

Keys are ``(f"bacc-<kind>-<token>", index)`` tuples (or a plain string for one-off tasks)
with a 32-digit hex token, so the dashboard's task stream groups a job's tasks by prefix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FAILURE_TYPE",
    "KINDS",
    "ParsedKey",
    "args_key",
    "chunk_key",
    "copy_key",
    "decode_key",
    "driver_key",
    "eval_key",
    "function_key",
    "info_key",
    "parse",
    "primary_key",
    "share_key",
    "sketch_key",
    "stack_key",
    "start_topic",
]

#: The type name the scheduler records (``TaskState.type``) for an eval that returned an
#: ``runtime.worker.EvalFailure`` (func raised, NaN/inf): the task is in memory, yet failed
FAILURE_TYPE = "dask_bacc.runtime.worker.EvalFailure"

#: eval: coded task i; backup: speculative copy of block i - K; decode: output block j of
#: decode round r; stack: the K blocks of a cluster decode (one task); info: its shapes,
#: dtypes and sketches; encode: a share kept by ``CodedData``; sketch: a result's sketch
#: (adaptive or robust jobs on the cluster); args: func's large arguments; chunk: an
#: in-memory block shipped to the cluster; driver: the task running a rewritten collection;
#: primary, copy: the two copies of block i of an exact redundant layer (``runtime.redundant``);
#: probe: f on a real block, to check the length of an output nothing fixes
KINDS = (
    "eval",
    "backup",
    "decode",
    "stack",
    "info",
    "encode",
    "sketch",
    "args",
    "chunk",
    "driver",
    "primary",
    "copy",
    "probe",
)
_KEY = re.compile(r"^bacc-(" + "|".join(KINDS) + r")-([0-9a-f]{32})(?:-r(\d+))?$")


@dataclass(frozen=True)
class ParsedKey:
    """What a ``bacc-*`` key names: its kind, its job's token, its index and decode round."""

    kind: str
    token: str
    index: int | None = None
    round: int = 1


def _name(kind: str, token: str, round: int = 1) -> str:
    return f"bacc-{kind}-{token}" + (f"-r{round}" if round > 1 else "")


def eval_key(token: str, i: int, backup: bool = False, round: int = 1) -> tuple[str, int]:
    """Coded task ``i`` (a speculative backup: ``backup=True``); ``round`` > 1: launched
    again after an input block it read was lost (:class:`~.sending.ClientBlocks`)."""
    return (_name("backup" if backup else "eval", token, round), i)


def chunk_key(token: str, j: int, round: int = 1) -> tuple[str, int]:
    """In-memory input block ``j`` of a job, sent to the cluster; ``round`` > 1: sent again
    (its holder left or froze), under a key no worker has seen."""
    return (_name("chunk", token, round), j)


def decode_key(token: str, j: int, round: int = 1) -> tuple[str, int]:
    """Decoded output block ``j`` of decode round ``round`` (a redo after bad results)."""
    return (_name("decode", token, round), j)


def stack_key(token: str, round: int = 1) -> tuple[str, int]:
    """The task holding all K decoded blocks of a decode on the cluster."""
    return (_name("stack", token, round), 0)


def info_key(token: str, round: int = 1) -> tuple[str, int]:
    """The small summary (shapes, dtypes, sketches) of a decode on the cluster."""
    return (_name("info", token, round), 0)


def share_key(token: str, i: int) -> tuple[str, int]:
    """Coded share ``i`` kept on the cluster by ``CodedData``."""
    return (_name("encode", token), i)


def sketch_key(token: str, i: int) -> tuple[str, int]:
    return (_name("sketch", token), i)


def primary_key(token: str, i: int) -> tuple[str, int]:
    """The primary copy of block ``i`` of a redundant layer (the task as the layer has it)."""
    return (_name("primary", token), i)


def copy_key(token: str, i: int, round: int = 1) -> tuple[str, int]:
    """Backup copy ``round`` of block ``i`` of a redundant layer (1: the first backup)."""
    return (_name("copy", token, round), i)


def start_topic(token: str) -> str:
    """The event topic where the primaries of a speculative layer say they started."""
    return _name("start", token)


def args_key(token: str) -> str:
    return _name("args", token)


def driver_key(token: str) -> str:
    return _name("driver", token)


def probe_key(token: str) -> str:
    return _name("probe", token)


def parse(key: object) -> ParsedKey | None:
    """The parts of a ``bacc-*`` key, or None for any other key (or any other value)."""
    name, index = (key[0], key[1]) if isinstance(key, tuple) and len(key) == 2 else (key, None)
    if not isinstance(name, str) or not name.startswith("bacc-"):
        return None
    m = _KEY.match(name)
    if m is None:
        return None
    kind, token, rnd = m.groups()
    return ParsedKey(kind, token, None if index is None else int(index), int(rnd or 1))


def function_key(func: Any) -> str:
    """The name a function's calibration is kept under: module and qualified name (of the
    wrapped function, for a ``functools.partial``), and the line of a lambda."""
    inner = getattr(func, "func", func)
    name = getattr(inner, "__qualname__", None) or type(inner).__qualname__
    code = getattr(inner, "__code__", None)
    if "<lambda>" in name and code is not None:  # every lambda of a module has one name
        name += f"@{code.co_firstlineno}"
    return f"{getattr(inner, '__module__', None) or ''}.{name}"
