"""Structured events: stdout JSON lines, per-plant event files, non-finite floats, torn lines."""

from __future__ import annotations

import errno
import io
import json
import os
from pathlib import Path
from typing import Any, Iterator

import pytest
import structlog

from tvbod.service import fsio
from tvbod.service.events import (
    MAX_KEPT_LINES,
    EventSink,
    PlantEventLog,
    configure_logging,
    finite_json,
)
from tvbod.service.event_files import read_events
from tvbod.service.store import StorageError


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()


def strict_json(line: str) -> Any:
    """Parse like an RFC 8259 parser would: NaN/Infinity tokens are an error, not a float."""
    def refuse(token: str) -> None:
        raise ValueError(f"invalid JSON token {token}")
    return json.loads(line, parse_constant=refuse)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [strict_json(line) for line in stream.getvalue().splitlines()]


def test_json_logging_writes_one_object_per_line_with_timestamp_level_and_event() -> None:
    out = io.StringIO()
    configure_logging("json", stream=out)
    structlog.get_logger().bind(plant="cart").info("proposal", t=3, proposal_id="p3")
    (line,) = lines(out)
    assert line["event"] == "proposal" and line["level"] == "info"
    assert (line["plant"], line["t"], line["proposal_id"]) == ("cart", 3, "p3")
    assert line["timestamp"].endswith("Z") and "T" in line["timestamp"]


def test_configuring_twice_sends_output_to_the_latest_stream() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("json", stream=first)
    configure_logging("json", stream=second)
    structlog.get_logger().info("daemon_started")
    assert first.getvalue() == "" and lines(second)[0]["event"] == "daemon_started"


def test_console_format_renders_a_readable_line() -> None:
    out = io.StringIO()
    configure_logging("console", stream=out)
    structlog.get_logger().info("reset", t=9, psi=1.5)
    assert "reset" in out.getvalue() and "psi=1.5" in out.getvalue()


def test_unknown_format_or_level_is_refused() -> None:
    with pytest.raises(ValueError, match="format"):
        configure_logging("xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="level"):
        configure_logging("json", level="loud")


def test_debug_events_are_filtered_at_info_level() -> None:
    out = io.StringIO()
    configure_logging("json", stream=out, level="info")
    structlog.get_logger().debug("noise")
    assert out.getvalue() == ""


def test_non_finite_floats_become_strings_in_stdout_json() -> None:
    out = io.StringIO()
    configure_logging("json", stream=out)
    structlog.get_logger().info("reset", psi=float("nan"), threshold=float("inf"),
                                history=[float("-inf"), 1.0], nested={"x": float("nan")})
    (line,) = lines(out)
    assert (line["psi"], line["threshold"]) == ("NaN", "Infinity")
    assert line["history"] == ["-Infinity", 1.0] and line["nested"] == {"x": "NaN"}


def test_finite_json_leaves_finite_values_alone() -> None:
    value = {"a": [1, 2.5, "s", None, True], "b": (0.0, -1e-310)}
    assert finite_json(value) == {"a": [1, 2.5, "s", None, True], "b": [0.0, -1e-310]}


def test_plant_event_goes_to_stdout_and_to_the_plant_file(tmp_path: Path) -> None:
    out = io.StringIO()
    configure_logging("json", stream=out)
    log = PlantEventLog(tmp_path / "plants" / "cart" / "events.jsonl", plant="cart")
    log.emit("checkpoint_written", t=4, y=0.25)
    (stdout_line,) = lines(out)
    (file_line,) = read_events(log.path)
    for line in (stdout_line, file_line):
        assert (line["event"], line["plant"], line["t"], line["y"]) == ("checkpoint_written", "cart", 4, 0.25)
        assert line["level"] == "info" and line["timestamp"].endswith("Z")


def test_per_step_events_are_debug_on_stdout_but_always_in_the_plant_file(tmp_path: Path) -> None:
    out = io.StringIO()
    configure_logging("json", stream=out, level="info")
    log = PlantEventLog(tmp_path / "events.jsonl", plant="cart")
    log.emit("proposal", t=1, proposal_id="cart:1")
    log.emit("measurement", t=1, proposal_id="cart:1")
    log.emit("reset", level="warning", t=1)
    assert [e["event"] for e in lines(out)] == ["reset"]
    assert [(e["event"], e["level"]) for e in read_events(log.path)] == [
        ("proposal", "debug"), ("measurement", "debug"), ("reset", "warning")]
    out = io.StringIO()
    configure_logging("json", stream=out, level="debug")
    log.emit("measurement", t=2, proposal_id="cart:2")
    assert [e["event"] for e in lines(out)] == ["measurement"]


def test_every_plant_file_line_is_strict_json_even_with_nan(tmp_path: Path) -> None:
    configure_logging("json", stream=io.StringIO())
    log = PlantEventLog(tmp_path / "events.jsonl", plant="cart")
    log.emit("reset", t=5, t_prime=2, psi=float("nan"), threshold=float("inf"), dataset_size_before=5)
    log.emit("measurement", t=5, y=float("-inf"))
    parsed = [strict_json(line) for line in log.path.read_text().splitlines()]
    assert [p["event"] for p in parsed] == ["reset", "measurement"]
    assert (parsed[0]["psi"], parsed[0]["threshold"], parsed[1]["y"]) == ("NaN", "Infinity", "-Infinity")


def test_bound_context_is_added_to_every_event_and_shares_the_file(tmp_path: Path) -> None:
    configure_logging("json", stream=io.StringIO())
    log = PlantEventLog(tmp_path / "events.jsonl", plant="cart")
    log.bind(t=7).emit("proposal", proposal_id="p7")
    log.emit("checkpoint_written", t=8)
    events = read_events(log.path)
    assert [(e["event"], e["t"], e["plant"]) for e in events] == [
        ("proposal", 7, "cart"), ("checkpoint_written", 8, "cart")]


def test_problem_events_get_a_higher_level(tmp_path: Path) -> None:
    configure_logging("json", stream=io.StringIO())
    log = PlantEventLog(tmp_path / "events.jsonl", plant="cart")
    log.emit("storage_error", errno=28)
    log.emit("client_error", code="bad_field", peer="abc")
    log.emit("proposal", level="debug")
    assert [e["level"] for e in read_events(log.path)] == ["error", "warning", "debug"]


def test_read_events_tolerates_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "proposal", "t": 1}\n{"event": "measu')
    assert read_events(path) == [{"event": "proposal", "t": 1}]


def test_appending_after_a_torn_line_does_not_glue_onto_it(tmp_path: Path) -> None:
    configure_logging("json", stream=io.StringIO())
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "proposal", "t": 1}\n{"event": "measu')
    PlantEventLog(path, plant="cart").emit("plant_restored", t=1)
    assert [e["event"] for e in read_events(path)] == ["proposal", "plant_restored"]


def test_a_failing_event_file_is_reported_on_stdout_and_does_not_raise(tmp_path: Path) -> None:
    out = io.StringIO()
    configure_logging("json", stream=out)
    (tmp_path / "not-a-dir").write_text("")
    log = PlantEventLog(tmp_path / "not-a-dir" / "events.jsonl", plant="cart")
    log.emit("checkpoint_written", t=1)
    events = [line["event"] for line in lines(out)]
    assert events == ["checkpoint_written", "storage_error"]


def test_event_sink_reuses_one_log_per_plant_and_keeps_daemon_events_off_plant_files(
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    configure_logging("json", stream=out, level="debug")
    sink = EventSink()
    cart = sink.plant("cart", tmp_path / "cart.jsonl")
    assert sink.plant("cart", tmp_path / "cart.jsonl") is cart
    sink.emit("daemon_started", version="0.1.0")
    cart.emit("proposal", t=0)
    sink.close()
    assert [line["event"] for line in lines(out)] == ["daemon_started", "proposal"]
    assert [e["event"] for e in read_events(tmp_path / "cart.jsonl")] == ["proposal"]


# ---------------------------------------------------------------------- rendered once
def test_a_plant_event_is_the_same_line_on_stdout_and_in_its_file(tmp_path: Path) -> None:
    out = io.StringIO()
    configure_logging("json", stream=out, level="debug")
    log = PlantEventLog(tmp_path / "events.jsonl", plant="cart").bind(t=7)
    log.emit("measurement", proposal_id="cart:7", x=[0.5, -1.0], psi=float("nan"),
             threshold=float("inf"), gains={"k": float("-inf")}, reset=False)
    log.emit("checkpoint_written", dataset_size=3)
    stdout_lines = out.getvalue().splitlines()
    assert stdout_lines == log.path.read_text().splitlines()
    first = strict_json(stdout_lines[0])
    assert (first["psi"], first["threshold"], first["gains"]) == ("NaN", "Infinity", {"k": "-Infinity"})
    assert (first["plant"], first["t"], first["level"]) == ("cart", 7, "debug")


def test_under_journald_the_stdout_line_is_the_file_line_after_its_priority(tmp_path: Path) -> None:
    out = io.StringIO()
    configure_logging("json", stream=out, level="info", priority_prefix=True)
    log = PlantEventLog(tmp_path / "events.jsonl", plant="cart")
    log.emit("proposal", t=1, proposal_id="cart:1")  # debug: the file only
    log.emit("reset", level="warning", t=2, psi=2.5)
    log.emit("checkpoint_written", t=2)
    file_lines = log.path.read_text().splitlines()
    assert out.getvalue().splitlines() == ["<4>" + file_lines[1], "<6>" + file_lines[2]]


def test_a_logger_of_ones_own_still_gets_every_plant_event(tmp_path: Path) -> None:
    """Tests and tools that pass a logger keep receiving the fields (no direct stdout write)."""
    seen = []

    class Recorder:
        def info(self, event, **fields):
            seen.append((event, fields))

    out = io.StringIO()
    configure_logging("json", stream=out)
    PlantEventLog(tmp_path / "events.jsonl", plant="cart", logger=Recorder()).emit("reset", t=3)
    assert seen == [("reset", {"plant": "cart", "t": 3})] and out.getvalue() == ""


def test_the_console_format_still_renders_plant_events_for_people(tmp_path: Path) -> None:
    out = io.StringIO()
    configure_logging("console", stream=out)
    log = PlantEventLog(tmp_path / "events.jsonl", plant="cart")
    log.emit("reset", t=9, psi=float("nan"))
    assert "reset" in out.getvalue() and "psi=NaN t=9" in out.getvalue()
    assert read_events(log.path)[0]["psi"] == "NaN"


def test_after_structlog_is_configured_anew_plant_events_follow_it(tmp_path: Path) -> None:
    """The direct stdout line applies only while structlog has the configuration
    `configure_logging` installed: a reset or another configuration takes over."""
    old = io.StringIO()
    configure_logging("json", stream=old)
    new = io.StringIO()
    structlog.configure(processors=[structlog.processors.JSONRenderer()],
                        logger_factory=structlog.WriteLoggerFactory(file=new))
    PlantEventLog(tmp_path / "events.jsonl", plant="cart").emit("reset", t=3)
    assert old.getvalue() == "" and json.loads(new.getvalue())["event"] == "reset"


class _FullDisk(fsio.Files):
    """The real file system, except that while `full` every write to an event file stores at
    most `room` bytes and then fails with ENOSPC, and `failing_fsyncs` fsyncs fail with EIO.
    Every call is noted in `calls` as `(op, offset, data)`."""

    def __init__(self) -> None:
        self.full, self.room, self.failing_fsyncs = False, 0, 0
        self.calls: list[tuple] = []

    def pwrite(self, fd, data, offset):
        if self.full:
            if self.room <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            data, self.room = data[: self.room], 0
        self.calls.append(("write", offset, bytes(data)))
        return super().pwrite(fd, data, offset)

    def fsync(self, fd):
        if self.failing_fsyncs:
            self.failing_fsyncs -= 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        self.calls.append(("fsync", None, None))
        super().fsync(fd)


def _event_log(tmp_path: Path) -> tuple[Path, PlantEventLog]:
    configure_logging("json", stream=io.StringIO())
    path = tmp_path / "events.jsonl"
    return path, PlantEventLog(path, plant="cart")


def test_lines_the_disk_refused_are_written_in_order_before_any_later_line(tmp_path: Path) -> None:
    out = io.StringIO()
    configure_logging("json", stream=out)
    path = tmp_path / "events.jsonl"
    log = PlantEventLog(path, plant="cart")
    with fsio.use(_FullDisk()) as disk:
        log.emit("measurement", t=1)
        disk.full, disk.room = True, 10  # the second line is torn after 10 bytes, then refused
        log.emit("measurement", t=2)
        log.emit("reset", t=2)
        assert [e["t"] for e in read_events(path)] == [1]
        assert path.read_bytes().endswith(b"\n"), "the torn part was cut off"
        disk.full = False
        log.emit("checkpoint_written", t=3)
    assert [(e["event"], e["t"]) for e in read_events(path)] == [
        ("measurement", 1), ("measurement", 2), ("reset", 2), ("checkpoint_written", 3)]
    assert len(path.read_text().splitlines()) == 4
    errors = [e for e in lines(out) if e["event"] == "storage_error"]
    assert [e["unwritten_lines"] for e in errors] == [1, 2]


def test_sync_raises_storage_error_while_a_line_is_unwritten_and_writes_it_when_it_can(
        tmp_path: Path) -> None:
    path, log = _event_log(tmp_path)
    with fsio.use(_FullDisk()) as disk:
        disk.full = True
        log.emit("measurement", t=1)
        with pytest.raises(StorageError, match="No space left"):
            log.sync()
        disk.full = False
        log.sync()
    assert [e["t"] for e in read_events(path)] == [1]


def test_after_a_failed_fsync_the_unsynced_bytes_are_written_again_before_the_next_fsync(
        tmp_path: Path) -> None:
    """A failed fsync may have dropped the dirty pages while a later one succeeds: the bytes
    since the last good fsync are written again, in place, so the good fsync covers them."""
    path, log = _event_log(tmp_path)
    with fsio.use(_FullDisk()) as disk:
        log.emit("measurement", t=1)
        log.sync()
        synced = path.stat().st_size
        log.emit("measurement", t=2)
        disk.failing_fsyncs = 1
        with pytest.raises(StorageError, match="Input/output error"):
            log.sync()
        del disk.calls[:]
        log.sync()
    tail = path.read_bytes()[synced:]
    assert disk.calls == [("write", synced, tail), ("fsync", None, None)]
    assert [e["t"] for e in read_events(path)] == [1, 2]


def test_a_long_outage_keeps_every_history_line_but_a_bounded_number_of_others(
        tmp_path: Path) -> None:
    path, log = _event_log(tmp_path)
    with fsio.use(_FullDisk()) as disk:
        disk.full = True
        for t in range(MAX_KEPT_LINES + 50):
            log.emit("client_error", t=t)
        log.emit("measurement", t=1)
        disk.full = False
        log.emit("reset", t=1)
    events = [e["event"] for e in read_events(path)]
    assert events.count("client_error") == MAX_KEPT_LINES
    assert events[-2:] == ["measurement", "reset"]
