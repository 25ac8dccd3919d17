"""`tvbod run`: load and validate the configuration, restore every plant, bind, serve until
SIGTERM/SIGINT, then checkpoint and exit 0. Configuration and state problems exit non-zero with
one clear message before anything is bound."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="daemon file (default: $TVBOD_CONFIG or configs/tvbod.yaml)")
    parser.add_argument("--log-format", choices=("json", "console"), default=None,
                        help="override the configured log format")


def run(args: argparse.Namespace) -> int:
    import zmq

    from tvbod.service.config import ConfigError, load_daemon_config
    from tvbod.service.events import EventSink, configure_logging
    from tvbod.service.plant import RestoreError
    from tvbod.service.sdnotify import Notifier
    from tvbod.service.server import DaemonLockedError, Server

    try:
        config = load_daemon_config(args.config, isatty=sys.stdout.isatty())
    except ConfigError as exc:
        hint = ""
        if "file not found" in str(exc) and exc.key is None:
            hint = " (write a configuration tree with `tvbod init DIR`, then --config DIR/tvbod.yaml)"
        print(f"tvbod: configuration error: {exc}{hint}", file=sys.stderr)
        return 2
    configure_logging(args.log_format or config.log_format)
    sink = EventSink()
    notifier = Notifier.from_environment(
        on_error=lambda message, error: sink.emit("sd_notify_failed", level="warning",
                                                  message=message, error=str(error)))
    server = Server(config, sink, notifier)
    try:
        server.open()
        endpoints = server.bind()
    except (RestoreError, DaemonLockedError) as exc:
        print(f"tvbod: {exc}", file=sys.stderr)
        sink.emit("daemon_stopped", level="error", reason=str(exc))
        return 1
    except (OSError, zmq.ZMQError) as exc:
        print(f"tvbod: cannot start: {exc}", file=sys.stderr)
        server.shutdown()
        return 1
    server.install_signal_handlers()
    # READY=1 only now: configs validated, state restored, sockets bound, SIGHUP handled.
    notifier.ready(server.status_line())
    sink.emit("daemon_started", endpoints=endpoints, plants=sorted(server.plants),
              state_dir=str(config.state_dir), config=str(config.path))
    try:
        server.serve()
    finally:
        server.shutdown()
        sink.emit("daemon_stopped", reason="signal" if server.stop_requested else "error",
                  messages=server.messages)
        sink.close()
    return server.exit_code
