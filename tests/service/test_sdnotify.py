"""sd_notify without libsystemd: a real AF_UNIX datagram socket stands in for systemd."""

import os
import socket
import time
import uuid

import pytest

from tvbod.service.sdnotify import Notifier, status_line


def _listener(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(2.0)
    return sock


def _received(sock: socket.socket) -> list[str]:
    """Every datagram waiting on `sock`, decoded."""
    out = []
    sock.settimeout(0.05)
    try:
        while True:
            out.append(sock.recv(8192).decode())
    except (socket.timeout, BlockingIOError):
        return out
    finally:
        sock.settimeout(2.0)


@pytest.fixture
def systemd(tmp_path):
    """A bound datagram socket in tmp_path and the environment systemd would pass."""
    path = tmp_path / "notify"
    sock = _listener(str(path))
    yield sock, {"NOTIFY_SOCKET": str(path)}
    sock.close()


def test_each_message_is_exactly_one_datagram(systemd):
    sock, env = systemd
    n = Notifier.from_environment(env)
    assert n.address is not None
    assert n.ready()
    assert n.status("2 plants, 1 with an adapter")
    assert n.watchdog()
    assert n.stopping()
    assert _received(sock) == ["READY=1", "STATUS=2 plants, 1 with an adapter", "WATCHDOG=1",
                               "STOPPING=1"]
    assert (n.sent, n.errors) == (4, 0)
    n.close()


def test_ready_with_status_is_one_datagram_and_newlines_are_flattened(systemd):
    sock, env = systemd
    n = Notifier.from_environment(env)
    n.ready("restored\nbound")
    assert _received(sock) == ["READY=1\nSTATUS=restored bound"]


def test_abstract_namespace_socket():
    name = f"tvbod-test-{uuid.uuid4().hex}"
    sock = _listener("\0" + name)
    try:
        n = Notifier.from_environment({"NOTIFY_SOCKET": "@" + name})
        assert n.address == "\0" + name
        assert n.ready()
        assert _received(sock) == ["READY=1"]
    finally:
        sock.close()


def test_reloading_carries_clock_monotonic_in_microseconds(systemd):
    # sd_notify(3): RELOADING=1 with MONOTONIC_USEC= (CLOCK_MONOTONIC, us) in the same datagram.
    sock, env = systemd
    n = Notifier.from_environment(env)
    before = time.monotonic_ns() // 1000
    n.reloading()
    after = time.monotonic_ns() // 1000
    [datagram] = _received(sock)
    lines = datagram.split("\n")
    assert lines[0] == "RELOADING=1"
    key, value = lines[1].split("=")
    assert key == "MONOTONIC_USEC"
    assert before <= int(value) <= after
    n.ready()
    assert _received(sock) == ["READY=1"]


@pytest.mark.parametrize(("extra", "interval"), [
    ({"WATCHDOG_USEC": "30000000"}, 15.0),                        # no WATCHDOG_PID: ours
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4242"}, 15.0),  # WATCHDOG_PID matches
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4243"}, None),  # meant for another process
    ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "x"}, None),     # unreadable: no watchdog
    ({}, None),                                                   # WatchdogSec= not set
    ({"WATCHDOG_USEC": "0"}, None),
    ({"WATCHDOG_USEC": "soon"}, None),
])
def test_watchdog_interval_is_half_of_watchdog_usec_for_our_pid(extra, interval):
    n = Notifier.from_environment({"NOTIFY_SOCKET": "/nonexistent/notify", **extra}, pid=4242)
    assert n.watchdog_interval() == interval


def test_default_pid_is_ours():
    env = {"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}
    assert Notifier.from_environment(env).watchdog_interval() == 1.0


def test_tick_pings_at_half_the_timeout(systemd):
    sock, env = systemd
    n = Notifier.from_environment({**env, "WATCHDOG_USEC": "10000000"})  # 10 s -> every 5 s
    sent = [t for t in (100.0, 100.1, 104.9, 105.0, 105.2, 109.99, 110.0, 200.0) if n.tick(t)]
    assert sent == [100.0, 105.0, 110.0, 200.0]
    assert _received(sock) == ["WATCHDOG=1"] * 4


def test_tick_without_watchdog_sends_nothing(systemd):
    sock, env = systemd
    n = Notifier.from_environment(env)
    assert not n.watchdog_due(1e9)
    assert not n.tick(1e9)
    assert _received(sock) == []


def test_no_op_without_notify_socket():
    for env in ({}, {"NOTIFY_SOCKET": ""}, {"WATCHDOG_USEC": "1000000"}):
        n = Notifier.from_environment(env)
        assert n.address is None
        assert n.watchdog_interval() is None
        assert not any([n.ready(), n.status("x"), n.reloading(), n.stopping(), n.watchdog(),
                        n.tick(0.0)])
        assert (n.sent, n.errors, n.sock_) == (0, 0, None)


def test_unsupported_address_disables_and_reports():
    seen = []
    n = Notifier.from_environment({"NOTIFY_SOCKET": "vsock:2:1234"},
                                  on_error=lambda msg, exc: seen.append(msg))
    assert n.address is None and not n.ready()
    assert len(seen) == 1 and "vsock:2:1234" in seen[0]


def test_vanished_socket_never_raises_is_counted_and_reported_once_per_outage(tmp_path):
    path = tmp_path / "notify"
    sock = _listener(str(path))
    seen = []
    n = Notifier.from_environment({"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "1000000"},
                                  on_error=lambda msg, exc: seen.append((msg, type(exc))))
    assert n.ready()
    sock.close()
    path.unlink()  # systemd went away
    assert not n.status("still here")
    assert not n.tick(1.0)
    assert not n.stopping()
    assert n.errors == 3
    assert seen == [("sd_notify 'STATUS=still here' failed", FileNotFoundError)]
    sock = _listener(str(path))  # back: the next failure is a new outage, reported again
    assert n.tick(2.0)
    sock.close()
    path.unlink()
    assert not n.tick(3.0)
    assert len(seen) == 2 and seen[1][0] == "sd_notify 'WATCHDOG=1' failed"


def test_a_failing_error_callback_does_not_raise(tmp_path):
    def explode(msg, exc):
        raise RuntimeError("logging broke")

    n = Notifier.from_environment({"NOTIFY_SOCKET": str(tmp_path / "absent")}, on_error=explode)
    assert not n.ready()
    assert n.errors == 1


def test_full_receive_queue_does_not_block(tmp_path):
    # MSG_DONTWAIT: a listener that stopped reading must not stall the event loop.
    path = tmp_path / "notify"
    sock = _listener(str(path))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    n = Notifier.from_environment({"NOTIFY_SOCKET": str(path)})
    start = time.monotonic()
    results = [n.status("x" * 900) for _ in range(2000)]
    assert time.monotonic() - start < 5.0
    assert not all(results) and n.errors == results.count(False)
    sock.close()


PLANTS = [
    {"plant": "cartpole", "t": 142, "resets": 1, "last_reset_t": 103, "adapter": "cartpole"},
    {"plant": "temperature", "t": 0, "resets": 0, "last_reset_t": None, "adapter": None},
]


def test_status_line_names_plants_adapters_and_last_reset():
    assert status_line(PLANTS) == (
        "2 plants, 1 with an adapter: cartpole t=142 resets=1 (last t=103) adapter=cartpole; "
        "temperature t=0 resets=0 adapter=-")
    assert status_line([]) == "0 plants, 0 with an adapter"
    assert status_line(PLANTS[:1]).startswith("1 plant, 1 with an adapter: cartpole")


def test_status_line_is_capped_and_says_how_many_were_cut():
    many = [{**PLANTS[0], "plant": f"plant-{i:03d}"} for i in range(200)]
    line = status_line(many, max_chars=300)
    assert len(line) <= 300
    assert line.startswith("200 plants, 200 with an adapter: plant-000 t=142")
    shown = line.count("adapter=cartpole")
    assert line.endswith(f"; ... (+{200 - shown} more)") and shown > 0
    assert status_line(many, max_chars=20) == "200 plants, 200 with"  # degenerate cap: cut hard
