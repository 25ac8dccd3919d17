"""The daemon speaks sd_notify to a real AF_UNIX datagram socket standing in for systemd."""

import signal
import socket
import time

from daemon_harness import Daemon


class FakeSystemd:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, str]] = []

    def collect(self, seconds: float, until=None) -> list[str]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            self.messages.append((time.monotonic(), data.decode()))
            if until is not None and until(self.messages[-1][1]):
                break
        return [m for _, m in self.messages]


def test_ready_watchdog_status_reload_and_stopping(tmp_path):
    fake = FakeSystemd(tmp_path / "notify")
    d = Daemon(tmp_path / "d", env={"NOTIFY_SOCKET": str(tmp_path / "notify"),
                                    "WATCHDOG_USEC": "1000000"})
    d.start(wait=False)
    msgs = fake.collect(30, until=lambda m: m.startswith("READY=1"))
    assert msgs and msgs[0].startswith("READY=1\nSTATUS=1 plant, 0 with an adapter: alpha t=1"), msgs
    assert (tmp_path / "d" / "run" / "tvbod.sock").exists()
    t0 = time.monotonic()
    with d.client(adapter="rig-7") as c:
        c.ping()  # answers at once: READY came after bind
        p = c.ask()
        c.tell(p["proposal_id"], 1.0)
    assert time.monotonic() - t0 < 5
    fake.collect(2.5)
    later = [(t, m) for t, m in fake.messages if t >= t0]
    pings = [t for t, m in later if m == "WATCHDOG=1"]
    assert len(pings) >= 3
    gaps = [b - a for a, b in zip(pings, pings[1:])]
    assert all(0.3 <= g <= 0.8 for g in gaps), gaps
    assert any(m.startswith("STATUS=") and "adapter=rig-7" in m for _, m in later)

    before = time.monotonic_ns() // 1000
    d.proc.send_signal(signal.SIGHUP)
    fake.collect(5, until=lambda m: m.startswith("READY=1") and len(fake.messages) > 1)
    after = time.monotonic_ns() // 1000
    reload_msgs = [m for _, m in fake.messages if m.startswith("RELOADING=1")]
    assert len(reload_msgs) == 1
    usec = int(reload_msgs[0].split("MONOTONIC_USEC=")[1])
    assert before <= usec <= after
    assert fake.messages[-1][1].startswith("READY=1")

    assert d.stop() == 0
    fake.collect(1.0)
    assert fake.messages[-1][1].startswith("STOPPING=1"), fake.messages[-3:]


def test_watchdog_is_silent_when_it_belongs_to_another_pid(tmp_path):
    fake = FakeSystemd(tmp_path / "notify")
    d = Daemon(tmp_path / "d", env={"NOTIFY_SOCKET": str(tmp_path / "notify"),
                                    "WATCHDOG_USEC": "500000", "WATCHDOG_PID": "1"})
    d.start(wait=False)
    fake.collect(30, until=lambda m: m.startswith("READY=1"))
    fake.collect(1.5)
    assert not any(m == "WATCHDOG=1" for _, m in fake.messages)
    assert d.stop() == 0


def test_a_failed_start_sends_no_ready(tmp_path):
    fake = FakeSystemd(tmp_path / "notify")
    d = Daemon(tmp_path / "d", env={"NOTIFY_SOCKET": str(tmp_path / "notify")})
    path = tmp_path / "d" / "plants" / "alpha.yaml"
    path.write_text(path.read_text().replace("lengthscales: 0.3", "lengthscales: -1"))
    d.start(wait=False)
    assert d.proc.wait(60) == 2
    d.proc = None
    assert not any(m.startswith("READY=1") for m in fake.collect(0.5))


def test_a_vanished_notify_socket_never_stops_the_daemon(tmp_path):
    fake = FakeSystemd(tmp_path / "notify")
    d = Daemon(tmp_path / "d", env={"NOTIFY_SOCKET": str(tmp_path / "notify"),
                                    "WATCHDOG_USEC": "400000"})
    d.start(wait=False)
    fake.collect(30, until=lambda m: m.startswith("READY=1"))
    fake.sock.close()
    (tmp_path / "notify").unlink()
    time.sleep(1.0)
    with d.client() as c:
        assert c.ping()["pong"] is True
    assert d.stop() == 0
    failures = [e for e in d.log_events() if e["event"] == "sd_notify_failed"]
    assert len(failures) == 1
