"""The recommendation's posterior mean at the data (tvbod/core/recommend.py) against a direct
prediction, for a box, arms and a temporal kernel, after appends and a full refactorization."""

import numpy as np
import pytest

from tvbod.core import make_strategy
from tvbod.core.recommend import recommend

BOX = {"strategy": "et-gp-ucb", "domain": {"type": "box", "lower": [0, 0], "upper": [1, 1]},
       "kernel": {"type": "se", "lengthscales": 0.3}, "noise_variance": 0.01, "seed": 3}
ARMS = {"strategy": "et-gp-ucb", "domain": {"type": "arms", "n_arms": 6},
        "kernel": {"type": "matrix", "matrix": (0.5 * np.eye(6) + 0.5).tolist()},
        "noise_variance": 0.05, "seed": 3}


def _told(spec, steps):
    s = make_strategy(spec)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        x = s.ask()
        s.tell(x, float(np.sin(3 * np.sum(x)) + 0.1 * rng.standard_normal()))
    s.settle()
    return s


@pytest.mark.parametrize("spec", [BOX, ARMS, {**BOX, "strategy": "tv-gp-ucb", "forgetting": 0.05},
                                  {**BOX, "noise_variance": 1e-8}],
                         ids=["box", "arms", "temporal", "tiny-noise"])
def test_data_mean_equals_a_direct_prediction(spec):
    s = _told(spec, 25)
    direct = s.gp.predict(s.gp.X_, float(s.t))[0]
    assert np.allclose(s.gp.data_mean(float(s.t)), direct, rtol=1e-8, atol=1e-8)
    s.gp.refactor()  # a full factorization (with whatever jitter it needed) agrees too
    assert np.allclose(s.gp.data_mean(float(s.t)), direct, rtol=1e-8, atol=1e-8)


def test_recommend_is_the_argmax_of_the_direct_prediction_with_its_std():
    s = _told(BOX, 30)
    mean, var = s.gp.predict(s.gp.X_, float(s.t))
    i = int(np.argmax(mean))
    rec = recommend(s)
    assert np.array_equal(rec.x, s.domain.to_physical(s.gp.X_[i]))
    assert rec.mean == pytest.approx(s.output.to_measurement(float(mean[i])), abs=1e-9)
    assert rec.std == pytest.approx(float(np.sqrt(var[i])) * s.output.scale_, abs=1e-9)
