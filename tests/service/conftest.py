"""Fixtures: a running daemon with two plants, and a raw DEALER peer on it."""

import pytest
from daemon_harness import Daemon, RawPeer

@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path / "d", {"alpha": {}, "beta": {"sense": "maximize", "seed": 2}})
    d.start()
    yield d
    code = d.stop()
    assert code == 0, d.log.read_text()[-3000:]


@pytest.fixture
def raw(daemon):
    peer = RawPeer(daemon.endpoint)
    yield peer
    peer.close()
