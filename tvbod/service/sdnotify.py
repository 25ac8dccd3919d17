"""sd_notify(3) without libsystemd: readiness, status, watchdog and reload datagrams to systemd.

The protocol. systemd passes an `AF_UNIX` datagram socket address in `$NOTIFY_SOCKET`: a path
(`/run/systemd/notify`) or, with a leading `@`, a name in the abstract namespace (the `@` becomes a
NUL byte). Each message is one datagram of newline-separated `VARIABLE=value` assignments, e.g.
`READY=1`, `STATUS=...`, `WATCHDOG=1`, `RELOADING=1\\nMONOTONIC_USEC=...`, `STOPPING=1`. With
`WatchdogSec=` set, systemd also passes `$WATCHDOG_USEC` (the timeout, microseconds) and
`$WATCHDOG_PID` (whose pings count); a service pings at half the timeout (sd_watchdog_enabled(3)).

Guarantees. Without `$NOTIFY_SOCKET` every method is a no-op, so the daemon runs the same from a
terminal. A failed send (systemd gone, queue full) never raises: it is counted in `errors`, and
the first failure of an outage (the first ever, or the first after a successful send) is passed
to the optional `on_error` callback, so a vanished socket is logged once, not at every watchdog
tick. Sends use `MSG_DONTWAIT`, so the loop never blocks on the notification socket. A
`Notifier` is not thread-safe: call it from the event loop's thread.

The environment is left as it is (sd_notify's `unset_environment` is not offered): the daemon
starts no child processes, and a future child that inherited `$NOTIFY_SOCKET` could not change the
service's state anyway, because the units set `NotifyAccess=main`.

Typical use in an event loop::

    notifier = Notifier.from_environment(on_error=lambda msg, exc: log.warning(...))
    ...bind...
    notifier.ready(status_line(statuses))
    while running:
        ...
        notifier.tick(time.monotonic())     # WATCHDOG=1 every half of $WATCHDOG_USEC
    notifier.stopping()
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: Longest STATUS= text `status_line` builds; systemd 252 reads notification datagrams into a
#: buffer of PIPE_BUF (4096) bytes and ignores longer ones.
STATUS_MAX_CHARS = 1024

ErrorCallback = Callable[[str, OSError], None]


def _socket_address(value: str) -> str | None:
    """`$NOTIFY_SOCKET` as an `AF_UNIX` address: a path, or `@name` -> `"\\0name"`; else None."""
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    return None  # e.g. systemd >= 254's `vsock:` addresses: not supported, notifications disabled


def _watchdog_usec(env: Mapping[str, str], pid: int) -> int | None:
    """`$WATCHDOG_USEC` if it is a positive integer meant for `pid` (sd_watchdog_enabled(3))."""
    raw = env.get("WATCHDOG_USEC")
    if not raw:
        return None
    watchdog_pid = env.get("WATCHDOG_PID")
    if watchdog_pid:
        try:
            if int(watchdog_pid) != pid:
                return None  # the pings are expected from another process (e.g. our parent)
        except ValueError:
            return None
    try:
        usec = int(raw)
    except ValueError:
        return None
    return usec if usec > 0 else None


class Notifier:
    """Sends sd_notify(3) messages to systemd; a silent no-op when not run under systemd.

    `address` is the socket address (a path, or `"\\0name"` for an abstract socket) or None (no-op).
    `watchdog_usec` is the watchdog timeout systemd enforces for this process, or None.
    """

    def __init__(self, address: str | None, watchdog_usec: int | None = None,
                 on_error: ErrorCallback | None = None) -> None:
        self.address = address
        self.watchdog_usec = watchdog_usec if address is not None else None
        self.on_error = on_error
        self.errors = 0
        self.sent = 0
        self.failing_ = False
        self.sock_: socket.socket | None = None
        self.next_watchdog_: float = float("-inf")

    @classmethod
    def from_environment(cls, env: Mapping[str, str] = os.environ, pid: int | None = None,
                         on_error: ErrorCallback | None = None) -> Notifier:
        """Read `$NOTIFY_SOCKET`, `$WATCHDOG_USEC` and `$WATCHDOG_PID` (`pid` defaults to ours)."""
        raw = env.get("NOTIFY_SOCKET", "")
        address = _socket_address(raw) if raw else None
        if raw and address is None and on_error is not None:
            on_error(f"NOTIFY_SOCKET={raw!r} is not an AF_UNIX path or @abstract name; "
                     "notifications disabled", OSError("unsupported address"))
        pid = os.getpid() if pid is None else pid
        return cls(address, _watchdog_usec(env, pid), on_error)

    # ------------------------------------------------------------------ messages
    def notify(self, *assignments: str) -> bool:
        """Send `assignments` (`"VAR=value"` each) as one datagram; True if it was sent."""
        if self.address is None:
            return False
        payload = "\n".join(assignments).encode("utf-8", "replace")
        try:
            if self.sock_ is None:
                self.sock_ = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self.sock_.sendto(payload, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL, self.address)
        except OSError as exc:
            self.errors += 1
            if self.on_error is not None and not self.failing_:
                try:
                    first = assignments[0] if assignments else ""
                    self.on_error(f"sd_notify {first!r} failed", exc)
                except Exception:  # noqa: BLE001 - a logging failure must not reach the loop
                    pass
            self.failing_ = True
            return False
        self.sent += 1
        self.failing_ = False
        return True

    def ready(self, status: str | None = None) -> bool:
        """`READY=1` (and `STATUS=`): configs validated, state restored, sockets bound."""
        return self.notify("READY=1", *self._status_field(status))

    def status(self, text: str) -> bool:
        """`STATUS=text`, shown by `systemctl status` (newlines become spaces)."""
        return self.notify(*self._status_field(text))

    def reloading(self, status: str | None = None) -> bool:
        """`RELOADING=1` + `MONOTONIC_USEC=<CLOCK_MONOTONIC, us>` in one datagram; send `ready()`
        when the reload is done (or refused)."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}", *self._status_field(status))

    def stopping(self, status: str | None = None) -> bool:
        """`STOPPING=1`: the daemon is shutting down (final checkpoints follow)."""
        return self.notify("STOPPING=1", *self._status_field(status))

    def watchdog(self) -> bool:
        """`WATCHDOG=1`, the keep-alive ping."""
        return self.notify("WATCHDOG=1")

    # ------------------------------------------------------------------ watchdog schedule
    def watchdog_interval(self) -> float | None:
        """Seconds between pings: half of `$WATCHDOG_USEC`; None when no watchdog is expected."""
        return None if self.watchdog_usec is None else self.watchdog_usec / 2e6

    def watchdog_due(self, now: float) -> bool:
        """True if a ping is due at `now` (`time.monotonic()` seconds)."""
        return self.watchdog_usec is not None and now >= self.next_watchdog_

    def tick(self, now: float) -> bool:
        """Ping the watchdog if due at `now`; cheap enough for every turn of the loop."""
        if not self.watchdog_due(now):
            return False
        # The next ping is scheduled even if this one failed: retrying every turn would only
        # flood the error callback.
        self.next_watchdog_ = now + self.watchdog_interval()
        return self.watchdog()

    def close(self) -> None:
        if self.sock_ is not None:
            self.sock_.close()
            self.sock_ = None

    @staticmethod
    def _status_field(text: str | None) -> tuple[str, ...]:
        if text is None:
            return ()
        return ("STATUS=" + " ".join(text.splitlines()),)


def status_line(plants: Sequence[Mapping[str, Any]], quarantined: Sequence[str] = (),
                max_chars: int = STATUS_MAX_CHARS) -> str:
    """The STATUS= text from `PlantRuntime.status()` dicts: a count, then each plant's step,
    resets, last reset step and adapter, e.g.

    `2 plants, 1 with an adapter: cartpole t=142 resets=1 (last t=103) adapter=cartpole;
    temperature t=0 resets=0 adapter=-`

    `adapter` is the name the plant's adapter gave in its last `hello` (None: none yet). Longer
    than `max_chars`, the plant list is cut and ends with `; ... (+N more)`. Quarantined plants
    (`quarantined`, by name) come first: `1 QUARANTINED (beta)`.
    """
    with_adapter = sum(1 for p in plants if p.get("adapter"))
    head = (f"{len(plants)} plant{'' if len(plants) == 1 else 's'}, "
            f"{with_adapter} with an adapter")
    if quarantined:
        head += f", {len(quarantined)} QUARANTINED ({', '.join(quarantined)})"
    parts = []
    for p in plants:
        last = p.get("last_reset_t")
        reset = f" (last t={last})" if last is not None and p.get("resets") else ""
        parts.append(f"{p.get('plant')} t={p.get('t')} resets={p.get('resets')}{reset} "
                     f"adapter={p.get('adapter') or '-'}")
    shown: list[str] = []
    for i, part in enumerate(parts):
        rest = len(parts) - i - 1
        more = f"; ... (+{rest} more)" if rest else ""
        if len(head + ": " + "; ".join(shown + [part]) + more) > max_chars:
            break
        shown.append(part)
    rest = len(parts) - len(shown)
    text = head + (": " + "; ".join(shown) if shown else "")
    text += f"; ... (+{rest} more)" if rest else ""
    return text[:max_chars]
