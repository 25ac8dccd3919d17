"""Authenticated transport: only allowed CURVE clients reach the daemon, every refusal is logged,
a dead authenticator fails closed, `tvbod keygen` writes private key files, adapters can use
them, and nothing in the code base unpickles."""

import ast
import os
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import zmq
import zmq.auth
from daemon_harness import Daemon

from plant_adapters.adapter_cli import base_parser, curve_keys, settings
from plant_adapters.client import DaemonClient, DaemonUnavailable, load_curve_keys
from tvbod.commands import keygen
from tvbod.service.security import (
    HANDSHAKE_REASONS,
    HUNG_UP_REASON,
    REFUSAL_BURST,
    REFUSAL_WINDOW_S,
    CurveConfig,
    RefusalLimiter,
    guard_socket,
    public_key_files,
)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not zmq.has("curve"), reason="libzmq without CURVE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Keys:
    """A server pair, an allowed adapter pair and an intruder pair, made by `tvbod keygen`."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "keys"
        self.server_public, self.server_secret = keygen.create_key_pair(self.dir, "server")
        self.adapter_public, self.adapter_secret = keygen.create_key_pair(self.dir, "adapter")
        self.intruder_public, self.intruder_secret = keygen.create_key_pair(root / "elsewhere", "intruder")
        self.allowed = self.dir / "clients"
        self.allowed.mkdir()
        (self.allowed / "adapter.key").write_bytes(self.adapter_public.read_bytes())

    def client(self, who: str = "adapter", server: Path | None = None) -> dict[str, bytes]:
        return load_curve_keys(getattr(self, f"{who}_secret"), server or self.server_public)

    @staticmethod
    def z85(public_file: Path) -> str:
        return zmq.auth.load_certificate(public_file)[0].decode()


class CurveDaemon(Daemon):
    """The harness daemon on loopback tcp and ipc, both under CURVE."""

    def __init__(self, root: Path, keys: Keys, plants: str = '"plants/*.yaml"') -> None:
        super().__init__(root)
        self.keys = keys
        self.ipc = self.endpoint
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        (root / "tvbod.yaml").write_text(textwrap.dedent(f"""\
            endpoints: ["{self.endpoint}", "ipc://{{runtime_dir}}/tvbod.sock"]
            runtime_dir: ./run
            state_dir: ./state
            log_format: json
            plants: {plants}
            security:
              curve:
                server_secret_key: {keys.server_secret}
                allowed_clients: {keys.allowed}
            """))

    def client(self, plant: str = "alpha", **kw) -> DaemonClient:
        kw.setdefault("curve", self.keys.client())
        return super().client(plant, **kw)

    def refusals(self, **match) -> list[dict]:
        return [e for e in self.log_events() if e.get("event") == "client_refused"
                and all(e.get(k) == v for k, v in match.items())]

    def wait_for_refusal(self, timeout: float = 10.0, after: int = 0, **match) -> dict:
        """The first matching refusal beyond the first `after` ones."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.refusals(**match)
            if len(found) > after:
                return found[after]
            time.sleep(0.05)
        raise AssertionError(f"no client_refused {match} in:\n{self.log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def curve_daemon(tmp_path_factory):
    root = tmp_path_factory.mktemp("curve")
    d = CurveDaemon(root / "d", Keys(root))
    d.start()
    yield d
    assert d.stop() == 0, d.log.read_text()[-3000:]


def _silent(endpoint: str, curve: dict | None) -> bool:
    """True if a client with these keys gets no reply to a ping."""
    with DaemonClient(endpoint, "alpha", timeout_s=0.7, retries=0, curve=curve) as c:
        try:
            c.ping()
        except DaemonUnavailable:
            return True
    return False


# ---------------------------------------------------------------------- the daemon
@pytest.mark.parametrize("which", ["tcp", "ipc"])
def test_allowed_client_gets_replies(curve_daemon, which):
    endpoint = curve_daemon.endpoint if which == "tcp" else curve_daemon.ipc
    with DaemonClient(endpoint, "alpha", timeout_s=5, curve=curve_daemon.keys.client()) as c:
        assert c.hello()["plant"] == "alpha"
        proposal = c.ask()
        assert c.tell(proposal["proposal_id"], 1.0)["t"] == proposal["t"]
        assert c.status("alpha")["plants"][0]["plant"] == "alpha"


def test_unknown_key_gets_nothing_and_is_logged(curve_daemon):
    keys = curve_daemon.keys
    assert _silent(curve_daemon.endpoint, keys.client("intruder"))
    event = curve_daemon.wait_for_refusal(public_key=keys.z85(keys.intruder_public))
    assert event["level"] == "warning" and event["by"] == "zap"
    assert event["address"] == "127.0.0.1" and event["reason"] == "Unknown key"
    assert event["mechanism"] == "CURVE"
    # over ipc the address is libzmq's `localhost:UID:GID:PID` of the connecting process
    assert _silent(curve_daemon.ipc, keys.client("intruder"))
    event = curve_daemon.wait_for_refusal(by="zap", address=f"localhost:{os.getuid()}:{os.getgid()}:{os.getpid()}")
    assert event["public_key"] == keys.z85(keys.intruder_public)
    assert not _silent(curve_daemon.endpoint, keys.client())  # the allowed client is unaffected


@pytest.mark.parametrize("which", ["tcp", "ipc"])
def test_client_without_curve_gets_nothing_and_the_daemon_stays_up(curve_daemon, which):
    endpoint = curve_daemon.endpoint if which == "tcp" else curve_daemon.ipc
    before = len(curve_daemon.refusals(by="handshake", endpoint=endpoint))
    assert _silent(endpoint, None)
    peer = zmq.Context.instance().socket(zmq.DEALER)  # a raw peer sending garbage, no CURVE
    peer.linger = 0
    peer.connect(endpoint)
    peer.send(b"\xc1" * 100)
    assert not peer.poll(500)
    peer.close()
    # Both sides of the handshake race to see the mechanism mismatch: when the daemon wins it
    # logs the mismatch, when the client wins it hangs up and the daemon logs that.
    event = curve_daemon.wait_for_refusal(by="handshake", endpoint=endpoint, after=before)
    assert event["reason"] in (HANDSHAKE_REASONS[zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH],
                               HUNG_UP_REASON)
    assert event["address"] is None and event["public_key"] is None
    assert curve_daemon.proc.poll() is None
    assert not _silent(endpoint, curve_daemon.keys.client())


def test_client_with_the_wrong_server_key_gets_nothing(curve_daemon):
    keys = curve_daemon.keys
    assert _silent(curve_daemon.endpoint, keys.client(server=keys.intruder_public))
    event = curve_daemon.wait_for_refusal(
        by="handshake", endpoint=curve_daemon.endpoint,
        reason=HANDSHAKE_REASONS[zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC])
    assert "wrong server public key" in event["reason"] and event["level"] == "warning"


def test_refusals_of_a_loud_peer_are_counted_not_all_logged():
    # property: per peer and window, REFUSAL_BURST are logged; the rest are reported as a count
    limiter = RefusalLimiter()
    verdicts = [limiter.allow("a", 0.0) for _ in range(REFUSAL_BURST + 5)]
    assert verdicts[:REFUSAL_BURST] == [(True, 0)] * REFUSAL_BURST
    assert verdicts[REFUSAL_BURST:] == [(False, 0)] * 5
    assert limiter.allow("b", 0.0) == (True, 0)  # other peers are not affected
    assert limiter.allow("a", REFUSAL_WINDOW_S + 1) == (True, 5)
    assert limiter.allow("a", REFUSAL_WINDOW_S + 2) == (True, 0)


# ---------------------------------------------------------------------- in-process guard
class ListSink:
    """Collects events from any thread."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def emit(self, event: str, /, **fields) -> None:
        with self.lock:
            self.events.append((event, fields))
            self.threads.add(threading.current_thread().name)


@pytest.fixture
def guarded(tmp_path):
    """A ROUTER guarded by `guard_socket` in a private context, and its keys."""
    keys = Keys(tmp_path)
    curve = CurveConfig.load(keys.server_secret, public_key_files(keys.allowed))
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.linger = 0
    sink = ListSink()
    guard = guard_socket(ctx, sock, curve, sink)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    yield ctx, sock, guard, sink, keys, f"tcp://127.0.0.1:{port}"
    sock.close()
    if guard is not None:
        guard.stop()
    ctx.term()


def _echo_ping(ctx, sock, endpoint, curve) -> bool:
    """True if a DEALER with these keys reaches the guarded ROUTER (and gets its echo back)."""
    c = ctx.socket(zmq.DEALER)
    c.linger = 0
    try:
        if curve:
            c.curve_secretkey, c.curve_publickey = curve["secret"], curve["public"]
            c.curve_serverkey = curve["server"]
        c.connect(endpoint)
        c.send(b"ping")
        if not sock.poll(700):
            return False
        sock.send_multipart(sock.recv_multipart())
        assert c.poll(1000) and c.recv() == b"ping"
        return True
    finally:
        c.close()


def test_guard_refusal_is_emitted_from_the_authenticator_thread(guarded):
    ctx, sock, guard, sink, keys, endpoint = guarded
    assert _echo_ping(ctx, sock, endpoint, keys.client())
    assert not _echo_ping(ctx, sock, endpoint, keys.client("intruder"))
    deadline = time.monotonic() + 5
    while not sink.events and time.monotonic() < deadline:
        time.sleep(0.02)
    event, fields = sink.events[0]
    assert event == "client_refused" and fields["public_key"] == keys.z85(keys.intruder_public)
    assert threading.main_thread().name not in sink.threads  # emitted off the loop thread


def test_dead_authenticator_fails_closed(guarded):
    # property: ZMQ_ZAP_ENFORCE_DOMAIN -- without a ZAP handler nobody gets in, not even allowed keys
    ctx, sock, guard, sink, keys, endpoint = guarded
    guard.authenticator.stop()
    assert not _echo_ping(ctx, sock, endpoint, keys.client())


def test_no_curve_config_leaves_the_socket_alone():
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    assert guard_socket(ctx, sock, None, ListSink()) is None
    assert sock.mechanism == zmq.NULL
    sock.close()
    ctx.term()


# ---------------------------------------------------------------------- keygen
def test_keygen_writes_a_private_pair_and_prints_the_public_key(tmp_path):
    out = subprocess.run([sys.executable, "-m", "tvbod", "keygen", "--out", str(tmp_path / "k"),
                          "--name", "cart-1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    public, secret = tmp_path / "k" / "cart-1.key", tmp_path / "k" / "cart-1.key_secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE(public.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o700
    pub, sec = zmq.auth.load_certificate(secret)
    assert zmq.auth.load_certificate(public) == (pub, None) and zmq.curve_public(sec) == pub
    assert pub.decode() in out.stdout and "allowed_clients" in out.stdout
    assert sorted(p.name for p in (tmp_path / "k").iterdir()) == ["cart-1.key", "cart-1.key_secret"]


@pytest.mark.parametrize("existing", ["x.key", "x.key_secret"])
def test_keygen_refuses_to_overwrite(tmp_path, existing, capsys):
    (tmp_path / existing).write_text("precious")
    args = keygen_args(tmp_path, "x")
    assert keygen.run(args) == 1
    assert "refusing to overwrite" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == [existing]  # nothing added, nothing left behind
    assert (tmp_path / existing).read_text() == "precious"


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "../up", "x" * 65])
def test_keygen_refuses_bad_names(tmp_path, name, capsys):
    assert keygen.run(keygen_args(tmp_path, name)) == 2
    assert list(tmp_path.iterdir()) == []


def keygen_args(out: Path, name: str):
    import argparse

    parser = argparse.ArgumentParser()
    keygen.add_arguments(parser)
    return parser.parse_args(["--out", str(out), "--name", name])


# ---------------------------------------------------------------------- adapters
def test_load_curve_keys_checks_the_files(tmp_path):
    keys = Keys(tmp_path)
    curve = load_curve_keys(keys.adapter_secret, keys.server_public)
    assert curve["public"].decode() == keys.z85(keys.adapter_public)
    assert curve["server"].decode() == keys.z85(keys.server_public)
    with pytest.raises(ValueError, match="holds no secret-key"):
        load_curve_keys(keys.adapter_public, keys.server_public)
    with pytest.raises(ValueError, match="not a readable CURVE key file"):
        load_curve_keys(keys.adapter_secret, tmp_path / "missing.key")
    keys.adapter_secret.chmod(0o640)
    with pytest.raises(ValueError, match="chmod 600"):
        load_curve_keys(keys.adapter_secret, keys.server_public)


def test_adapter_settings_take_curve_keys_from_flags_or_the_settings_file(tmp_path):
    keys = Keys(tmp_path)
    parser = base_parser("x", "x")
    defaults = {"endpoint": None, "plant": "p"}
    args = parser.parse_args(["--endpoint", "tcp://127.0.0.1:1", "--curve-secret", str(keys.adapter_secret),
                              "--curve-server", str(keys.server_public)])
    assert curve_keys(settings(args, defaults)) == keys.client()
    (tmp_path / "keys" / "adapter.yaml").write_text(
        "endpoint: tcp://127.0.0.1:1\ncurve_secret: adapter.key_secret\ncurve_server: server.key\n")
    args = parser.parse_args(["--config", str(tmp_path / "keys" / "adapter.yaml")])
    assert curve_keys(settings(args, defaults)) == keys.client()  # relative to the settings file
    assert curve_keys(settings(parser.parse_args(["--endpoint", "x"]), defaults)) is None
    with pytest.raises(SystemExit, match="needs both"):
        curve_keys(settings(parser.parse_args(["--endpoint", "x", "--curve-secret", "s"]), defaults))


def test_cartpole_adapter_runs_against_a_curve_daemon(tmp_path):
    keys = Keys(tmp_path)
    d = CurveDaemon(tmp_path / "d", keys, plants=f'"{ROOT}/configs/plants/cartpole.yaml"')
    (tmp_path / "d" / "plants" / "alpha.yaml").unlink()
    d.start(wait=False)
    try:
        deadline = time.monotonic() + 30
        while _silent(d.endpoint, keys.client()):
            assert d.proc.poll() is None and time.monotonic() < deadline, d.log.read_text()
        base = [sys.executable, "-m", "plant_adapters.cartpole", "--endpoint", d.endpoint,
                "--steps", "2", "--timeout", "1", "--retries", "1"]
        ok = subprocess.run(base + ["--curve-secret", str(keys.adapter_secret),
                                    "--curve-server", str(keys.server_public)],
                            capture_output=True, text=True, timeout=120)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        refused = subprocess.run(base, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 1 and "does not answer" in refused.stderr
    finally:
        assert d.stop() == 0, d.log.read_text()[-3000:]


# ---------------------------------------------------------------------- no pickle anywhere
PICKLING_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "shelve", "joblib", "marshal"}
PICKLING_CALLS = {"recv_pyobj", "send_pyobj", "read_pickle", "to_pickle"}


#: The one module allowed to pickle: `model_worker_kind: process` hands a plant's optimizer, as the
#: daemon holds it in memory, to the daemon's own spawned worker processes and back, over their
#: private pipes (docs/security.md). Nothing read from a socket or a file is ever unpickled.
PICKLE_ALLOWED = {"tvbod/service/workers.py"}


def test_no_module_unpickles():
    offences = []
    files = sorted((ROOT / "tvbod").rglob("*.py")) + sorted((ROOT / "plant_adapters").rglob("*.py"))
    assert len(files) > 20
    for path in files:
        if str(path.relative_to(ROOT)) in PICKLE_ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Import):
                offences += [where for a in node.names if a.name.split(".")[0] in PICKLING_MODULES]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PICKLING_MODULES:
                offences.append(where)
            elif isinstance(node, ast.Attribute) and node.attr in PICKLING_CALLS:
                offences.append(where)
            elif isinstance(node, ast.keyword) and node.arg == "allow_pickle" and not (
                    isinstance(node.value, ast.Constant) and node.value.value is False):
                offences.append(where)
    assert offences == []


def test_the_process_workers_pickle_only_the_daemons_own_objects():
    # workers.py's pickle calls: dumps of `plant.strategy` (the daemon's own object) going to a
    # worker, loads of what a worker future returned; never of request or file bytes.
    text = (ROOT / "tvbod/service/workers.py").read_text()
    calls = [line.strip() for line in text.splitlines() if "pickle.loads(" in line or "pickle.dumps(" in line]
    assert calls and all("plant.strategy" in c or "blob" in c or "strategy," in c for c in calls), calls
    assert "recv" not in text and "open(" not in text and "read_bytes" not in text
