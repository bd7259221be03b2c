"""The test rig's ports: nothing else takes one before the service binds it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import service_rig
from tests.paths import REPO_ROOT
from tests.service_rig import free_port


def ephemeral() -> range:
    low, high = (int(p) for p in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    return range(low, high + 1)


def test_a_free_port_is_bindable_and_never_one_an_outgoing_connection_takes() -> None:
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert not any(port in ephemeral() for port in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))


def test_a_free_port_skips_one_that_a_server_holds(monkeypatch) -> None:
    held, other = free_port(), free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", held))
        server.listen()
        monkeypatch.setattr(service_rig, "_NEXT_PORTS", iter([held, held, other]))
        assert free_port() == other


@pytest.mark.slow
def test_parallel_workers_never_pick_the_same_port() -> None:
    script = (
        "import json; from tests.service_rig import free_port;"
        " print(json.dumps([free_port() for _ in range(300)]))"
    )

    def picked(worker: int) -> set[int]:
        env = {**os.environ, "PYTEST_XDIST_WORKER": f"gw{worker}", "PYTEST_XDIST_WORKER_COUNT": "2"}
        env["PYTHONPATH"] = str(REPO_ROOT)
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return set(json.loads(done.stdout))

    assert picked(0).isdisjoint(picked(1))
