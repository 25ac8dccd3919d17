"""`tvbod bench latency`'s value check: the UCB a proposal reaches against a dense reference
maximum at the same step (2^15 Sobol points + L-BFGS-B from the best 50 and from the proposals;
the best value seen, so value/reference <= 1)."""

from __future__ import annotations


def ucb_value(gp, Z, t: float, beta: float):
    """UCB `mu + sqrt(beta) sigma` at `Z` `(m, d)` from the float64 posterior."""
    from tvbod.core.acquisition import ucb

    return ucb(*gp.predict(Z, float(t)), beta)


def _beta(s, t: int) -> float:
    from tvbod.core.acquisition import beta_t

    return beta_t(t, s.spec.beta_c1, s.spec.beta_c2)


def dense_reference(gp, t: int, beta: float, extra, candidates: int, starts: int, seed: int) -> dict:
    """Dense UCB maximization: `candidates` Sobol points and the data scored in float64, L-BFGS-B
    (ftol 1e-15, gtol 1e-10) from the best `starts` and from each row of `extra`; the best value."""
    import numpy as np
    from scipy.optimize import minimize

    from tvbod.core.acquisition import ucb_grad
    from tvbod.core.gp import predict_with_grad
    from tvbod.core.optimize import sobol_unit

    d = gp.X_.shape[1]
    cands = np.vstack([sobol_unit(d, candidates, seed), gp.X_])
    chunks = np.array_split(cands, -(-len(cands) // 4096))  # bounded (4096, n) kernel blocks
    score = np.concatenate([ucb_value(gp, c, t, beta) for c in chunks])

    def neg(z):
        value, grad = ucb_grad(*predict_with_grad(gp, z[None, :], float(t)), beta)
        return -float(value[0]), -grad[0]

    def polish(z0) -> float:
        res = minimize(neg, z0, jac=True, method="L-BFGS-B", bounds=[(0.0, 1.0)] * d,
                       options={"maxiter": 1000, "ftol": 1e-15, "gtol": 1e-10})
        return float(ucb_value(gp, np.clip(res.x, 0.0, 1.0)[None, :], t, beta)[0])

    dense = max(float(score.max()), *(polish(z) for z in cands[np.argsort(-score)[:starts]]))
    extra = np.atleast_2d(np.asarray(extra, dtype=float))
    best = max(dense, *(polish(z) for z in extra), *ucb_value(gp, extra, t, beta).tolist())
    return {"reference": best, "dense_only": dense}


def _value_ratios(base, steps, proposal_sets, st) -> list[list[float]]:
    """value/reference of each proposal set at `st['ref_calls']` evenly spaced calls."""
    import numpy as np

    if st["ref_calls"] == 0:
        return [[] for _ in proposal_sets]
    idx = np.unique(np.linspace(0, len(steps) - 1, st["ref_calls"]).round().astype(int))
    out = [[] for _ in proposal_sets]
    for i in idx:
        t, beta = steps[i], _beta(base, steps[i])
        props = np.array([p[i] for p in proposal_sets], dtype=float)
        ref = dense_reference(base.gp, t, beta, props, st["ref_candidates"], st["ref_starts"],
                              seed=st["seed"] + 1000 + int(i))["reference"]
        for j, v in enumerate(ucb_value(base.gp, props, t, beta)):
            out[j].append(float(v / ref))
    return out


def _ratio_summary(ratios: list[float]) -> dict:
    import numpy as np

    if not ratios:
        return {"median": None, "worst": None, "count": 0}
    return {"median": float(np.median(ratios)), "worst": float(min(ratios)), "count": len(ratios)}
