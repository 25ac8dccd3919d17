"""The parts of a GP-UCB strategy, built from its validated `OptimizerSpec`."""

from __future__ import annotations

from ..domains import ArmsDomain, BoxDomain, PointsDomain
from ..exploration import AdaptiveKappaLambda, AGPUCBScaling, FixedBeta
from ..kernels import ForgettingFactor, Matern52, MatrixKernel, SquaredExponential, WienerDrift
from ..spec import OptimizerSpec
from ..trigger import EventTrigger, RobustTrigger


def build_domain(spec: OptimizerSpec):
    d = spec.domain
    if d.type == "box":
        return BoxDomain(d.lower, d.upper, d.scaling)
    if d.type == "points":
        return PointsDomain(d.points, d.scaling)
    return ArmsDomain(d.n_arms)


def build_base_kernel(spec: OptimizerSpec, lengthscales=None):
    """The spatial kernel on internal coordinates (None for a matrix kernel)."""
    k = spec.kernel
    if k.type == "matrix":
        return None
    ls = k.lengthscales if lengthscales is None else lengthscales
    return (SquaredExponential if k.type == "se" else Matern52)(ls, k.variance)


def build_kernel(spec: OptimizerSpec, domain, base=None):
    """What the GP uses: the base kernel on a box, its Gram matrix on points, the fixed matrix on arms."""
    if spec.kernel.type == "matrix":
        return MatrixKernel(spec.kernel.matrix)
    base = base if base is not None else build_base_kernel(spec)
    if isinstance(domain, PointsDomain):
        Z = domain.kernel_inputs
        return MatrixKernel(base(Z, Z))
    return base


def build_exploration(spec: OptimizerSpec):
    """The exploration of `spec.exploration`: the fixed `beta_t` schedule unless configured."""
    e, fixed = spec.exploration, FixedBeta(spec.beta_c1, spec.beta_c2)
    if e is None:
        return fixed
    if e.type == "adaptive":
        return AdaptiveKappaLambda(e.kappa0, e.lambda0, e.kappa_min, e.kappa_max, e.lambda_max,
                                   e.kappa_rate, e.lambda_rate, e.ema)
    return AGPUCBScaling(spec.kernel.lengthscales, e.norm_bound, e.exponent, e.rule, e.estimator,
                         e.h_max, e.sigma_floor, base=fixed)


def build_trigger(spec: OptimizerSpec):
    """The robust trigger of `spec.trigger`, or the paper's point test (also for non-ET presets,
    whose `tell` reports psi/threshold without acting on them)."""
    t = spec.trigger
    if t is not None and t.robust:
        since = t.uninformed_from if t.uninformed_from is not None else spec.min_points
        return RobustTrigger(spec.delta_b, spec.noise_variance, t.window, t.refractory,
                             t.burst_resets, t.burst_steps, t.uninformed, since, t.backoff)
    return EventTrigger(spec.delta_b, spec.noise_variance)


def build_temporal(spec: OptimizerSpec):
    if spec.temporal == "forgetting":
        return ForgettingFactor(spec.forgetting_eps)
    if spec.temporal == "drift":
        return WienerDrift(spec.drift_variance)
    return None
