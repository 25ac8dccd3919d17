"""The plant's transition returns what it did (tvbod/service/transition.py): each
journal record kind has its applier, a request's reply is built from the returned `Applied` with
the request's own id, and a replay of the journal rebuilds the same replies."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from daemon_harness import objective, plant_yaml
from tvbod.protocol import Ask, AskReply, ErrorCode, Observe, ObserveReply, ProtocolError, Tell
from tvbod.protocol import TellReply
from tvbod.service.config import load_plant_config
from tvbod.service.events import PlantEventLog
from tvbod.service.plant import PlantRuntime
from tvbod.service.store import PlantStore
from tvbod.service.transition import Applied, apply


def _runtime(tmp_path: Path) -> PlantRuntime:
    (tmp_path / "alpha.yaml").write_text(plant_yaml("alpha"))
    store = PlantStore(tmp_path / "state", "alpha")
    log = structlog.wrap_logger(structlog.ReturnLogger(), processors=[])
    runtime = PlantRuntime(load_plant_config(tmp_path / "alpha.yaml"), store,
                           PlantEventLog(store.events_path, "alpha", log))
    runtime.restore()
    return runtime


def test_each_request_gets_a_typed_reply_with_its_own_id_from_what_the_transition_did(tmp_path):
    rt = _runtime(tmp_path)
    try:
        ask = rt.ask(Ask(request_id=7, plant="alpha"))
        assert isinstance(ask, AskReply) and ask.request_id == 7 and ask.t == 1
        y = objective(ask.gains, ask.t)
        tell = rt.tell(Tell(request_id=8, plant="alpha", proposal_id=ask.proposal_id,
                            measurement=y))
        assert isinstance(tell, TellReply) and tell.request_id == 8 and not tell.duplicate
        assert (tell.t, tell.measurement, tell.dataset_size) == (1, y, 1)
        again = rt.tell(Tell(request_id=8, plant="alpha", proposal_id=ask.proposal_id,
                             measurement=y))
        assert again.duplicate and again.body() | {"duplicate": False} == tell.body()
        obs = rt.observe(Observe(request_id="o", plant="alpha", gains={"kp": 1.0, "ki": 0.0},
                                 measurement=0.5))
        assert isinstance(obs, ObserveReply) and obs.t == 2 and obs.request_id == "o"
        assert not any(hasattr(rt, a) for a in ("_last_result", "_last_record",
                                                "_size_before_reset"))
    finally:
        rt.close()


def test_apply_returns_result_reply_and_dataset_size_before_for_a_tell(tmp_path):
    rt = _runtime(tmp_path)
    try:
        ask = rt.ask(Ask(request_id="a", plant="alpha"))
        record = {"kind": "tell", "id": ask.proposal_id, "t": ask.t, "x": rt.proposal["x"],
                  "y": 1.0, "failed": False, "measurement": 1.0, "metadata": {}, "rid": "r",
                  "digest": "d"}
        applied = apply(rt.state, record)
        assert isinstance(applied, Applied) and applied.record is record
        assert applied.size_before == 0 and applied.result.dataset_size == 1
        assert applied.reply == rt.state.cache["r"][1] and applied.reply["t"] == 1
        assert applied.problem is None and rt.proposal is None
        unknown = apply(rt.state, {"kind": "mystery", "id": "x", "t": 2})
        assert unknown.problem == "unknown journal record kind 'mystery' skipped"
        assert unknown.reply is None and unknown.result is None
    finally:
        rt.close()


def test_a_restart_rebuilds_the_same_replies_from_the_journal(tmp_path):
    rt = _runtime(tmp_path)
    ask = rt.ask(Ask(request_id="a1", plant="alpha"))
    tell = rt.tell(Tell(request_id="t1", plant="alpha", proposal_id=ask.proposal_id,
                        measurement=objective(ask.gains, ask.t)))
    rt.store.journal.sync()
    rt.close()
    again = _runtime(tmp_path)  # no checkpoint was written: the journal is replayed
    try:
        assert again.ask(Ask(request_id="a1", plant="alpha")) == ask
        resent = again.tell(Tell(request_id="t1", plant="alpha", proposal_id=ask.proposal_id,
                                 measurement=objective(ask.gains, ask.t)))
        assert resent == TellReply.from_body("t1", tell.body(), duplicate=True)
        with pytest.raises(ProtocolError) as e:
            again.tell(Tell(request_id="t2", plant="alpha", proposal_id=ask.proposal_id,
                            measurement=0.0))
        assert e.value.code == ErrorCode.DUPLICATE_TELL
    finally:
        again.close()


def test_an_uninformed_hold_is_named_in_the_measurement_event_fields():
    from tvbod.core.strategies.base import TellResult
    from tvbod.service.tell_events import _window_fields

    base = dict(t=30, t_prime=30, reset=False, reset_reason=None, psi=9.0, threshold=4.0, mu=0.0,
                sigma=0.9, dataset_size=30, test="point", window=2, window_psi=9.1,
                window_threshold=5.0, held=True)
    assert _window_fields(TellResult(**base, uninformed=True))["uninformed"] is True
    refractory = _window_fields(TellResult(**base))
    assert refractory["held"] is True and "uninformed" not in refractory
