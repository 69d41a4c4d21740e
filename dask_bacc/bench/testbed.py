"""A test bed of real processes for benchmarks: one ``dask scheduler`` and W ``dask worker``.

Unlike :class:`distributed.LocalCluster`, each server is its own process, started from the
command line as in a deployment, and the harness owns them: :meth:`Testbed.start` starts
them and waits until every worker has joined, :meth:`Testbed.close` (or leaving a ``with``
block, or the interpreter's exit) stops them all and removes their files::

    from dask_bacc.bench.testbed import Testbed

    with Testbed(4, hosts=2) as bed, bed.client() as client:
        client.map(f, range(100))  # on the workers h0-w0, h1-w1, h0-w2, h1-w3

Workers are named ``h<host>-w<i>``, spread round-robin over ``hosts`` hosts;
:func:`dask_bacc.testing.host_of` and the per-host straggler models
(:class:`~dask_bacc.testing.SlowHosts`, :class:`~dask_bacc.testing.CorrelatedHosts`,
:class:`~dask_bacc.testing.MovingSlowSet`) read the host from the name.

With ``emulate_hosts=True`` (root, and the ``ip`` command, needed) each host is a Linux
network namespace joined to a bridge in the root namespace by a veth pair: traffic between
workers on different hosts crosses two veths and the bridge, and ``bandwidth=`` caps each
host's link with a ``tbf`` qdisc on both ends of its veth (the workers on one host share
it). :meth:`Testbed.link_bytes` reads the bytes each host's link carried.
"""

from __future__ import annotations

import atexit
import ipaddress
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from distributed import Client

from ..testing.stragglers import host_of as _host_of

__all__ = ["Testbed", "TestbedProcess"]

_instances = itertools.count()
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"

#: Seconds a server gets to exit after SIGTERM before its process group is killed.
TERM_TIMEOUT = 10.0


@dataclass
class TestbedProcess:
    """One server process of a :class:`Testbed`.

    Attributes
    ----------
    name : str
        ``"scheduler"`` or the worker's name.
    popen : subprocess.Popen
        The process (the leader of its own session and process group).
    log : pathlib.Path
        Its stdout and stderr.
    """

    __test__ = False  # not a pytest test class

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        """The process id (also its process group's id)."""
        return self.popen.pid

    def tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of its log."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Testbed:
    """A ``dask scheduler`` process and ``workers`` ``dask worker`` processes.

    Parameters
    ----------
    workers : int
        How many worker processes (each ``--nworkers 1``), >= 1.
    hosts : int
        How many hosts the workers are spread over, round-robin: worker ``i`` is named
        ``h{i % hosts}-w{i}``. Without ``emulate_hosts`` the hosts are only names.
    threads : int
        Threads per worker (``--nthreads``); also ``OMP_NUM_THREADS``,
        ``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` of the workers, so that BLAS does
        not oversubscribe the cores.
    emulate_hosts : bool
        Run each host's workers in a network namespace of its own, linked to the
        scheduler's (the root) namespace by a veth pair and a bridge. Needs root and the
        ``ip`` command (and ``tc`` for ``bandwidth``).
    bandwidth : str, optional
        With ``emulate_hosts``: the rate of each host's link, in ``tc`` units (e.g.
        ``"100mbit"``), both ways, shared by the host's workers.
    memory_limit : str
        The workers' ``--memory-limit`` (``"0"``: none).
    env : mapping of str to str, optional
        More environment variables for the workers (over this process's environment).
    startup_timeout : float
        Seconds for the scheduler to come up, and again for every worker to join.
    python : str
        The Python interpreter to run the servers with (it must have ``distributed``).
    nanny : bool
        Start each worker under a nanny (``dask worker``'s default) or not (``--no-nanny``:
        one process per worker, quicker to start).
    keep_tmpdir : bool
        Leave the temporary directory (logs, scheduler file, worker space) on close.

    Attributes
    ----------
    address : str
        The scheduler's address, e.g. ``"tcp://127.0.0.1:PORT"`` (set by :meth:`start`).
    worker_names : list of str
        ``["h0-w0", "h1-w1", ...]``.
    tmpdir : pathlib.Path or None
        The directory of the logs and the scheduler file while running.
    processes : list of TestbedProcess
        The server processes, the scheduler first.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        workers: int,
        *,
        hosts: int = 1,
        threads: int = 1,
        emulate_hosts: bool = False,
        bandwidth: str | None = None,
        memory_limit: str = "0",
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 60.0,
        python: str = sys.executable,
        nanny: bool = True,
        keep_tmpdir: bool = False,
    ) -> None:
        for name, value in (("workers", workers), ("hosts", hosts), ("threads", threads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if hosts > workers:
            raise ValueError(f"hosts ({hosts}) must be <= workers ({workers})")
        if emulate_hosts and hosts > 200:
            raise ValueError(f"at most 200 emulated hosts, got {hosts}")
        if bandwidth is not None and not emulate_hosts:
            raise ValueError("bandwidth= needs emulate_hosts=True")
        if not startup_timeout > 0:
            raise ValueError(f"startup_timeout must be > 0, got {startup_timeout}")
        self.n_workers = workers
        self.hosts = hosts
        self.threads = threads
        self.emulate_hosts = emulate_hosts
        self.bandwidth = bandwidth
        self.memory_limit = str(memory_limit)
        self.env = dict(env or {})
        self.startup_timeout = float(startup_timeout)
        self.python = python
        self.nanny = nanny
        self.keep_tmpdir = keep_tmpdir
        self.worker_names = [f"h{i % hosts}-w{i}" for i in range(workers)]
        self.address = ""
        self.tmpdir: Path | None = None
        self.processes: list[TestbedProcess] = []
        self._net: _Network | None = None
        self._started = False
        self._closed = False

    # -- the public API ---------------------------------------------------------------------
    def host_of(self, name: str) -> str:
        """The host of worker ``name`` (``"h0"`` for ``"h0-w2"``)."""
        return _host_of(name)

    @property
    def host_names(self) -> list[str]:
        """``["h0", "h1", ...]``."""
        return [f"h{h}" for h in range(self.hosts)]

    def client(self, **kwargs: Any) -> Client:
        """A new :class:`distributed.Client` connected to the scheduler (close it yourself)."""
        if not self.address:
            raise RuntimeError("the test bed is not running: call start() first")
        return Client(self.address, **kwargs)

    def link_bytes(self) -> dict[str, tuple[int, int]] | None:
        """Bytes each emulated host sent and received on its link: ``{host: (tx, rx)}``.

        Read from the root end of the host's veth (``/sys/class/net/<dev>/statistics``):
        what the host sent is what that end received. None without ``emulate_hosts``.
        """
        if self._net is None:
            return None
        return self._net.link_bytes()

    def namespaces(self) -> dict[str, str]:
        """The network namespace of each emulated host (empty without ``emulate_hosts``)."""
        if self._net is None:
            return {}
        return {host: self._net.netns(h) for h, host in enumerate(self.host_names)}

    def start(self) -> Testbed:
        """Start the scheduler and the workers; return when all workers have joined.

        Raises
        ------
        RuntimeError
            If the scheduler or a worker does not come up within ``startup_timeout`` (or
            exits), after stopping whatever had started: the message says how many workers
            joined and ends with the failed process's log.
        """
        if self._closed:
            raise RuntimeError("a closed test bed cannot start again; make a new one")
        if self._started:
            return self
        self._started = True
        atexit.register(self.close)
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop the workers, then the scheduler, remove the namespaces and the files.

        Idempotent. Each server gets SIGTERM and :data:`TERM_TIMEOUT` seconds, then its
        whole process group is killed; every process is waited for (no zombies).
        """
        if self._closed:
            return
        workers = [p for p in self.processes if p.name != "scheduler"]
        scheduler = [p for p in self.processes if p.name == "scheduler"]
        # each step runs even if an earlier one is interrupted (a second Ctrl-C, a
        # SIGTERM handler that raises SystemExit)
        try:
            _stop(workers)
        finally:
            try:
                _stop(scheduler)
            finally:
                try:
                    if self._net is not None:
                        self._net.teardown()
                finally:
                    if self.tmpdir is not None and not self.keep_tmpdir:
                        shutil.rmtree(self.tmpdir, ignore_errors=True)
                    self.address = ""
                    self._closed = True
                    atexit.unregister(self.close)

    def __enter__(self) -> Testbed:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else self.address or "not started"
        return f"<Testbed {self.n_workers} workers on {self.hosts} hosts: {state}>"

    # -- starting ---------------------------------------------------------------------------
    def _start(self) -> None:
        self.tmpdir = Path(tempfile.mkdtemp(prefix="bacc-testbed-"))
        scheduler_host = "127.0.0.1"
        if self.emulate_hosts:
            self._net = _Network.create(self.hosts, self.bandwidth)
            scheduler_host = self._net.bridge_ip
        scheduler_file = self.tmpdir / "scheduler.json"
        scheduler = self._spawn(
            "scheduler",
            [
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                scheduler_host,
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(scheduler_file),
            ],
            dict(os.environ),
        )
        self.address = self._wait_for_scheduler(scheduler, scheduler_file)

        worker_env = dict(os.environ)
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            worker_env[var] = str(self.threads)
        worker_env.update(self.env)
        for i, name in enumerate(self.worker_names):
            h = i % self.hosts
            args = [
                "-m",
                "distributed.cli.dask_worker",
                self.address,
                "--nthreads",
                str(self.threads),
                "--nworkers",
                "1",
                "--name",
                name,
                "--memory-limit",
                self.memory_limit,
                "--no-dashboard",
                "--nanny" if self.nanny else "--no-nanny",
                "--local-directory",
                str(self.tmpdir),
            ]
            prefix: list[str] = []
            if self._net is not None:
                args += ["--host", self._net.host_ip(h)]
                prefix = ["ip", "netns", "exec", self._net.netns(h)]
            self._spawn(name, args, worker_env, prefix)
        self._wait_for_workers()

    def _spawn(
        self, name: str, args: Sequence[str], env: Mapping[str, str], prefix: Sequence[str] = ()
    ) -> TestbedProcess:
        assert self.tmpdir is not None
        log = self.tmpdir / f"{name}.log"
        with log.open("wb") as out:  # the child keeps its own descriptor
            try:
                popen = subprocess.Popen(
                    [*prefix, self.python, *args],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=dict(env),
                    cwd=self.tmpdir,
                    start_new_session=True,
                )
            except OSError as e:
                raise RuntimeError(
                    f"test bed: could not start the {name} with {self.python!r}: {e}"
                ) from e
        proc = TestbedProcess(name, popen, log)
        self.processes.append(proc)
        return proc

    def _wait_for_scheduler(self, scheduler: TestbedProcess, scheduler_file: Path) -> str:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if scheduler_file.exists():
                try:
                    address = json.loads(scheduler_file.read_text())["address"]
                except (ValueError, KeyError):  # being written
                    pass
                else:
                    return str(address)
            if scheduler.popen.poll() is not None:
                raise RuntimeError(
                    f"test bed: the scheduler exited with code {scheduler.popen.returncode} "
                    f"before writing its address; its log ends:\n{scheduler.tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"test bed: the scheduler did not write {scheduler_file} within "
                    f"{self.startup_timeout} s; its log ends:\n{scheduler.tail()}"
                )
            time.sleep(0.05)

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        with Client(self.address, timeout=self.startup_timeout) as client:
            while True:
                joined = len(client.scheduler_info(n_workers=-1)["workers"])
                if joined >= self.n_workers:
                    return
                dead = [p for p in self.processes if p.popen.poll() is not None]
                if dead or time.monotonic() > deadline:
                    culprit = dead[0] if dead else self.processes[-1]
                    why = (
                        f"the {culprit.name} exited with code {culprit.popen.returncode}"
                        if dead
                        else f"timed out after {self.startup_timeout} s"
                    )
                    raise RuntimeError(
                        f"test bed: {joined} of {self.n_workers} workers came up ({why}); "
                        f"the {culprit.name}'s log ends:\n{culprit.tail()}"
                    )
                time.sleep(0.1)


def _stop(procs: Sequence[TestbedProcess], timeout: float = TERM_TIMEOUT) -> None:
    """SIGTERM each leader, wait up to ``timeout``, then SIGKILL each whole process group."""
    try:
        for p in procs:
            if p.popen.poll() is None:
                _signal(p.pid, signal.SIGTERM, group=False)
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    finally:  # also when the wait is interrupted
        for p in procs:
            # the group outlives a leader that exited (a nanny's worker): sweep it too
            _signal(p.pid, signal.SIGKILL, group=True)
            p.popen.wait()


def _signal(pid: int, sig: int, *, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# -- emulated hosts ---------------------------------------------------------------------------
def _run(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"test bed: {' '.join(cmd)} failed: {done.stderr.strip()}")
    return done.stdout


def _taken_subnets() -> set[int]:
    """Third octets of the 10.213.x.0/24 networks with an address here already."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True)
    taken = set()
    for word in out.stdout.split():
        if word.startswith("10.213."):
            try:
                taken.add(int(ipaddress.ip_interface(word).ip.packed[2]))
            except ValueError:
                pass
    return taken


class _Network:
    """A bridge in the root namespace and, per host, a namespace with a veth to it."""

    def __init__(self, hosts: int, token: str, octet: int) -> None:
        self.hosts = hosts
        self.token = token
        self.octet = octet
        self.bridge = f"bacc{token}"
        self.created_bridge = False
        self.created_ns: list[int] = []
        for name in (self.bridge, self.veth_root(hosts - 1), self.veth_host(hosts - 1)):
            assert len(name) <= 15, name

    @property
    def bridge_ip(self) -> str:
        return f"10.213.{self.octet}.1"

    def host_ip(self, h: int) -> str:
        return f"10.213.{self.octet}.{10 + h}"

    def netns(self, h: int) -> str:
        return f"bacc-{self.token}-h{h}"

    def veth_root(self, h: int) -> str:
        return f"bv{self.token}h{h}"

    def veth_host(self, h: int) -> str:
        return f"bp{self.token}h{h}"

    @classmethod
    def create(cls, hosts: int, bandwidth: str | None) -> _Network:
        if os.geteuid() != 0:
            raise RuntimeError("test bed: emulate_hosts=True needs root (network namespaces)")
        if shutil.which("ip") is None:
            raise RuntimeError("test bed: emulate_hosts=True needs the `ip` command (iproute2)")
        if bandwidth is not None and shutil.which("tc") is None:
            raise RuntimeError("test bed: bandwidth= needs the `tc` command (iproute2)")
        pid = os.getpid()
        token = f"{pid:x}"[-6:] + _BASE36[next(_instances) % 36]
        taken = _taken_subnets()
        free = [x for x in range(2, 254) if x not in taken]
        if not free:
            raise RuntimeError("test bed: no free 10.213.x.0/24 network for emulated hosts")
        octet = free[pid % len(free)]
        net = cls(hosts, token, octet)
        try:
            net._build(bandwidth)
        except BaseException:
            net.teardown()
            raise
        return net

    def _build(self, bandwidth: str | None) -> None:
        _run("ip", "link", "add", "name", self.bridge, "type", "bridge")
        self.created_bridge = True
        _run("ip", "addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for h in range(self.hosts):
            ns, root, peer = self.netns(h), self.veth_root(h), self.veth_host(h)
            _run("ip", "netns", "add", ns)
            self.created_ns.append(h)
            _run("ip", "link", "add", root, "type", "veth", "peer", "name", peer)
            _run("ip", "link", "set", peer, "netns", ns)
            _run("ip", "link", "set", root, "master", self.bridge)
            _run("ip", "link", "set", root, "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.host_ip(h)}/24", "dev", peer)
            _run("ip", "-n", ns, "link", "set", peer, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            if bandwidth is not None:
                tbf = ["root", "tbf", "rate", bandwidth, "burst", "32kbit", "latency", "400ms"]
                _run("tc", "qdisc", "add", "dev", root, *tbf)
                _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", peer, *tbf)

    def link_bytes(self) -> dict[str, tuple[int, int]]:
        out = {}
        for h in range(self.hosts):
            stats = Path("/sys/class/net") / self.veth_root(h) / "statistics"
            host_tx = int((stats / "rx_bytes").read_text())
            host_rx = int((stats / "tx_bytes").read_text())
            out[f"h{h}"] = (host_tx, host_rx)
        return out

    def teardown(self) -> None:
        for h in self.created_ns:
            # deleting the namespace deletes its veth end, and with it the pair
            subprocess.run(["ip", "netns", "del", self.netns(h)], capture_output=True)
            subprocess.run(["ip", "link", "del", self.veth_root(h)], capture_output=True)
        self.created_ns = []
        if self.created_bridge:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
            self.created_bridge = False
