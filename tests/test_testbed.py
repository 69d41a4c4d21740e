"""The benchmark test bed (dask_bacc.bench.testbed): a real scheduler process and worker
processes, their teardown, failures to start, emulated hosts (network namespaces); and the
per-host and heavy-tailed straggler models of dask_bacc.testing (no clock anywhere)."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections import defaultdict
from urllib.parse import urlparse

import numpy as np
import psutil
import pytest
from distributed import get_worker

from dask_bacc.bench.testbed import Testbed
from dask_bacc.testing import (
    STRAGGLER_PLUGIN_NAME,
    Bimodal,
    CorrelatedHosts,
    MovingSlowSet,
    Pareto,
    ShiftedExponential,
    SlowHosts,
    SlowWorkers,
    StragglerPlugin,
    draw_delay,
    host_of,
    plain_task,
)


# -- straggler models -------------------------------------------------------------------------
def test_host_of():
    assert host_of("h0-w3") == "h0"
    assert host_of("h12-w0-extra") == "h12"
    assert host_of("alice") == "alice"
    assert host_of("") == ""


def test_draw_delay_unchanged_for_the_per_task_models():
    models = [
        SlowWorkers(("h0-w1",), delay=0.5, factor=2.0),
        Bimodal(p=0.3, delay=1.0, factor=3.0),
        ShiftedExponential(scale=0.7, shift=0.1),
        Pareto(alpha=1.5, scale=0.2),
        SlowHosts(("h1",), factor=4.0, delay=0.3),
    ]
    for model in models:
        for seq, index, name in [(0, 0, "h0-w1"), (3, 7, "h1-w2"), (10**9 + 2, 5, "x")]:
            rng = np.random.default_rng([11, seq, index])
            expected = float(model.draw(rng, name, 0.25))
            assert draw_delay(model, 11, seq, index, name, 0.25) == expected
            assert model.task_delay(11, seq, index, name, 0.25) == expected


def _all_models():
    hosts = ("h0", "h1", "h2", "h3")
    return [
        Pareto(alpha=2.0, scale=1.0),
        SlowHosts(("h1",), factor=3.0, delay=0.5),
        CorrelatedHosts(p=0.4, factor=3.0, delay=0.5),
        MovingSlowSet(hosts, count=2, period=3, factor=3.0, delay=0.5),
    ]


@pytest.mark.parametrize("model", _all_models(), ids=lambda m: type(m).__name__)
def test_models_are_deterministic_by_seed(model):
    keys = [(seq, i, f"h{i % 4}-w{i}") for seq in range(30) for i in range(8)]

    def draws(seed):
        return [draw_delay(model, seed, seq, i, name, 0.2) for seq, i, name in keys]

    assert draws(5) == draws(5)
    if not isinstance(model, SlowHosts):  # the only model without randomness
        assert draws(5) != draws(6)


def test_pareto_matches_its_distribution():
    alpha, scale, n = 2.5, 0.3, 20_000
    model = Pareto(alpha=alpha, scale=scale)
    x = np.array([draw_delay(model, 1, 0, i) for i in range(n)])
    assert (x >= 0).all()
    for q in (0.1, 0.25, 0.5, 0.75, 0.9, 0.99):
        exact = scale * ((1 - q) ** (-1 / alpha) - 1)
        # the fraction below the exact quantile: binomial, sd <= 0.0035
        assert abs(np.mean(x <= exact) - q) < 0.012, q
        if q <= 0.9:
            assert np.quantile(x, q) == pytest.approx(exact, rel=0.06), q
    assert np.median(x) == pytest.approx(scale * (2 ** (1 / alpha) - 1), rel=0.03)
    assert np.mean(x) == pytest.approx(scale / (alpha - 1), rel=0.1)
    assert Pareto(alpha=1.0, scale=0.0).task_delay(0, 0, 0) == 0.0


def test_slow_hosts_only_hits_those_hosts():
    model = SlowHosts(("h1", "h3"), factor=5.0, delay=0.25)
    for i in range(40):
        name = f"h{i % 4}-w{i}"
        d = draw_delay(model, 0, i, i, name, elapsed=0.5)
        assert d == (0.25 + 4 * 0.5 if host_of(name) in ("h1", "h3") else 0.0)
    assert draw_delay(model, 0, 0, 0, "h1", 1.0) == 4.25  # a bare host name is its own host
    assert draw_delay(model, 0, 0, 0, "h10-w1", 1.0) == 0.0


def test_correlated_hosts_share_a_verdict_per_job_and_host():
    p, jobs, hosts = 0.3, 1000, 5
    model = CorrelatedHosts(p=p, factor=3.0, delay=0.5)
    slow = 0
    for seq in range(jobs):
        verdicts = defaultdict(set)
        for i in range(3 * hosts):  # three workers per host, one task each
            name = f"h{i % hosts}-w{i}"
            d = draw_delay(model, 7, seq, i, name, elapsed=1.0)
            assert d in (0.0, 2.5)
            verdicts[host_of(name)].add(d)
        assert all(len(v) == 1 for v in verdicts.values())
        for h, v in verdicts.items():
            assert (v == {2.5}) == model.host_slow(7, seq, h)
        slow += sum(v == {2.5} for v in verdicts.values())
    n = jobs * hosts
    assert abs(slow / n - p) < 4 * np.sqrt(p * (1 - p) / n)
    assert draw_delay(CorrelatedHosts(p=0.0), 0, 0, 0, "h0-w0", 1.0) == 0.0
    assert draw_delay(CorrelatedHosts(p=1.0, factor=2.0), 0, 0, 0, "h0-w0", 1.0) == 1.0


def test_moving_slow_set():
    hosts = ("h0", "h1", "h2", "h3", "h4")
    model = MovingSlowSet(hosts, count=2, period=4, factor=2.0, delay=0.0)
    sets = []
    for seq in range(80):
        slow = {h for h in hosts if draw_delay(model, 3, seq, seq % 7, f"{h}-w9", 1.0) > 0}
        assert len(slow) == 2
        assert slow == model.slow_hosts(3, seq)
        sets.append(frozenset(slow))
    for period in range(20):
        assert len(set(sets[4 * period : 4 * period + 4])) == 1
    per_period = sets[::4]
    assert len(set(per_period)) > 3  # it moves: 10 possible pairs over 20 periods
    assert any(a != b for a, b in itertools.pairwise(per_period))
    assert draw_delay(model, 3, 0, 0, "h9-w0", 1.0) == 0.0  # not among the hosts
    assert MovingSlowSet(hosts, count=0, period=1).slow_hosts(0, 5) == frozenset()
    assert MovingSlowSet(hosts, count=5, period=1).slow_hosts(0, 5) == frozenset(hosts)


def test_new_model_validation():
    for bad in [
        lambda: Pareto(alpha=0.0, scale=1.0),
        lambda: Pareto(alpha=-1.0, scale=1.0),
        lambda: Pareto(alpha=float("nan"), scale=1.0),
        lambda: Pareto(alpha=2.0, scale=-0.1),
        lambda: SlowHosts(("h0",), factor=0.5),
        lambda: SlowHosts(("h0",), delay=-1.0),
        lambda: SlowHosts(("h0", "h0")),
        lambda: SlowHosts(("h0-w1",)),
        lambda: CorrelatedHosts(p=1.5),
        lambda: CorrelatedHosts(p=-0.1),
        lambda: CorrelatedHosts(p=0.5, factor=0.9),
        lambda: CorrelatedHosts(p=0.5, delay=float("inf")),
        lambda: MovingSlowSet((), count=0, period=1),
        lambda: MovingSlowSet(("h0", "h1"), count=3, period=1),
        lambda: MovingSlowSet(("h0", "h1"), count=-1, period=1),
        lambda: MovingSlowSet(("h0", "h1"), count=1, period=0),
        lambda: MovingSlowSet(("h0", "h1"), count=1, period=2, factor=0.0),
    ]:
        with pytest.raises(ValueError):
            bad()
    with pytest.raises(TypeError, match="not a string"):
        SlowHosts("h0")
    with pytest.raises(TypeError, match="integer"):
        MovingSlowSet(("h0", "h1"), count=1.5, period=2)
    assert SlowHosts(["h0", "h1"]).hosts == ("h0", "h1")  # a list is made a tuple


def test_new_models_in_the_straggler_plugin():
    plugin = StragglerPlugin(SlowHosts(("h1",), factor=1.0, delay=0.5), seed=2)
    assert plugin.delay(index=0, seq=0, elapsed=0.1, worker_name="h1-w1") == 0.5
    assert plugin.delay(index=1, seq=0, elapsed=0.1, worker_name="h0-w0") == 0.0
    plugin = StragglerPlugin(CorrelatedHosts(p=0.5, factor=1.0, delay=1.0), seed=2)
    per_host = {
        (seq, i % 2): plugin.delay(index=i, seq=seq, elapsed=0.0, worker_name=f"h{i % 2}-w{i}")
        for seq in range(10)
        for i in range(6)
    }
    assert [e[3] for e in plugin.log] == [per_host[s, i % 2] for s, i, _, _ in plugin.log]


# -- the test bed -----------------------------------------------------------------------------
def _tree(pids):
    """The pids and every descendant of them now."""
    out = set(pids)
    for pid in pids:
        try:
            out |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            pass
    return out


def _alive(pids):
    alive = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            alive.append((pid, proc.status(), proc.cmdline()[:4]))
        except psutil.NoSuchProcess:
            pass
    return alive


def _port_open(address):
    url = urlparse(address)
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((url.hostname, url.port)) == 0


def test_testbed_validation():
    with pytest.raises(ValueError, match="workers"):
        Testbed(0)
    with pytest.raises(ValueError, match="hosts"):
        Testbed(2, hosts=3)
    with pytest.raises(ValueError, match="threads"):
        Testbed(2, threads=0)
    with pytest.raises(ValueError, match="emulate_hosts"):
        Testbed(2, bandwidth="100mbit")
    bed = Testbed(3, hosts=2)
    assert bed.worker_names == ["h0-w0", "h1-w1", "h0-w2"]
    assert bed.link_bytes() is None
    with pytest.raises(RuntimeError, match="start"):
        bed.client()
    bed.close()  # never started: nothing to do
    bed.close()
    with pytest.raises(RuntimeError, match="closed"):
        bed.start()


@pytest.mark.multiprocess
@pytest.mark.slow
def test_testbed_launch_and_teardown():
    with Testbed(3, hosts=2, nanny=True) as bed:
        assert bed.worker_names == ["h0-w0", "h1-w1", "h0-w2"]
        assert [bed.host_of(n) for n in bed.worker_names] == ["h0", "h1", "h0"]
        address = bed.address
        assert address.startswith("tcp://127.0.0.1:") and _port_open(address)
        tmpdir = bed.tmpdir
        assert tmpdir is not None and (tmpdir / "scheduler.json").exists()
        pids = _tree([p.pid for p in bed.processes])
        assert len(pids) >= 1 + 2 * 3  # the scheduler, and each worker's nanny and worker
        with bed.client() as client:
            workers = client.scheduler_info(n_workers=-1)["workers"]
            by_name = {info["name"]: addr for addr, info in workers.items()}
            assert sorted(by_name) == sorted(bed.worker_names)
            futures = [
                client.submit(
                    lambda: get_worker().name,
                    workers=[by_name[n]],
                    allow_other_workers=False,
                    pure=False,
                )
                for n in bed.worker_names
            ]
            assert client.gather(futures) == bed.worker_names
            env = client.run(lambda: os.environ.get("OMP_NUM_THREADS"))
            assert set(env.values()) == {"1"}
            # a per-host straggler model in the existing plugin, on the test bed's names
            client.register_plugin(
                StragglerPlugin(SlowHosts(("h1",), factor=1.0, delay=0.01)),
                name=STRAGGLER_PLUGIN_NAME,
            )
            ran = client.map(plain_task, range(6), [0] * 6, range(6), [abs] * 6)
            assert client.gather(ran) == list(range(6))
            logs = client.run(
                lambda dask_worker: list(dask_worker.plugins[STRAGGLER_PLUGIN_NAME].log)
            )
            entries = [e for log in logs.values() for e in log]
            assert len(entries) == 6
            assert all((d > 0) == (host_of(w) == "h1") for _, _, w, d in entries)
        bed.close()
        bed.close()  # idempotent
        assert not _alive(pids), _alive(pids)
        assert not _port_open(address)
        assert not tmpdir.exists()


@pytest.mark.multiprocess
def test_testbed_bad_python():
    bed = Testbed(2, python="/nonexistent/bin/python")
    with pytest.raises(RuntimeError, match="could not start the scheduler"):
        bed.start()
    assert not _alive([p.pid for p in bed.processes])
    assert bed.tmpdir is not None and not bed.tmpdir.exists()


@pytest.mark.multiprocess
@pytest.mark.slow
def test_testbed_workers_that_crash():
    bed = Testbed(2, env={"PYTHONHOME": "/nonexistent"}, startup_timeout=30)
    with pytest.raises(RuntimeError, match=r"0 of 2 workers came up") as info:
        bed.start()
    assert "exited with code" in str(info.value)
    assert "nonexistent" in str(info.value) or "encodings" in str(info.value)  # the log's tail
    assert len(bed.processes) == 3
    assert not _alive([p.pid for p in bed.processes])
    assert bed.tmpdir is not None and not bed.tmpdir.exists()


@pytest.mark.multiprocess
@pytest.mark.slow
def test_testbed_close_interrupted_still_stops_everything(monkeypatch):
    from dask_bacc.bench import testbed

    bed = Testbed(1, nanny=False).start()
    pids, tmpdir = [p.pid for p in bed.processes], bed.tmpdir
    stop, calls = testbed._stop, []

    def interrupted(procs, *args):
        calls.append([p.name for p in procs])
        stop(procs, *args)
        if len(calls) == 1:
            raise KeyboardInterrupt  # a second Ctrl-C while the workers stop

    monkeypatch.setattr(testbed, "_stop", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bed.close()
    assert calls == [["h0-w0"], ["scheduler"]]
    assert not _alive(pids)
    assert tmpdir is not None and not tmpdir.exists()
    bed.close()  # closed: nothing more to do
    assert len(calls) == 2


_SCRIPT = """
import signal, sys, time
# Ctrl-C raises KeyboardInterrupt whatever the disposition this process inherited (a
# parent that ignores SIGINT makes Python skip its own handler at start-up)
signal.signal(signal.SIGINT, signal.default_int_handler)
from dask_bacc.bench.testbed import Testbed
bed = Testbed(2, nanny=False).start()  # no with-block: the atexit guard must stop it
print(bed.tmpdir, *[p.pid for p in bed.processes], flush=True)
time.sleep(120)
"""


@pytest.mark.multiprocess
@pytest.mark.slow
def test_testbed_interrupted_script_leaves_nothing_behind():
    script = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert script.stdout is not None
        tmpdir, *pids = script.stdout.readline().split()
        assert len(pids) == 3 and _alive(map(int, pids))
        script.send_signal(signal.SIGINT)  # Ctrl-C: KeyboardInterrupt, then atexit
        try:
            _, err = script.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # (once in a CI run: say what it was doing)
            script.kill()
            _, err = script.communicate()
            raise AssertionError(f"the script did not exit within 60 s of Ctrl-C:\n{err}") from None
    finally:
        script.kill()
        script.wait()
    assert "KeyboardInterrupt" in err
    assert not _alive(map(int, pids))
    assert not os.path.exists(tmpdir)


def _can_emulate():
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        return False
    return subprocess.run(["ip", "netns", "list"], capture_output=True).returncode == 0


def _netns():
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.skipif(not _can_emulate(), reason="needs root and iproute2 (ip, tc)")
def test_testbed_emulated_hosts():
    with Testbed(2, hosts=2, emulate_hosts=True, bandwidth="400mbit", nanny=False) as bed:
        net = bed._net
        assert net is not None
        namespaces = bed.namespaces()
        assert sorted(namespaces) == ["h0", "h1"]
        assert all(ns in _netns() for ns in namespaces.values())
        assert bed.address.startswith(f"tcp://{net.bridge_ip}:")
        for h, ns in enumerate(namespaces.values()):
            qdisc = subprocess.run(
                ["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", net.veth_host(h)],
                capture_output=True,
                text=True,
            ).stdout
            assert "tbf" in qdisc and "400Mbit" in qdisc, qdisc
            root = subprocess.run(
                ["tc", "qdisc", "show", "dev", net.veth_root(h)], capture_output=True, text=True
            ).stdout
            assert "tbf" in root, root
        with bed.client() as client:
            workers = client.scheduler_info(n_workers=-1)["workers"]
            by_name = {info["name"]: addr for addr, info in workers.items()}
            assert urlparse(by_name["h0-w0"]).hostname == net.host_ip(0)
            assert urlparse(by_name["h1-w1"]).hostname == net.host_ip(1)
            before = bed.link_bytes()
            assert before is not None and sorted(before) == ["h0", "h1"]
            n = 4_000_000
            x = client.submit(np.ones, n, dtype="u1", workers=[by_name["h0-w0"]], pure=False)
            total = client.submit(np.sum, x, workers=[by_name["h1-w1"]], pure=False)
            assert total.result() == n
            after = bed.link_bytes()
        assert after is not None
        assert after["h0"][0] - before["h0"][0] > n  # h0 sent the array...
        assert after["h1"][1] - before["h1"][1] > n  # ...and h1 received it
        assert after["h1"][0] - before["h1"][0] < n  # not the other way
        bridge = net.bridge
    assert not any(ns in _netns() for ns in namespaces.values())
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert bridge not in links and net.veth_root(0) not in links
