"""``quiet_port``: the local port the serve tests, the Ray heads of the tests and the serve
benchmark listen on is one no starting Ray can take first (CI once failed when the server's
own Ray took the ``bind(0)`` port the test had chosen for it, before Serve's proxy bound it)."""

from __future__ import annotations

import socket

from cmpnn_dist.serve import launch
from cmpnn_dist.serve.launch import RAY_WORKER_PORTS_END, quiet_port


def test_the_port_is_free_and_outside_rays_worker_ports_and_the_ephemeral_range():
    low, _ = launch.ephemeral_range()
    ports = [quiet_port() for _ in range(30)]
    assert all(RAY_WORKER_PORTS_END < p < low for p in ports), ports
    assert len(set(ports)) > 1  # drawn, not one fixed port two test modules would share
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[0]))  # free to listen on


def test_a_taken_port_is_never_returned(monkeypatch, tmp_path):
    """With the gap one port wide and that port held, the answer is ``bind(0)``'s."""
    real_low, real_high = launch.ephemeral_range()
    with socket.socket() as held:
        taken = quiet_port()
        held.bind(("127.0.0.1", taken))
        one_wide = tmp_path / "ip_local_port_range"
        one_wide.write_text(f"{taken + 1}\t{real_high}\n")
        monkeypatch.setattr(launch, "RAY_WORKER_PORTS_END", taken - 1)
        monkeypatch.setattr(launch, "EPHEMERAL_RANGE", one_wide)
        port = quiet_port()
    assert port != taken
    assert real_low <= port <= real_high
