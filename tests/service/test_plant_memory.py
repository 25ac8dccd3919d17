"""What a plant keeps between requests, kept small without changing a reply or a checkpoint byte
(the daemon-memory goal, docs/benchmarks.md, *Memory*): `told_replies` holds packed tuples, a restore
reads the checkpoint's repeated strings back as one object each, and plant files with the same
optimizer mapping share one parsed mapping and spec."""

from __future__ import annotations

from pathlib import Path

import msgpack
import numpy as np
import structlog

from daemon_harness import arms_plant_yaml, objective, plant_yaml
from tvbod.core import make_strategy, parse_spec
from tvbod.protocol import Ask, Tell
from tvbod.service.config import load_plant_config
from tvbod.service.events import PlantEventLog
from tvbod.service.checkpoints import checkpoint_dict
from tvbod.service.plant import PlantRuntime
from tvbod.service.store import PlantStore
from tvbod.service.transition import TELL_REPLY_FIELDS, bounded_add, pack_told, unpack_told


def _runtime(tmp_path: Path, request_cache: int = 2) -> PlantRuntime:
    (tmp_path / "alpha.yaml").write_text(plant_yaml("alpha"))
    store = PlantStore(tmp_path / "state", "alpha")
    log = structlog.wrap_logger(structlog.ReturnLogger(), processors=[])
    runtime = PlantRuntime(load_plant_config(tmp_path / "alpha.yaml"), store,
                           PlantEventLog(store.events_path, "alpha", log),
                           request_cache=request_cache)
    runtime.restore()
    return runtime


def _steps(rt: PlantRuntime, n: int) -> list[tuple[Tell, dict]]:
    out = []
    for i in range(n):
        ask = rt.ask(Ask(request_id=f"a{i}", plant="alpha"))
        tell = Tell(request_id=f"t{i}", plant="alpha", proposal_id=ask.proposal_id,
                    measurement=objective(ask.gains, ask.t))
        out.append((tell, rt.tell(tell).body()))
    rt.store.journal.sync()
    return out


def test_a_resend_the_request_cache_forgot_gets_its_reply_back_from_the_packed_table(tmp_path):
    rt = _runtime(tmp_path, request_cache=2)
    try:
        told = _steps(rt, 6)
        assert all(isinstance(v, bytes) and len(v) < 100 for v in rt.state.told_replies.values())
        first, body = told[0]
        assert str(first.request_id) not in rt.state.cache  # only the told_replies table knows it
        again = rt.tell(first).body()
        assert again == {**body, "duplicate": True}
    finally:
        rt.close()


def test_pack_told_round_trips_and_keeps_a_reply_of_another_shape_as_a_dict():
    reply = {"t": 3, "reset": False, "psi": 0.25, "threshold": 1.5, "dataset_size": 3,
             "measurement": 0.5, "failed": False}
    assert tuple(reply) == TELL_REPLY_FIELDS
    entry = pack_told("d1", reply)
    assert msgpack.unpackb(entry) == ["d1", 3, False, 0.25, 1.5, 3, 0.5, False]
    digest, back = unpack_told(entry)
    assert digest == "d1" and back == reply
    assert [type(v) for v in back.values()] == [type(v) for v in reply.values()]
    assert list(back) == list(reply)  # the checkpoint writes the same map order
    tiny = {**reply, "psi": float(np.nextafter(0.25, 1.0)), "measurement": 1e-310}
    assert unpack_told(pack_told("d", tiny))[1] == tiny  # every bit of a float64 survives
    older = {"t": 3, "reset": False, "dataset_size": 3}  # a shape an older version may have stored
    assert unpack_told(pack_told("d2", older)) == ("d2", older)


def test_bounded_tables_keep_insertion_order_move_a_reinserted_key_last_and_drop_the_oldest():
    table: dict = {}
    for key in ("a", "b", "c"):
        bounded_add(table, key, key.upper(), 3)
    bounded_add(table, "a", "A2", 3)  # an existing key becomes the newest
    assert list(table.items()) == [("b", "B"), ("c", "C"), ("a", "A2")]
    bounded_add(table, "d", "D", 3)
    assert list(table) == ["c", "a", "d"]
    for i in range(1000):  # many insertions and evictions stay bounded and ordered
        bounded_add(table, i, i, 3)
    assert list(table) == [997, 998, 999]


def test_a_checkpoint_is_byte_identical_after_a_restore_and_shares_its_strings(tmp_path):
    rt = _runtime(tmp_path)
    _steps(rt, 8)
    state = checkpoint_dict(rt.state)
    rt.checkpoint("test")
    rt.close()
    live_bytes = msgpack.packb(state)
    # the reply of the latest tell, as the cache (a dict) and the checkpoint both hold it
    pid, digest, reply = state["told_replies"][-1]
    assert list(reply) == list(TELL_REPLY_FIELDS) and reply["dataset_size"] == 8
    again = _runtime(tmp_path)
    try:
        assert msgpack.packb(checkpoint_dict(again.state)) == live_bytes
        for key in again.state.told:  # one object per proposal id, as in the live plant
            assert any(key is other for other in again.state.told_replies)
    finally:
        again.close()


MATRIX = [[1.0, 0.5, 0.25], [0.5, 1.0, 0.5], [0.25, 0.5, 1.0]]


def test_plant_files_with_the_same_optimizer_mapping_share_one_mapping_and_spec(tmp_path):
    paths = {}
    for name, noise in (("a", "0.01"), ("b", "0.01"), ("c", "0.02"), ("d", "1")):
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(arms_plant_yaml(name, MATRIX, noise))
    cfg = {name: load_plant_config(p) for name, p in paths.items()}
    assert cfg["a"].optimizer is cfg["b"].optimizer
    assert cfg["a"].optimizer_mapping is cfg["b"].optimizer_mapping
    assert cfg["a"].fingerprint == cfg["b"].fingerprint and cfg["a"].name != cfg["b"].name
    assert cfg["c"].optimizer is not cfg["a"].optimizer
    assert cfg["c"].optimizer.noise_variance == 0.02
    paths["e"] = tmp_path / "e.yaml"  # 1 and 1.0: the same fingerprint, each its own mapping
    paths["e"].write_text(arms_plant_yaml("e", MATRIX, "1.0"))
    e, d = load_plant_config(paths["e"]), cfg["d"]
    assert e.fingerprint == d.fingerprint and e.optimizer_mapping is not d.optimizer_mapping
    assert type(e.optimizer_mapping["noise_variance"]) is float
    assert type(d.optimizer_mapping["noise_variance"]) is int


def test_a_shared_spec_proposes_exactly_what_a_freshly_parsed_one_does(tmp_path):
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(plant_yaml(name))
    a, b = (load_plant_config(tmp_path / f"{n}.yaml") for n in ("a", "b"))
    assert a.optimizer is b.optimizer
    shared, fresh = make_strategy(a.optimizer), make_strategy(parse_spec(dict(a.optimizer_mapping)))
    for t in range(6):
        x, x_fresh = shared.ask(), fresh.ask()
        assert np.array_equal(x, x_fresh)
        y = float(np.sum((x - 0.3) ** 2)) + 0.01 * t
        shared.tell(x, y)
        fresh.tell(x, y)
    assert shared.state_dict() == fresh.state_dict()


def test_the_latency_window_reports_the_percentiles_of_its_last_1000_samples_exactly():
    from tvbod.service.readouts import _LATENCY_WINDOW, LatencyWindow

    w = LatencyWindow()
    assert w.percentiles() == (None, None)
    rng = np.random.default_rng(3)
    samples = rng.exponential(0.002, size=2 * _LATENCY_WINDOW + 137)
    for i, s in enumerate(samples):
        w.add(float(s))
        if i in (0, 9, _LATENCY_WINDOW - 1, _LATENCY_WINDOW, len(samples) - 1):
            last = samples[max(0, i + 1 - _LATENCY_WINDOW): i + 1]  # what a deque(maxlen) kept
            p50, p99 = np.percentile(last, [50, 99])
            assert w.percentiles() == (round(float(p50) * 1e3, 3), round(float(p99) * 1e3, 3))


def test_a_full_latency_window_holds_its_samples_as_8_bytes_each():
    import tracemalloc

    from tvbod.service.readouts import _LATENCY_WINDOW, LatencyWindow

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        w = LatencyWindow()
        for i in range(3 * _LATENCY_WINDOW):
            w.add(1e-3 + i * 1e-9)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 8 * _LATENCY_WINDOW <= held <= 8 * _LATENCY_WINDOW + 1024  # a deque of floats: ~32 KB
