"""The systemd units: `systemd-analyze verify` is clean, a broken copy is caught, the exposure
score stays low, and the real daemon runs under the units' seccomp policy (system call filter,
MemoryDenyWriteExecute, RestrictAddressFamilies), emulated here without systemd as PID 1."""

import json
import platform
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from daemon_harness import Daemon, objective

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "systemd"
DAEMON, ADAPTER = "tvbod.service", "tvbod-adapter@.service"
#: The template that runs any adapter command (docs/plants.md, *Running it under systemd*).
COMMAND = "tvbod-adapter-command@.service"
ANALYZE = shutil.which("systemd-analyze")
#: The highest overall exposure `systemd-analyze security` may report (0 = locked down, 10 =
#: unprotected; systemd calls < 2 "OK"). docs/deployment.md records the measured values.
MAX_EXPOSURE = 2.0

pytestmark = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed "
                                "(apt-get install systemd)")


def _installable(tmp_path: Path, text_of: dict[str, str] | None = None) -> Path:
    """The units in tmp_path, with /opt/tvbod/venv pointing at this interpreter's environment
    (verify checks that ExecStart's program exists and is executable)."""
    venv = Path(sys.prefix)
    assert (venv / "bin" / "tvbod").exists(), "the tvbod console script is not installed"
    for name in (DAEMON, ADAPTER, COMMAND):
        text = (text_of or {}).get(name, (UNITS / name).read_text())
        (tmp_path / name).write_text(text.replace("/opt/tvbod/venv", str(venv)))
    return tmp_path


def _verify(path: Path) -> str:
    """Every complaint of `systemd-analyze verify` about `path`: its exit status and output.

    A misspelt directive or an unparsable value is only a warning with exit status 0, so any
    output at all counts as a problem.
    """
    r = subprocess.run([ANALYZE, "verify", "--man=no", str(path)], capture_output=True, text=True,
                       cwd=path.parent, timeout=60)
    out = (r.stdout + r.stderr).strip()
    return out if r.returncode == 0 else f"exit status {r.returncode}: {out}"


def _settings(name: str) -> dict[str, list[str]]:
    """`key: [values...]` of a unit's [Service]/[Unit] lines (keys may repeat)."""
    out: dict[str, list[str]] = {}
    for line in (UNITS / name).read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


# ---------------------------------------------------------------------------- verify
@pytest.mark.parametrize("unit", [DAEMON, ADAPTER, "tvbod-adapter@cartpole.service", COMMAND,
                                  "tvbod-adapter-command@speed-loop.service"])
def test_verify_is_clean(tmp_path, unit):
    # The instance is loaded from the template in the same directory.
    assert _verify(_installable(tmp_path) / unit) == ""


@pytest.mark.parametrize(("unit", "old", "new", "complaint"), [
    (DAEMON, "ProtectKernelLogs=yes", "ProtectKernelLog=yes", "Unknown key"),           # typo
    (DAEMON, "ProtectSystem=strict", "ProtectSystem=very", "Failed to parse"),         # value
    (DAEMON, "WatchdogSec=30s", "WatchdogSec=30 parsecs", "Failed to parse"),
    (DAEMON, "/opt/tvbod/venv/bin/tvbod run", "/opt/tvbod/nope/tvbod run", "not executable"),
    (ADAPTER, "LockPersonality=yes", "LockPersonalty=yes", "Unknown key"),
    (ADAPTER, "SystemCallFilter=@system-service", "SystemCallFilter=@system-servic",
     "Unknown system call group"),
    (COMMAND, "ExecStart=/usr/bin/env $TVBOD", "ExecStart=$TVBOD", "not executable"),
])
def test_a_broken_copy_is_caught(tmp_path, unit, old, new, complaint):
    text = (UNITS / unit).read_text()
    assert old in text
    problems = _verify(_installable(tmp_path, {unit: text.replace(old, new)}) / unit)
    assert complaint in problems


def test_units_carry_what_the_deployment_relies_on():
    d, a = _settings(DAEMON), _settings(ADAPTER)
    expected = {
        "Type": ["notify"], "NotifyAccess": ["main"], "WatchdogSec": ["30s"],
        "ExecStart": ["/opt/tvbod/venv/bin/tvbod run --config /etc/tvbod/tvbod.yaml"],
        "ExecReload": ["/bin/kill -HUP $MAINPID"], "Restart": ["on-failure"],
        "RestartPreventExitStatus": ["2"],  # tvbod run's exit status for a configuration error
        "StateDirectory": ["tvbod"], "RuntimeDirectory": ["tvbod"],
        "ConfigurationDirectory": ["tvbod"], "StateDirectoryMode": ["0700"],
        "RuntimeDirectoryMode": ["0750"], "DynamicUser": ["yes"], "UMask": ["0077"],
        "CapabilityBoundingSet": [""], "NoNewPrivileges": ["yes"], "ProtectSystem": ["strict"],
        "ProtectHome": ["yes"], "PrivateTmp": ["yes"], "MemoryDenyWriteExecute": ["yes"],
        "RestrictAddressFamilies": ["AF_UNIX AF_INET AF_INET6"],
    }
    for key, value in expected.items():
        assert d.get(key) == value, key
    # The adapters reach the owner-only ipc socket only as the daemon's (dynamic) user.
    assert (a["User"], a["DynamicUser"]) == (d["User"], ["yes"])
    # An adapter reconnects on its own: a daemon restart must not stop it.
    assert a["Wants"] == a["After"] == ["tvbod.service"]
    assert "BindsTo" not in a and "Requires" not in a and "PartOf" not in a
    assert a["ExecStart"] == ["/opt/tvbod/venv/bin/python -m plant_adapters.%i "
                              "--config /etc/tvbod/adapters/%i.yaml"]
    # The adapters are sandboxed exactly like the daemon (hardware access is a per-instance
    # drop-in, docs/deployment.md).
    hardening = [k for k in d if k.startswith(_HARDENING)]
    assert len(hardening) > 25
    assert {k: a.get(k) for k in hardening} == {k: d[k] for k in hardening}


def test_the_command_template_runs_its_env_files_command_as_the_adapters_run():
    a, c = _settings(ADAPTER), _settings(COMMAND)
    # The command line comes from the instance's env file, split at whitespace (`$VAR` as a word
    # of its own); env(1) runs it, as ExecStart='s first word must be a literal path.
    assert c["EnvironmentFile"] == ["/etc/tvbod/adapters/%i.env"]
    assert c["AssertPathExists"] == ["/etc/tvbod/adapters/%i.env"]
    assert c["ExecStart"] == ["/usr/bin/env $TVBOD_ADAPTER_COMMAND"]
    assert c["ExecStartPre"] == ['/usr/bin/test -n "${TVBOD_ADAPTER_COMMAND}"']
    # Everything else as for the shipped adapters: identity, restarts, sandbox.
    same = [k for k in a if k not in ("ExecStart", "AssertPathExists", "Description")]
    assert {k: c.get(k) for k in same} == {k: a[k] for k in same}


_HARDENING = ("NoNewPrivileges", "Capability", "Ambient", "Protect", "Private", "Restrict",
              "LockPersonality", "MemoryDenyWriteExecute", "RemoveIPC", "KeyringMode",
              "SystemCall", "IPAddress", "UMask", "DynamicUser", "User", "Group")


# ---------------------------------------------------------------------------- security
def _exposure(unit_path: Path) -> float:
    r = subprocess.run([ANALYZE, "security", "--offline=yes", "--no-pager", str(unit_path)],
                       capture_output=True, text=True, cwd=unit_path.parent, timeout=60)
    assert r.returncode == 0, r.stderr
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", r.stdout)
    assert m, r.stdout[-2000:]
    return float(m.group(1))


@pytest.mark.parametrize("unit", [DAEMON, ADAPTER, COMMAND])
def test_security_exposure_is_low(tmp_path, unit):
    score = _exposure(_installable(tmp_path) / unit)
    assert score < MAX_EXPOSURE, f"{unit}: exposure {score} (see docs/deployment.md)"


def test_security_score_notices_missing_hardening(tmp_path):
    # The threshold is not vacuous: the bare essentials of the unit score far above it.
    bare = "\n".join(line for line in (UNITS / DAEMON).read_text().splitlines()
                     if not line.startswith(("Protect", "Private", "Restrict", "SystemCall",
                                             "Capability", "NoNew", "Memory", "Lock", "UMask")))
    assert _exposure(_installable(tmp_path, {DAEMON: bare}) / DAEMON) > 4.0


# ---------------------------------------------------------------------------- seccomp
UNISTD = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")

#: Runs in the child: installs the classic-BPF seccomp program given as JSON, then execs argv.
#: No systemd needed; the kernel applies the same kind of filter systemd would.
INSTALL_AND_EXEC = textwrap.dedent("""\
    import ctypes, json, os, struct, sys
    prog = json.load(open(sys.argv[1]))
    raw = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    fprog = Fprog(len(prog), ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS (NoNewPrivileges=yes)
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")
    os.execv(sys.argv[2], sys.argv[2:])
    """)

_LD_ABS, _JEQ, _JGE, _AND, _RET = 0x20, 0x15, 0x35, 0x54, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _EAFNOSUPPORT = 1, 97
_AUDIT_ARCH_X86_64 = 0xC000003E
_PROT_WRITE, _PROT_EXEC, _SHM_EXEC = 0x2, 0x4, 0o100000
_AF = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10}


def _group(name: str, seen: set[str] | None = None) -> set[str]:
    """System call names of a systemd group (`@system-service`), nested groups expanded."""
    seen = set() if seen is None else seen
    out = subprocess.run([ANALYZE, "syscall-filter", "--no-pager", name], capture_output=True,
                         text=True, check=True).stdout
    names: set[str] = set()
    for line in out.splitlines()[1:]:
        item = line.strip()
        if not item or item.startswith("#"):
            continue
        if item.startswith("@"):
            if item not in seen:
                seen.add(item)
                names |= _group(item, seen)
        else:
            names.add(item)
    return names


def _allowed_syscalls(unit: str) -> set[str]:
    """The unit's SystemCallFilter= lines in order (the first is an allow list)."""
    allowed: set[str] = set()
    for value in _settings(unit)["SystemCallFilter"]:
        deny = value.startswith("~")
        names: set[str] = set()
        for item in value.lstrip("~").split():
            names |= _group(item) if item.startswith("@") else {item}
        allowed = allowed - names if deny else allowed | names
    return allowed


def _seccomp_program(unit: str) -> list[tuple[int, int, int, int]]:
    """A classic-BPF program with the unit's SystemCallFilter= (EPERM otherwise),
    SystemCallArchitectures=native, MemoryDenyWriteExecute=yes (as systemd builds it: no
    W+X mmap, no PROT_EXEC mprotect, no SHM_EXEC) and RestrictAddressFamilies=."""
    numbers = {m.group(1): int(m.group(2)) for m in
               re.finditer(r"#define __NR_(\w+) (\d+)", UNISTD.read_text())}
    s = _settings(unit)
    assert s["SystemCallArchitectures"] == ["native"] and s["MemoryDenyWriteExecute"] == ["yes"]
    families = [_AF[f] for f in s["RestrictAddressFamilies"][0].split()]
    eperm, nr = (_RET, 0, 0, _ERRNO | _EPERM), (_LD_ABS, 0, 0, 0)
    arg = lambda i: (_LD_ABS, 0, 0, 16 + 8 * i)  # noqa: E731 - low half of args[i]
    p = [(_LD_ABS, 0, 0, 4), (_JEQ, 1, 0, _AUDIT_ARCH_X86_64), eperm,
         nr, (_JGE, 0, 1, 0x40000000), eperm]                       # x32 calls: not native

    def special(name, body):
        p.extend([nr, (_JEQ, 0, len(body), numbers[name]), *body])

    def refuse_if_all(bits):  # accumulator & bits == bits -> EPERM, else allow
        return [(_AND, 0, 0, bits), (_JEQ, 0, 1, bits), eperm, (_RET, 0, 0, _ALLOW)]

    special("mmap", [arg(2), *refuse_if_all(_PROT_WRITE | _PROT_EXEC)])
    for name in ("mprotect", "pkey_mprotect"):
        special(name, [arg(2), *refuse_if_all(_PROT_EXEC)])
    special("shmat", [arg(2), *refuse_if_all(_SHM_EXEC)])
    body = [arg(0)]
    for af in families:
        body += [(_JEQ, 0, 1, af), (_RET, 0, 0, _ALLOW)]
    special("socket", body + [(_RET, 0, 0, _ERRNO | _EAFNOSUPPORT)])
    p.append(nr)
    for name in sorted(_allowed_syscalls(unit)):
        if name in numbers:  # other architectures' calls (e.g. `mmap2`) do not exist here
            p += [(_JEQ, 0, 1, numbers[name]), (_RET, 0, 0, _ALLOW)]
    p.append(eperm)
    assert len(p) < 4096
    return p


needs_x86_64_seccomp = pytest.mark.skipif(
    platform.machine() != "x86_64" or not UNISTD.exists(),
    reason="the seccomp emulation knows x86_64 system call numbers only (needs linux-libc-dev)")


def _sandboxed(tmp_path: Path, unit: str, code: str) -> subprocess.CompletedProcess:
    spec = tmp_path / "seccomp.json"
    spec.write_text(json.dumps(_seccomp_program(unit)))
    return subprocess.run([sys.executable, "-c", INSTALL_AND_EXEC, str(spec), sys.executable,
                           "-c", code], capture_output=True, text=True, timeout=120)


@needs_x86_64_seccomp
def test_the_emulated_policy_bites(tmp_path):
    # Without this the daemon test below would prove nothing.
    r = _sandboxed(tmp_path, DAEMON, textwrap.dedent("""\
        import mmap, os, socket
        def refused(f):
            try:
                f()
            except OSError as exc:
                return exc.errno
        print(refused(lambda: mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE
                                        | mmap.PROT_EXEC)))
        print(refused(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW)))
        print(refused(lambda: os.setuid(0)))                   # @privileged
        print(refused(lambda: os.sched_setaffinity(0, {0})))   # @resources
        print(refused(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).close()))
        """))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "97", "1", "1", "None"]


@needs_x86_64_seccomp
@pytest.mark.parametrize("unit", [DAEMON, ADAPTER])
def test_numpy_scipy_and_zmq_work_under_the_policy(tmp_path, unit):
    # OpenBLAS (Cholesky), L-BFGS-B and libzmq's I/O thread (which calls sched_setscheduler).
    r = _sandboxed(tmp_path, unit, textwrap.dedent("""\
        import numpy as np, scipy.optimize, zmq
        a = np.random.default_rng(0).normal(size=(300, 300))
        np.linalg.cholesky(a @ a.T + 300 * np.eye(300))
        res = scipy.optimize.minimize(lambda x: ((x - 1) ** 2).sum(), np.zeros(4),
                                      method="L-BFGS-B")
        ctx = zmq.Context(); s = ctx.socket(zmq.DEALER); s.close(); ctx.term()
        print("ok", round(float(res.x.sum()), 3))
        """))
    assert (r.returncode, r.stdout.strip()) == (0, "ok 4.0"), r.stderr[-3000:]


class SandboxedDaemon(Daemon):
    """The harness's daemon, started through the seccomp installer."""

    def __init__(self, root: Path, spec: Path, **kw) -> None:
        super().__init__(root, **kw)
        self.spec = spec

    def start(self, wait: bool = True):
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", INSTALL_AND_EXEC, str(self.spec), sys.executable, "-m",
             "tvbod", "run", "--config", str(self.root / "tvbod.yaml")],
            stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.root)
        out.close()
        if wait:
            self.wait_ready()
        return self


@needs_x86_64_seccomp
def test_the_daemon_serves_a_session_under_the_units_policy(tmp_path):
    spec = tmp_path / "seccomp.json"
    spec.write_text(json.dumps(_seccomp_program(DAEMON)))
    d = SandboxedDaemon(tmp_path / "d", spec, checkpoint_every=4).start()
    try:
        with d.client() as c:
            c.hello()
            for _ in range(12):  # GP fits, L-BFGS-B proposals, journal fsyncs, checkpoints
                p = c.ask()
                c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
            assert c.status("alpha")["plants"][0]["tells"] == 12
    finally:
        code = d.stop(signal.SIGTERM)
    log = d.log.read_text()
    assert code == 0, log[-3000:]
    assert "checkpoint_written" in log and "Traceback" not in log
