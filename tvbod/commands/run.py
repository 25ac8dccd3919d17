"""`tvbod run`: load and validate the configuration, restore every plant, bind, serve until
SIGTERM/SIGINT, then checkpoint and exit 0. Configuration and state problems exit non-zero with
one clear message before anything is bound."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tvbod.service.daemon_file import CONFIG_HELP

    parser.add_argument("--config", metavar="FILE", default=None, help=CONFIG_HELP)
    parser.add_argument("--log-format", choices=("json", "console"), default=None,
                        help="override the configured log format")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default=None,
                        help="override the configured log level")


def run(args: argparse.Namespace) -> int:
    import zmq

    from tvbod.service.config import ConfigError, load_daemon_config
    from tvbod.service.events import EventSink, configure_logging
    from tvbod.service.recovery import RestoreError
    from tvbod.service.sdnotify import Notifier
    from tvbod.service.server import DaemonLockedError, Server

    try:
        config = load_daemon_config(args.config, isatty=sys.stdout.isatty())
    except ConfigError as exc:
        hint = ""
        if "file not found" in str(exc) and exc.key is None:
            hint = " (write a configuration tree with `tvbod init DIR`, then --config DIR/tvbod.yaml)"
        _fail(f"tvbod: configuration error: {exc}{hint}")
        return 2
    from tvbod.service import malloc, metrics as metrics_module

    configure_logging(args.log_format or config.log_format, level=args.log_level or config.log_level)
    metrics = metrics_module.Metrics()
    sink = EventSink(observer=lambda event, fields: metrics.observe(event, fields))
    _warnings_to_events(sink)
    notifier = Notifier.from_environment(
        on_error=lambda message, error: sink.emit("sd_notify_failed", level="warning",
                                                  message=message, error=str(error)))
    server = Server(config, sink, notifier)
    try:
        server.open()
        malloc.trim()  # the restore's replaced and packed factors (tvbod/service/malloc.py)
        endpoints = server.bind()
        metrics = metrics_module.create(config.metrics)
    except (RestoreError, DaemonLockedError) as exc:
        _fail(f"tvbod: {exc}")
        sink.emit("daemon_stopped", level="error", reason=str(exc))
        return 1
    except (OSError, zmq.ZMQError) as exc:
        _fail(f"tvbod: cannot start: {exc}")
        server.shutdown()
        return 1
    if config.metrics is not None:
        endpoints.append(f"http://{config.metrics[0]}:{config.metrics[1]}/metrics")
    server.host.use_metrics(metrics)
    server.install_signal_handlers()
    # READY=1 only now: configs validated, state restored, sockets bound, SIGHUP handled.
    notifier.ready(server.status_line())
    sink.emit("daemon_started", endpoints=endpoints, plants=sorted(server.plants),
              quarantined=sorted(server.quarantined),
              state_dir=str(config.state_dir), config=str(config.path))
    try:
        server.serve()
    finally:
        metrics.stopping()
        server.shutdown()
        metrics.close()
        sink.emit("daemon_stopped", reason="signal" if server.stop_requested else "error",
                  messages=server.messages)
        sink.close()
    return server.exit_code


def _warnings_to_events(sink) -> None:
    """Python warnings (numpy's overflow RuntimeWarning, ...) become `python_warning` events on
    stdout instead of free text on stderr."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ARG001
        sink.emit("python_warning", category=category.__name__, message=str(message),
                  where=f"{filename}:{lineno}")

    warnings.showwarning = show


def _fail(line: str) -> None:
    """One line on stderr; under systemd it carries the error priority `<3>` (journalctl -p err)."""
    from tvbod.service.events import PRIORITIES, is_journal_stream

    prefix = f"<{PRIORITIES['error']}>" if is_journal_stream(sys.stderr) else ""
    print(prefix + line, file=sys.stderr)
