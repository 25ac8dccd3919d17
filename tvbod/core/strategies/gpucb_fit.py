"""Fitting a `GPUCBStrategy`'s model to D: the measurement map's calibration (`measurement:
auto`, with `noise_variance: auto`), MAP hyperparameters (`hyperparameters.*: map`) and a learned
forgetting factor (`forgetting_floor: auto`); functions of the strategy, run by its `tell` and
`settle`."""

from __future__ import annotations

import numpy as np

from ..domains import PointsDomain
from ..grid_fits import fit_forgetting, fit_noise
from ..hyperparameters import GammaPrior, Hyperparameters, fit_hyperparameters
from ..kernels import ForgettingFactor
from .build import build_base_kernel, build_kernel

#: Stream id of the refit's per-step generator `default_rng([seed, t, stream])`.
RNG_HYPER = 2


def set_kernel_hypers(s, lengthscales, variance: float | None = None) -> None:
    """`s`'s base kernel with new lengthscales (and signal variance), and the GP's kernel built
    on it."""
    base = build_base_kernel(s.spec, np.asarray(lengthscales, dtype=float))
    if variance is not None:
        base = type(base)(base.lengthscales, variance)
    s.base_kernel = base
    s.gp.kernel = build_kernel(s.spec, s.domain, s.base_kernel)


def refit_hyperparameters(s, t: int) -> Hyperparameters:
    """MAP lengthscales (and, if configured, sigma_f^2 and sigma_n^2) on the current dataset,
    then a full refactorization if anything changed; returns the fit (`skipped`: the current
    values met `refit_tolerance`)."""
    h = s.spec.hyper
    X = s.gp.X_ if s.gp.n else np.empty((0, s.domain.dim))
    if isinstance(s.domain, PointsDomain) and s.gp.n:
        X = s.domain.kernel_inputs[s.gp.X_[:, 0].astype(int)]
    temporal_K = None
    if s.gp.temporal is not None and s.gp.n:
        temporal_K = s.gp.temporal(s.gp.times_, s.gp.times_)
    start = s.base_kernel
    if s.exploration.map_start() is not None:  # A-GP-UCB: from the MAP, not theta_t
        start = s.base_kernel.with_lengthscales(s.exploration.map_start())
    fit = fit_hyperparameters(
        start, X, s.gp.y_, s.gp.noise_variance,
        GammaPrior(h.prior_shape, h.prior_rate), (h.lower, h.upper),
        np.random.default_rng([s.spec.seed, t, RNG_HYPER]), h.restarts, h.maxiter, temporal_K,
        h.variance_bounds, h.noise_bounds, tolerance=h.refit_tolerance, objective=h.objective,
        stop_at_tolerance=h.refit_stop == "tolerance",
    )
    if s.exploration.keep_map(fit.lengthscales):  # A-GP-UCB scales it in after_tell
        return fit
    if (not np.array_equal(fit.lengthscales, s.base_kernel.lengthscales)
            or fit.variance != s.base_kernel.variance
            or fit.noise_variance != s.gp.noise_variance):
        set_kernel_hypers(s, fit.lengthscales, fit.variance)
        s.gp.noise_variance = fit.noise_variance
        s.gp.refactor()
    return fit


def learn_forgetting(s) -> None:
    """`forgetting_floor: auto`: the forgetting rate `eps` that D (the data since the last
    reset) shows, by marginal likelihood (`fit_forgetting`); a full refactorization if it
    changed."""
    eps = 0.0
    if s.gp.n:
        eps = fit_forgetting(s.gp.kernel(s.gp.X_, s.gp.X_), s.gp.y_,
                             s.gp.times_, s.gp.noise_variance)
    if eps != s.gp.temporal.eps:
        s.gp.temporal = ForgettingFactor(eps)
        s.gp.refactor()


def calibrate_output(s, y: float) -> None:
    """`measurement: auto`: update the offset/scale with `y` and re-express D's targets (and
    forget the window test's residuals, which were in the old units); with `noise_variance:
    auto`, estimate sigma_n^2 from D when this measurement completes the calibration."""
    old, calibrating = (s.output.offset_, s.output.scale_), s.output.calibrating
    if s.output.observe(y):
        s._reexpress(old)
    if calibrating and not s.output.calibrating and s.spec.learns_noise and s.gp.n:
        noise = fit_noise(s.gp.kernel(s.gp.X_, s.gp.X_), s.gp.y_,
                          s.spec.noise_variance)
        if noise != s.gp.noise_variance:
            s.gp.noise_variance = noise
            s.gp.refactor()
            s.trigger.forget_residuals()
