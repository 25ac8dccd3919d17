"""`budget.polish: newton`: the box ask's polish as a projected Newton ascent of all starts at once,
in numpy (`maximize_on_box`), with the exact Hessian of the acquisition under the float64 posterior.

For the stationary kernels (`SquaredExponential`, `Matern52`), `k(x, x_j) = f(r^2)` with
`r^2 = |x - x_j|^2_L`, so with `u_j = (x - x_j) / l^2`:

    dk_j/dx = g_j u_j,   d2k_j/dx2 = g_j diag(1 / l^2) + h_j u_j u_j^T

(`g = 2 f'`: SE `g = -k`, `h = k`; Matern-5/2 `g = -5/3 s^2 (1 + sqrt5 r) e^{-sqrt5 r}`,
`h = 25/3 s^2 e^{-sqrt5 r}`). With `J = dk/dx` `(n, d)`, `V = L^{-1} k`, `B = L^{-1} J` and
`w = K^{-1} k`: `mu = V^T L^{-1} y`, `var = k** - |V|^2`, `d mu = J^T alpha`, `d var = -2 B^T V`,
`H mu = sum_j alpha_j d2k_j`, `H var = -2 (B^T B + sum_j w_j d2k_j)` (RW2006 eq. 2.25-2.26 twice
differentiated). The acquisition is a function `a(mu, sigma)` (`acq.partials`); the chain rule
gives its gradient and Hessian in x.

A round takes one step `x + t p` per start, projected on the box (`_direction`): `p` maximizes the
model `g.p - p.|H|.p / 2` (`|H|`: the Hessian with absolute eigenvalues, so `p` climbs where the
acquisition is not concave) within one lengthscale per coordinate, coordinates at a bound the
gradient pushes against held there; where the box cuts that step so it no longer climbs, the
gradient step in the kernel's metric instead. `t` is halved until the Armijo condition holds. The
first round uses the exact Hessian (`posterior_hessian`), later ones its symmetric rank-one
update from the gradients (`_sr1`: one `predict_with_grad` per round). Each start stops on its own
(`_round`): converged (the model promises less than the tolerance), merged (within `MERGE` lengthscales
of a better start), pruned (a trusted model promising less than the gap to the best start over
`PRUNE`), or stuck (no halving climbs). The remaining starts are evaluated together, one posterior
pass per round. Nothing depends on time: the same data give the same iterates, bit for bit.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular

from .gp import predict_with_grad
from .kernels import Matern52, SquaredExponential

#: A start stops when its step improves the acquisition by at most `budget.tolerance` (relative
#: to max(1, |a|); behaviour versions 1-3: 1e-12, `behaviours.LEGACY_TOLERANCE`),
#: or when its step is below `X_TOL` lengthscales in every coordinate.
X_TOL = 1e-10
#: Armijo's sufficient-increase constant and the most step halvings per iteration.
ARMIJO, MAX_HALVINGS = 1e-4, 12
_SQRT5 = np.sqrt(5.0)
#: Rounds with the exact Hessian (the first); later rounds update it by SR1 from gradients only.
EXACT_ROUNDS = 1
#: A start on a trusted model (`_direction`) stops when even this many times the model's increase
#: would leave it below the best start.
PRUNE = 4.0
#: Starts closer than this (in lengthscales, every coordinate) to a better one stop there.
MERGE = 0.05


def supports(gp, acq) -> bool:
    """Whether the Newton polish applies: a kernel with known second derivatives and an
    acquisition with `partials` (otherwise the caller uses L-BFGS-B)."""
    return isinstance(gp.kernel, (SquaredExponential, Matern52)) and hasattr(acq, "partials")


def _kernel_factors(kernel, Xq: np.ndarray, X: np.ndarray):
    """`(k, g, h)`, each `(m, n)`: the kernel and its first- and second-derivative factors."""
    if isinstance(kernel, SquaredExponential):
        k = kernel(Xq, X)
        return k, -k, k
    d2 = np.maximum((((Xq[:, None, :] - X[None, :, :]) / kernel.lengthscales) ** 2).sum(-1), 0.0)
    r = np.sqrt(d2)
    e = kernel.variance * np.exp(-_SQRT5 * r)
    return (1.0 + _SQRT5 * r + (5.0 / 3.0) * d2) * e, -(5.0 / 3.0) * (1.0 + _SQRT5 * r) * e, \
        (25.0 / 3.0) * e


def posterior_hessian(gp, Xq: np.ndarray, t_query: float = 0.0):
    """Float64 posterior mean and variance `(m,)`, their gradients `(m, d)` and Hessians
    `(m, d, d)` at the rows of `Xq` (a fitted GP with `n >= 1`; module docstring)."""
    Xq = np.asarray(Xq, dtype=float)
    tq = np.array([float(t_query)])
    m, d = Xq.shape
    n = gp.n
    k, g, h = _kernel_factors(gp.kernel, Xq, gp.X_)
    if gp.temporal is not None:
        w = gp.temporal(tq, gp.times_)  # (1, n): constant in x
        k, g, h = k * w, g * w, h * w
    inv_l2 = np.broadcast_to(1.0 / gp.kernel.lengthscales**2, (d,))  # one lengthscale or d
    U = (Xq[:, None, :] - gp.X_[None, :, :]) * inv_l2  # (m, n, d)
    rhs = np.empty((n, m * (d + 1)))
    rhs[:, :m] = k.T
    rhs[:, m:].reshape(n, m, d)[...] = (g[:, :, None] * U).transpose(1, 0, 2)  # J = dk/dx
    S = solve_triangular(gp.L_, rhs, lower=True, check_finite=False)
    V, B = S[:, :m], S[:, m:]  # L^{-1} k (n, m), L^{-1} J (n, m d)
    W = solve_triangular(gp.L_.T, V, lower=False, check_finite=False)  # K^{-1} k, (n, m)
    mean = V.T @ gp.v_
    var = gp.prior_variance(Xq, tq) - np.einsum("ij,ij->j", V, V)
    alpha = gp.alpha_
    dmean = np.einsum("mnd,mn->md", U, g * alpha)
    dvar = -2.0 * np.einsum("nmd,nm->md", B.reshape(n, m, d), V)
    # sum_j a_mj d2k_mj = (sum_j c_mj) diag(1/l^2) + sum_j e_mj u_mj u_mj^T (c = a g, e = a h) for
    # a = alpha (the mean) and a = K^{-1} k (the variance); the moments on centered data,
    # sum_j e_j (x - x_j)(x - x_j)^T = (sum e) x x^T - x s^T - s x^T + sum_j e_j x_j x_j^T, s = e X
    a = np.stack([np.broadcast_to(alpha, (m, n)), W.T], axis=1)  # (m, 2, n)
    Xc, xc = gp.X_ - Xq[0], Xq - Xq[0]
    e = a * h[:, None, :]
    se = e @ Xc  # (m, 2, d)
    M = (e.reshape(2 * m, n) @ (Xc[:, :, None] * Xc[:, None, :]).reshape(n, d * d)).reshape(
        m, 2, d, d)
    M += e.sum(axis=2)[:, :, None, None] * (xc[:, :, None] * xc[:, None, :])[:, None]
    xs = xc[:, None, :, None] * se[:, :, None, :]
    M -= xs + xs.transpose(0, 1, 3, 2)
    curv = M * (inv_l2[:, None] * inv_l2[None, :]) + (a @ g[:, :, None])[..., None] * np.diag(inv_l2)
    BB = (B.T @ B).reshape(m, d, m, d)[np.arange(m), :, np.arange(m), :]  # J^T K^{-1} J
    hmean = curv[:, 0]
    hvar = -2.0 * (BB + curv[:, 1])
    clamped = var <= 0
    dvar[clamped], hvar[clamped] = 0.0, 0.0
    return mean, np.maximum(var, 0.0), dmean, dvar, hmean, hvar


def acquisition_hessian(acq, mean, var, dmean, dvar, hmean, hvar):
    """`(a, da/dx, d2a/dx2)` of `a = acq(mu, sigma)` from the posterior's derivatives."""
    sd = np.sqrt(var)
    ok = sd > 1e-12
    safe = np.where(ok, sd, 1.0)
    ds = np.where(ok[:, None], dvar / (2.0 * safe[:, None]), 0.0)
    hs = np.where(ok[:, None, None], hvar / (2.0 * safe[:, None, None])
                  - ds[:, :, None] * ds[:, None, :] / safe[:, None, None], 0.0)
    value, am, asd, amm, ams, ass = acq.partials(mean, sd)
    grad = am[:, None] * dmean + asd[:, None] * ds
    outer = (amm[:, None, None] * dmean[:, :, None] * dmean[:, None, :]
             + ams[:, None, None] * (dmean[:, :, None] * ds[:, None, :]
                                     + ds[:, :, None] * dmean[:, None, :])
             + ass[:, None, None] * ds[:, :, None] * ds[:, None, :])
    hess = am[:, None, None] * hmean + asd[:, None, None] * hs + outer
    return value, grad, hess


def _evaluate(gp, t_query, acq, X, exact=True):
    """`(a, da/dx, d2a/dx2 or None, mean, var)` at the rows of `X`; the Hessian only if `exact`."""
    if not exact:
        mean, var, dmean, dvar = predict_with_grad(gp, X, t_query)
        value, grad = acq.score_grad(mean, var, dmean, dvar)
        return value, grad, None, mean, var
    mean, var, dmean, dvar, hmean, hvar = posterior_hessian(gp, X, t_query)
    value, grad, hess = acquisition_hessian(acq, mean, var, dmean, dvar, hmean, hvar)
    return value, grad, hess, mean, var


def _sr1(H, s, y):
    """Symmetric rank-one update of Hessians `H` `(m, d, d)` by steps `s` and gradient changes `y`
    (skipped where the denominator is tiny, Nocedal & Wright 2006, eq. 6.26)."""
    r = y - np.einsum("mij,mj->mi", H, s)
    den = np.einsum("mi,mi->m", r, s)
    ok = np.abs(den) >= 1e-8 * np.linalg.norm(r, axis=1) * np.linalg.norm(s, axis=1)
    safe = np.where(ok, den, 1.0)
    return H + np.where(ok, 1.0 / safe, 0.0)[:, None, None] * r[:, :, None] * r[:, None, :]


def _direction(x, grad, hess, lower, upper, ls):
    """The projected, eigenvalue-modified Newton ascent direction `(m, d)` (module docstring):
    the maximum of the model `g.p - p.A.p / 2` (`A = |H|`) within one lengthscale per coordinate,
    with the coordinates at a bound the gradient pushes against held there and any coordinate the
    step would carry out of the box held at that bound while the rest are solved again (at most
    `d` times). Where that is not an ascent direction (a far step cut by the box), the gradient
    step in the kernel's metric (`l^2 g`, one lengthscale long) instead. Also returns where the
    model is trusted: concave, and its maximum inside the box and the trust region (the plain
    Newton step taken whole)."""
    d = x.shape[1]
    lam, Q = np.linalg.eigh(-hess)
    concave = lam.min(axis=1) > 0
    lam = np.abs(lam)
    lam = np.maximum(lam, 1e-10 * lam.max(axis=1, keepdims=True) + 1e-300)
    A = (Q * lam[:, None, :]) @ Q.transpose(0, 2, 1)
    fixed = ((x <= lower) & (grad < 0)) | ((x >= upper) & (grad > 0))
    grad = grad * ~fixed  # what the box allows
    held = np.zeros_like(x)  # the displacement of the held coordinates
    eye = np.eye(d)
    for k in range(d):
        free = ~fixed
        rhs = (grad - (A @ held[:, :, None])[:, :, 0]) * free
        Ar = A * (free[:, :, None] & free[:, None, :]) + eye * fixed[:, None, :]
        newton = np.where(fixed, held, np.linalg.solve(Ar, rhs[:, :, None])[:, :, 0])
        p = _capped(newton, ls)
        whole = np.all(p == newton, axis=1) if k == 0 else np.zeros(len(x), dtype=bool)
        xt = x + p
        out = ((xt < lower) | (xt > upper)) & free
        if not out.any():
            break
        held = np.where(out, np.clip(xt, lower, upper) - x, held)
        fixed |= out
    slope = np.einsum("ij,ij->i", grad, p)
    steep = _capped(grad * ls**2, ls)
    uphill = slope > 1e-3 * np.linalg.norm(grad, axis=1) * np.linalg.norm(p, axis=1)
    trusted = concave & whole & ~fixed.any(axis=1) & uphill
    return np.where(uphill[:, None], p, steep), trusted


def _capped(p, ls):
    """`p` scaled down to at most one lengthscale in every coordinate."""
    over = np.max(np.abs(p) / ls, axis=1)
    return p / np.maximum(over, 1.0)[:, None]


def _distinct(active, x, f, ls):
    """`active` without the starts within `MERGE` lengthscales (every coordinate) of a start with a
    higher value: they climb the same hill, and the higher one goes on (ties: the lower index)."""
    if active.size < 2:
        return active
    xa, fa = x[active], f[active]
    close = np.all(np.abs(xa[:, None, :] - xa[None, :, :]) <= MERGE * ls, axis=2)
    better = (fa[None, :] > fa[:, None]) | ((fa[None, :] == fa[:, None])
                                            & (active[None, :] < active[:, None]))
    return active[~np.any(close & better, axis=1)]


def newton_polish(gp, t_query, acq, starts, lower, upper, maxiter, tolerance=1e-12):
    """Polish every start (`(k, d)`) for at most `maxiter` rounds; returns `(points (2k, d),
    mean (2k,), var (2k,))`: the starts and their polished ends with their float64 posterior mean
    and variance, taken from the evaluations themselves (as `optimize._polish` returns them)."""
    x0 = np.clip(np.array(starts, dtype=float), lower, upper)
    f, G, H, mean, var = _evaluate(gp, t_query, acq, x0)
    st = {"x": x0.copy(), "f": f, "G": G, "H": H, "mean": mean.copy(), "var": var.copy()}
    active = np.arange(len(x0))
    for it in range(maxiter):
        if not active.size:
            break
        going = _round(gp, t_query, acq, st, active, it, (lower, upper), tolerance)
        active = _distinct(going, st["x"], st["f"], gp.kernel.lengthscales)
    return (np.vstack([x0, st["x"]]), np.concatenate([mean, st["mean"]]),
            np.concatenate([var, st["var"]]))


def _round(gp, t_query, acq, st, active, it, box, tol):
    """One Newton step of the `active` starts (updating `st` in place); returns those that go on.

    A start stops when the quadratic model promises less than `tol` (converged),
    when its model is trusted and even `PRUNE` times that promise would leave it below the best
    start (not for `screened` acquisitions, whose final value is not the score), or when no
    halving of its step increases the acquisition (a projected maximum to round-off)."""
    ls = gp.kernel.lengthscales
    xa, fa, Ga = st["x"][active], st["f"][active], st["G"][active]
    p, trusted = _direction(xa, Ga, st["H"][active], *box, ls)
    predicted = 0.5 * np.einsum("ij,ij->i", Ga, p)  # the Newton step's model increase
    done = predicted <= tol * np.maximum(1.0, np.abs(fa))
    best = float(np.max(st["f"]))
    if not acq.screened:  # on a trusted model, even PRUNE times its increase stays below the best
        done |= trusted & (fa + PRUNE * predicted < best - tol * max(1.0, abs(best)))
    step, todo = 1.0, np.flatnonzero(~done)
    for _ in range(MAX_HALVINGS):
        if not todo.size:
            break
        xt = np.clip(xa[todo] + step * p[todo], *box)
        ft, Gt, Ht, mt, vt = _evaluate(gp, t_query, acq, xt, it < EXACT_ROUNDS)
        s = xt - xa[todo]
        if Ht is None:
            Ht = _sr1(st["H"][active[todo]], s, Gt - Ga[todo])
        gain = ft - fa[todo]
        ok = (gain > 0) & (gain >= ARMIJO * np.einsum("ij,ij->i", Ga[todo], s))
        i = active[todo[ok]]
        for key, value in (("x", xt), ("f", ft), ("G", Gt), ("H", Ht), ("mean", mt), ("var", vt)):
            st[key][i] = value[ok]
        small = (gain[ok] <= tol * np.maximum(1.0, np.abs(ft[ok]))) | np.all(
            np.abs(s[ok]) <= X_TOL * ls, axis=1)
        done[todo[ok][small]] = True
        todo, step = todo[~ok], 0.5 * step
    done[todo] = True
    return active[~done]
