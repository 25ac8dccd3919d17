"""A second daemon never takes over an endpoint a live daemon serves; a stale socket is fine."""

import socket
import subprocess
import sys
import textwrap

from daemon_harness import Daemon, plant_yaml


def _second_daemon(root, endpoint):
    """A daemon file of another state directory on `endpoint`."""
    (root / "plants").mkdir(parents=True)
    (root / "plants" / "alpha.yaml").write_text(plant_yaml("alpha"))
    (root / "tvbod.yaml").write_text(textwrap.dedent(f"""\
        endpoints: ["{endpoint}"]
        runtime_dir: ./run
        state_dir: ./state
        log_format: json
        """))
    return [sys.executable, "-m", "tvbod", "run", "--config", str(root / "tvbod.yaml")]


def test_a_second_daemon_on_a_live_ipc_endpoint_exits_1_with_one_line(tmp_path):
    first = Daemon(tmp_path / "first").start()
    out = subprocess.run(_second_daemon(tmp_path / "second", first.endpoint),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and first.endpoint in lines[0] and "running" in lines[0], out.stderr
    with first.client() as c:  # the first daemon still owns its socket
        assert c.ping()
    assert first.stop() == 0


def test_a_stale_ipc_socket_file_of_a_killed_daemon_is_replaced(tmp_path):
    first = Daemon(tmp_path / "first").start()
    first.kill()
    sock_path = first.endpoint[len("ipc://"):]
    assert socket.socket(socket.AF_UNIX).connect_ex(sock_path) != 0  # nobody listens
    second = Daemon(tmp_path / "first").start()  # same files: starts and serves
    with second.client() as c:
        assert c.ping()
    assert second.stop() == 0


def test_a_tcp_port_in_use_exits_1_with_one_line(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        out = subprocess.run(_second_daemon(tmp_path / "d", f"tcp://127.0.0.1:{port}"),
                             capture_output=True, text=True, timeout=120)
    finally:
        holder.close()
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"tcp://127.0.0.1:{port}" in lines[0] and "in use" in lines[0]
