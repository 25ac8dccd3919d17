"""A plant's event history on disk: the active `events.jsonl` plus rotated, numbered segments.

Layout in `<state_dir>/plants/<plant>/`::

    events.000001.jsonl   rotated segments, oldest first (numbers are never reused)
    events.000002.jsonl
    events.000001.end     hard link to the checkpoint written when segment 1 was closed: the
                          plant's exact state where segment 2 begins
    events.jsonl          the active segment, appended to

Rotation happens only right after a checkpoint (`Checkpointer.write`, tvbod/service/checkpoints.py), when the active
file has reached `events_segment_bytes`; so the event lines of every journal record after the
newest checkpoint are always in the active file. Retention (`events_keep_segments`, 0 = keep all)
deletes the oldest segments, and with segment `m` the `events.<m-1>.end` checkpoint it no longer
needs; `events.<m>.end` stays as the starting state of the oldest kept segment, so `tvbod replay`
verifies the kept history from there exactly.

Readers (`tvbod replay`, `tvbod inspect`, exports) go through `history_files` / `read_history`.
A step's `measurement` line may appear more than once (a restart re-emits journaled tells with
`replayed: true`); readers keep the first line of each proposal id. Within the kept history the
steps are consecutive: from the plant's first step (or the step `events.<m-1>.end` holds) to the
last step the newest checkpoint holds, and beyond; `continuity_problem` names a step missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any

from tvbod.service import fsio

ACTIVE = "events.jsonl"
_SEGMENT = re.compile(r"^events\.(\d{6,})\.jsonl$")


def segment_path(plant_dir: Path, number: int) -> Path:
    return Path(plant_dir) / f"events.{number:06d}.jsonl"


def end_checkpoint_path(plant_dir: Path, number: int) -> Path:
    return Path(plant_dir) / f"events.{number:06d}.end"


def rotated_segments(plant_dir: Path) -> list[tuple[int, Path]]:
    """`(number, path)` of the rotated segments, oldest first."""
    out = []
    for p in Path(plant_dir).glob("events.*.jsonl"):
        m = _SEGMENT.match(p.name)
        if m:
            out.append((int(m.group(1)), p))
    return sorted(out)


def history_files(plant_dir: Path) -> list[Path]:
    """Every event file of the plant in the order it was written (rotated ones, then the active)."""
    files = [p for _, p in rotated_segments(plant_dir)]
    active = Path(plant_dir) / ACTIVE
    return files + [active] if active.exists() else files


def has_history(plant_dir: Path) -> bool:
    return bool(history_files(plant_dir))


def read_history(plant_dir: Path) -> list[dict[str, Any]]:
    """All events of the plant still on disk, oldest first (see `read_events`)."""
    events: list[dict[str, Any]] = []
    for path in history_files(plant_dir):
        events += read_events(path)
    return events


def base_state(plant_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """`(checkpointed state, problem)` where the kept history begins: `(None, None)` when it
    begins at the plant's first step; a problem sentence when older segments are gone and their
    end checkpoint is missing or unreadable."""
    from tvbod.service.store import CheckpointStore, UnsupportedSchema, _Unusable

    segments = rotated_segments(plant_dir)
    if not segments or segments[0][0] == 1:
        return None, None
    path = end_checkpoint_path(plant_dir, segments[0][0] - 1)
    if not path.exists():
        return None, f"segments before {segments[0][1].name} were removed and {path.name} is missing"
    try:
        state, _ = CheckpointStore._read(path)
    except (_Unusable, UnsupportedSchema) as exc:
        return None, f"{path.name} is unusable ({exc})"
    return state, None


def checkpointed_step(plant_dir: Path) -> int | None:
    """The last step the plant's newest readable checkpoint holds (its strategy's `t` - 1), or
    None without one. Read only: nothing is moved aside (unlike `PlantStore.recover`)."""
    from tvbod.service.store import CheckpointStore, UnsupportedSchema, _Unusable

    for name in ("checkpoint", "checkpoint.prev"):
        try:
            state, _ = CheckpointStore._read(Path(plant_dir) / name)
            return int(state["strategy"]["t"]) - 1
        except (OSError, _Unusable, UnsupportedSchema, KeyError, TypeError, ValueError):
            continue
    return None


def _steps(first: int, last: int) -> str:
    return f"step {first} is" if first == last else f"steps {first}-{last} are"


def continuity_problem(steps: list[tuple[int, str]], first: int, checkpointed: int | None,
                       files: list[Path]) -> str | None:
    """What breaks the continuity of a history, or None: `steps` are the `(t, proposal id)` of
    its measurements in step order (one per proposal id), `first` the step it must begin with,
    `checkpointed` the last step the newest checkpoint holds (the lines of every step up to it
    must be on disk: the journal that could re-emit them is gone)."""
    where = ", ".join(p.name for p in files) or "the event files"
    expected, previous = first, None
    for t, pid in steps:
        if previous is not None and t == previous[0]:
            return (f"step {t} is recorded twice (proposal ids {previous[1]} and {pid}) in "
                    f"{where}")
        if t > expected:
            head = (f"history jumps from step {expected - 1} to {t}" if previous is not None
                    else f"history starts at step {t}, not {first}")
            return f"{head}: {_steps(expected, t - 1)} missing from {where}"
        expected, previous = t + 1, (t, pid)
    if checkpointed is not None and checkpointed >= expected:
        return (f"history ends at step {expected - 1} but the checkpoint holds steps up to "
                f"{checkpointed}: {_steps(expected, checkpointed)} missing from {where}")
    return None


def rotate(plant_dir: Path, checkpoint: Path, keep: int) -> list[str]:
    """Close the active file as the next numbered segment and keep `checkpoint` (hard-linked, or
    copied where links are impossible) as the state the new active file starts from. Then delete
    the oldest segments beyond `keep` (0: keep all). Returns the names of the deleted files."""
    plant_dir = Path(plant_dir)
    active = plant_dir / ACTIVE
    if not active.exists():
        return []
    segments = rotated_segments(plant_dir)
    number = segments[-1][0] + 1 if segments else 1
    end = end_checkpoint_path(plant_dir, number)
    fsio.unlink(end, missing_ok=True)  # a leftover of a rotation cut short by a crash
    try:
        fsio.link(checkpoint, end)
    except OSError:
        import shutil

        shutil.copyfile(checkpoint, end)
    fsio.replace(active, segment_path(plant_dir, number))
    removed = []
    segments.append((number, segment_path(plant_dir, number)))
    while keep and len(segments) > keep:
        oldest, path = segments.pop(0)
        for victim in (path, end_checkpoint_path(plant_dir, oldest - 1)):
            with contextlib.suppress(FileNotFoundError):
                fsio.unlink(victim)
                removed.append(victim.name)
    fsio.fsync_dir(plant_dir)
    return removed


def logged_measurements(path: Path, since_t: int, block: int = 65536) -> set[str]:
    """Proposal ids of the `measurement` lines at steps >= `since_t` at the end of `path`.

    Reads the file backwards, block by block, until it meets a measurement of an earlier step
    (or the file's start), so the cost is that of the lines written since then, not of the file.
    """
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return set()
    found: set[str] = set()
    with f:
        end = f.seek(0, os.SEEK_END)
        tail = b""
        while end > 0:
            start = max(0, end - block)
            f.seek(start)
            data = f.read(end - start) + tail
            lines = data.split(b"\n")
            tail = lines.pop(0) if start > 0 else b""  # maybe a partial line: keep for later
            if _collect(lines, since_t, found):
                return found
            end = start
    return found


def _collect(lines: list[bytes], since_t: int, found: set[str]) -> bool:
    """Add the measurement ids of `lines` (newest last) at steps >= since_t; True once an earlier
    step's measurement shows up."""
    done = False
    for raw in lines:
        if b'"measurement"' not in raw:
            continue
        try:
            e = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(e, dict) or e.get("event") != "measurement":
            continue
        if isinstance(e.get("t"), int) and e["t"] < since_t:
            done = True
        elif isinstance(e.get("proposal_id"), str):
            found.add(e["proposal_id"])
    return done


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events in a JSON-lines file, oldest first.

    Lines that are not a JSON object are skipped: they can only be lines torn by a crash (the
    last line, or a line the writer closed off with a newline before appending after it).
    """
    events: list[dict[str, Any]] = []
    with open(path, "rb") as f:
        for raw in f:
            try:
                item = json.loads(raw)
            except ValueError:
                continue
            if isinstance(item, dict):
                events.append(item)
    return events


def load_epochs(plant_dir: Path) -> list[tuple[int, dict, bool]]:
    """`(t, optimizer mapping, issued)` in force from step t on, in the order the daemon recorded
    them (every start's `plant_restored` and every `config_reloaded`); `issued` says whether
    step t's proposal had been issued under the previous settings."""
    from tvbod.core.behaviours import read_stored
    from tvbod.service.store import read_optimizer

    epochs = []
    for e in read_history(plant_dir):
        if e.get("event") in ("plant_restored", "config_reloaded") and "fingerprint" in e:
            mapping = read_optimizer(plant_dir, e["fingerprint"])
            if mapping is not None:
                epochs.append((e["t"], read_stored(mapping), bool(e.get("pending"))))
    return epochs
