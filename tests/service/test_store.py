"""Crash-safe storage: checkpoints with a fallback generation, the journal, recovery, full disks."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from tvbod.service.store import (
    CheckpointStore,
    Journal,
    PlantStore,
    StorageError,
)


class FullDisk:
    """A `writer` that writes `allow` bytes in total, then fails like a full disk (ENOSPC)."""

    def __init__(self, allow: int = 0, code: int = errno.ENOSPC) -> None:
        self.allow, self.code, self.calls = allow, code, 0

    def __call__(self, fd: int, data: bytes, offset: int) -> int:
        self.calls += 1
        if self.allow <= 0:
            raise OSError(self.code, os.strerror(self.code))
        n = os.pwrite(fd, data[: self.allow], offset)
        self.allow -= n
        return n


def bits(x: float) -> bytes:
    return struct.pack(">d", x)


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


# --- checkpoints ------------------------------------------------------------------------------


def test_checkpoint_round_trips_state_and_journal_seq(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    state = {"t": 7, "xs": [[0.5, 1.0]], "name": "cart", "ok": True, "none": None, 3: "int key"}
    store.write(state, journal_seq=12)
    loaded = store.load()
    assert (loaded.state, loaded.journal_seq, loaded.source, loaded.problems) == (state, 12, "current", [])


@pytest.mark.parametrize("value", [0.1 + 0.2, 1e-310, -0.0, 5e-324, 1.7976931348623157e308])
def test_checkpoint_floats_round_trip_bit_exactly(tmp_path: Path, value: float) -> None:
    store = CheckpointStore(tmp_path)
    store.write({"y": [value]}, journal_seq=0)
    assert bits(store.load().state["y"][0]) == bits(value)  # type: ignore[index]


def test_checkpoint_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.write({"a": 1}, 1)
    store.write({"a": 2}, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "checkpoint.prev"]


def test_checkpoint_write_keeps_the_former_one_as_previous_generation(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.write({"a": 1}, 1)
    store.write({"a": 2}, 2)
    assert CheckpointStore._read(store.previous) == ({"a": 1}, 1)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: flip_byte(p, -1), "checksum"),
        (lambda p: flip_byte(p, 0), "magic"),
        (lambda p: p.write_bytes(p.read_bytes()[:-5]), "truncated"),
        (lambda p: p.write_bytes(p.read_bytes()[:20]), "truncated"),
        (lambda p: p.write_bytes(b""), "truncated"),
    ],
    ids=["bit-flip", "bad-magic", "short-payload", "short-header", "empty"],
)
def test_unreadable_current_checkpoint_falls_back_to_previous(
    tmp_path: Path, damage: Any, reason: str
) -> None:
    store = CheckpointStore(tmp_path)
    store.write({"a": 1}, 1)
    store.write({"a": 2}, 2)
    original = store.current.read_bytes()
    damage(store.current)
    damaged = store.current.read_bytes()
    loaded = store.load()
    assert (loaded.state, loaded.journal_seq, loaded.source) == ({"a": 1}, 1, "previous")
    assert len(loaded.problems) == 1 and reason in loaded.problems[0]
    # The damaged file was renamed aside, not deleted.
    aside = list(tmp_path.glob("checkpoint.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == damaged != original


def test_both_generations_unreadable_gives_source_none_with_problems(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.write({"a": 1}, 1)
    store.write({"a": 2}, 2)
    flip_byte(store.current, -1)
    flip_byte(store.previous, -1)
    loaded = store.load()
    assert (loaded.state, loaded.source) == (None, "none")
    assert len(loaded.problems) == 2
    assert len(list(tmp_path.glob("checkpoint*.corrupt-*"))) == 2


def test_fresh_directory_loads_as_none_without_problems(tmp_path: Path) -> None:
    loaded = CheckpointStore(tmp_path / "never-written").load()
    assert (loaded.state, loaded.journal_seq, loaded.source, loaded.problems) == (None, 0, "none", [])


def test_crash_between_rotation_and_install_falls_back_and_says_so(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.write({"a": 1}, 1)
    store.write({"a": 2}, 2)
    store.current.unlink()  # what a crash between the two renames leaves behind
    (tmp_path / "checkpoint.new").write_bytes(b"half a checkpoint")
    loaded = store.load()
    assert loaded.source == "previous" and loaded.state == {"a": 1}
    assert any("missing" in p for p in loaded.problems)
    assert any("unfinished" in p for p in loaded.problems)


def test_failed_checkpoint_write_raises_storage_error_and_keeps_both_generations(
    tmp_path: Path,
) -> None:
    store = CheckpointStore(tmp_path)
    store.write({"a": 1}, 1)
    store.write({"a": 2}, 2)
    store.writer = FullDisk(allow=10)
    with pytest.raises(StorageError) as info:
        store.write({"a": 3}, 3)
    assert info.value.errno == errno.ENOSPC
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "checkpoint.prev"]
    assert store.load().state == {"a": 2}


@pytest.mark.parametrize("state", [{"a": (1, 2)}, {"a": {1, 2}}, {"a": object()}])
def test_checkpoint_refuses_state_that_would_not_round_trip(tmp_path: Path, state: Any) -> None:
    with pytest.raises(TypeError, match="plain"):
        CheckpointStore(tmp_path).write(state, 0)


# --- journal ----------------------------------------------------------------------------------


def test_journal_assigns_increasing_seq_and_reads_records_back(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "journal")
    assert [journal.append({"y": float(i)}) for i in range(3)] == [1, 2, 3]
    read = journal.read()
    assert read.records == [{"seq": 1, "y": 0.0}, {"seq": 2, "y": 1.0}, {"seq": 3, "y": 2.0}]
    assert (read.last_seq, read.problems, read.truncated_bytes) == (3, [], 0)
    assert [r["seq"] for r in journal.read(after_seq=2).records] == [3]


def test_journal_floats_round_trip_bit_exactly(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "journal") as journal:
        journal.append({"y": 0.1 + 0.2, "z": 1e-310})
    record = Journal.open(tmp_path / "journal").read().records[0]
    assert bits(record["y"]) == bits(0.1 + 0.2) and bits(record["z"]) == bits(1e-310)


def test_reopened_journal_resumes_the_seq_counter(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "journal") as journal:
        journal.append({"a": 1})
        journal.append({"a": 2})
    with Journal.open(tmp_path / "journal") as journal:
        assert journal.last_seq == 2 and journal.append({"a": 3}) == 3


def test_journal_refuses_records_that_carry_their_own_seq(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="seq"):
        Journal.open(tmp_path / "journal").append({"seq": 9})


@pytest.mark.parametrize(
    "keep", [lambda n: n - 1, lambda n: n - 5, lambda n: 8, lambda n: 3],
    ids=["payload-short-1", "payload-short-5", "header-only", "header-part"],
)
def test_torn_last_record_is_dropped_reported_and_truncated(tmp_path: Path, keep: Any) -> None:
    path = tmp_path / "journal"
    with Journal.open(path) as journal:
        journal.append({"a": 1})
        size_after_one = path.stat().st_size
        journal.append({"a": 2, "pad": "x" * 4})
    second_record = path.stat().st_size - size_after_one
    os.truncate(path, size_after_one + keep(second_record))
    journal = Journal.open(path)
    read = journal.read()
    assert [r["a"] for r in read.records] == [1] and read.last_seq == 1
    assert len(read.problems) == 1 and "torn" in read.problems[0]
    assert read.truncated_bytes == keep(second_record)
    assert path.stat().st_size == size_after_one
    # The torn record was never acknowledged, so its seq is handed out again.
    assert journal.append({"a": 3}) == 2


def test_bad_crc_on_the_last_record_is_treated_as_torn(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    with Journal.open(path) as journal:
        journal.append({"a": 1})
        journal.append({"a": 2})
    flip_byte(path, -1)
    read = Journal.open(path).read()
    assert [r["a"] for r in read.records] == [1] and "torn" in read.problems[0]
    assert not list(tmp_path.glob("journal.corrupt-tail-*"))


def test_corrupt_middle_record_stops_reading_and_saves_the_tail_aside(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    with Journal.open(path) as journal:
        journal.append({"a": 1})
        good_end = path.stat().st_size
        for i in (2, 3, 4):
            journal.append({"a": i})
    tail = path.read_bytes()[good_end:]
    flip_byte(path, good_end + 10)  # inside record 2's payload; records 3 and 4 follow
    damaged_tail = path.read_bytes()[good_end:]
    read = Journal.open(path).read()
    assert [r["a"] for r in read.records] == [1] and read.last_seq == 1
    assert len(read.problems) == 1 and "corrupt" in read.problems[0]
    assert read.truncated_bytes == len(tail)
    assert path.stat().st_size == good_end
    aside = list(tmp_path.glob("journal.corrupt-tail-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == damaged_tail


def test_journal_with_a_bad_header_is_moved_aside_and_restarted(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    with Journal.open(path) as journal:
        journal.append({"a": 1})
    flip_byte(path, 0)
    journal = Journal.open(path)
    read = journal.read()
    assert read.records == [] and "unusable" in read.problems[0]
    assert len(list(tmp_path.glob("journal.corrupt-*"))) == 1


def test_seq_keeps_counting_up_across_reset(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    with Journal.open(path) as journal:
        journal.append({"a": 1})
        journal.append({"a": 2})
        journal.reset()
        assert journal.read().records == [] and journal.last_seq == 2
        assert journal.append({"a": 3}) == 3
    with Journal.open(path) as journal:  # the counter survives a restart after reset, too
        assert journal.last_seq == 3 and journal.append({"a": 4}) == 4


def test_empty_journal_after_reset_resumes_from_its_reset_point(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "journal") as journal:
        journal.append({"a": 1})
        journal.reset(start_seq=10)
    assert Journal.open(tmp_path / "journal").append({"a": 2}) == 10


def test_reset_refuses_to_move_seq_backwards(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "journal")
    journal.append({"a": 1})
    with pytest.raises(ValueError, match="exceed"):
        journal.reset(start_seq=1)


def test_full_disk_on_append_raises_storage_error_and_keeps_acknowledged_records(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal"
    journal = Journal.open(path)
    for i in range(3):
        journal.append({"a": i})
    size = path.stat().st_size
    journal.writer = FullDisk(allow=5)  # a partial write, then ENOSPC
    with pytest.raises(StorageError) as info:
        journal.append({"a": 99, "pad": "x" * 100})
    assert info.value.errno == errno.ENOSPC and "free space" in str(info.value)
    assert path.stat().st_size == size  # the partial write was cut off again
    journal.close()
    read = Journal.open(path).read()
    assert [r["a"] for r in read.records] == [0, 1, 2] and read.problems == []


def test_append_after_a_full_disk_clears_continues_the_sequence(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "journal")
    journal.append({"a": 1})
    journal.writer = FullDisk(code=errno.EROFS)
    with pytest.raises(StorageError) as info:
        journal.append({"a": 2})
    assert info.value.errno == errno.EROFS
    journal.writer = os.pwrite
    assert journal.append({"a": 2}) == 2
    assert [r["a"] for r in journal.read().records] == [1, 2]


def test_full_disk_during_reset_keeps_the_journal_usable(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "journal")
    journal.append({"a": 1})
    journal.writer = FullDisk()
    with pytest.raises(StorageError):
        journal.reset()
    journal.writer = os.pwrite
    assert journal.append({"a": 2}) == 2
    assert [r["a"] for r in journal.read().records] == [1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal"]


# --- plant store and recovery -----------------------------------------------------------------


def replay(recovery: Any) -> list[int]:
    """A toy strategy state: the list of told values, rebuilt from checkpoint plus journal."""
    told = list(recovery.state["told"]) if recovery.state else []
    return told + [r["y"] for r in recovery.records_after_checkpoint]


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", ".hidden", "x" * 65, "a b"])
def test_plant_names_that_could_escape_the_state_dir_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="plant name"):
        PlantStore(tmp_path, name)


def test_plant_store_keeps_its_files_under_plants_slash_name(tmp_path: Path) -> None:
    store = PlantStore(tmp_path, "cart-1.v2")
    store.journal.append({"y": 1})
    store.compact({"told": [1]})
    assert store.directory == tmp_path / "plants" / "cart-1.v2"
    assert store.events_path == store.directory / "events.jsonl"
    assert {p.name for p in store.directory.iterdir()} == {"checkpoint", "journal", "journal.prev"}


def test_recover_replays_only_records_after_the_checkpoint(tmp_path: Path) -> None:
    store = PlantStore(tmp_path, "cart")
    told: list[int] = []
    for y in range(5):
        store.journal.append({"y": y})
        told.append(y)
        if y == 2:
            store.compact({"told": list(told)})
    store.close()
    recovery = PlantStore(tmp_path, "cart").recover()
    assert recovery.source == "current" and recovery.problems == []
    assert [r["seq"] for r in recovery.records_after_checkpoint] == [4, 5]
    assert replay(recovery) == told


def test_crash_between_checkpoint_and_journal_reset_applies_no_record_twice(tmp_path: Path) -> None:
    store = PlantStore(tmp_path, "cart")
    for y in (10, 11, 12):
        store.journal.append({"y": y})
    # Compaction's first half only: the checkpoint covers seq 3, the journal still holds 1..3.
    store.checkpoints.write({"told": [10, 11, 12]}, store.journal.last_seq)
    store.close()
    store = PlantStore(tmp_path, "cart")
    recovery = store.recover()
    assert recovery.records_after_checkpoint == [] and recovery.problems == []
    store.journal.append({"y": 13})  # the restarted daemon goes on in the un-reset journal
    store.close()
    assert replay(PlantStore(tmp_path, "cart").recover()) == [10, 11, 12, 13]


def test_recover_from_previous_checkpoint_uses_the_previous_journal(tmp_path: Path) -> None:
    store = PlantStore(tmp_path, "cart")
    for y in range(6):
        store.journal.append({"y": y})
        if y in (1, 3):
            store.compact({"told": list(range(y + 1))})
    store.close()
    flip_byte(store.checkpoints.current, -1)
    recovery = PlantStore(tmp_path, "cart").recover()
    assert recovery.source == "previous" and recovery.journal_seq == 2
    assert [r["seq"] for r in recovery.records_after_checkpoint] == [3, 4, 5, 6]
    assert replay(recovery) == list(range(6))
    assert len(recovery.problems) == 1  # only the corrupt checkpoint; no gap in the records


def test_recover_reports_missing_records_as_a_gap(tmp_path: Path) -> None:
    store = PlantStore(tmp_path, "cart")
    for y in range(6):
        store.journal.append({"y": y})
        if y in (1, 3):
            store.compact({"told": list(range(y + 1))})
    store.close()
    flip_byte(store.checkpoints.current, -1)
    store.journal.prev_path.unlink()
    recovery = PlantStore(tmp_path, "cart").recover()
    assert any("3..4 are missing" in p for p in recovery.problems)


def test_journal_behind_the_checkpoint_is_reset_to_continue_after_it(tmp_path: Path) -> None:
    store = PlantStore(tmp_path, "cart")
    for y in range(3):
        store.journal.append({"y": y})
    store.compact({"told": [0, 1, 2]})
    store.close()
    # Header destroyed and no journal.prev to continue from: the journal restarts at seq 0.
    flip_byte(store.journal.path, 0)
    store.journal.prev_path.unlink()
    store = PlantStore(tmp_path, "cart")
    recovery = store.recover()
    assert replay(recovery) == [0, 1, 2]
    assert any("reset to continue at 4" in p for p in recovery.problems)
    assert store.journal.append({"y": 3}) == 4


def test_both_checkpoints_lost_is_reported_not_silently_fresh(tmp_path: Path) -> None:
    store = PlantStore(tmp_path, "cart")
    for y in range(4):
        store.journal.append({"y": y})
        store.compact({"told": list(range(y + 1))})
    store.close()
    flip_byte(store.checkpoints.current, -1)
    flip_byte(store.checkpoints.previous, -1)
    recovery = PlantStore(tmp_path, "cart").recover()
    assert recovery.source == "none" and recovery.state is None
    assert len(recovery.problems) >= 2
