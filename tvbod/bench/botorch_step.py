"""BoTorch's GP-UCB step for `tvbod bench latency --compare botorch` (the anchors extra): a
SingleTaskGP on the same data and hyperparameters, `optimize_acqf` with 5 restarts over 1000 raw
samples, torch pinned to one thread. Imported only under --compare."""

from __future__ import annotations

import time

class BoTorchStep:
    """BoTorch's GP-UCB step on the same data and hyperparameters (imported only under --compare)."""

    def __init__(self, noise_variance: float, lengthscale, beta) -> None:
        """`lengthscale(d)` and `beta(strategy, t)` as the project's strategy uses them."""
        import botorch
        import gpytorch
        import torch

        self.noise_variance, self.lengthscale, self.beta = noise_variance, lengthscale, beta
        torch.set_num_threads(1)
        self.torch, self.gpytorch = torch, gpytorch
        self.versions = {"torch": torch.__version__, "botorch": botorch.__version__,
                         "gpytorch": gpytorch.__version__}

    def step(self, X, y, beta: float, ls: float, seed: int):
        """Build the model, maximize UCB; the candidate `(d,)` as a numpy array."""
        import warnings

        from botorch.acquisition import UpperConfidenceBound
        from botorch.models import SingleTaskGP
        from botorch.optim import optimize_acqf
        from gpytorch.kernels import RBFKernel, ScaleKernel
        from gpytorch.likelihoods import GaussianLikelihood
        from gpytorch.means import ZeroMean

        torch, f64 = self.torch, self.torch.float64
        torch.manual_seed(seed)
        d = X.shape[1]
        with warnings.catch_warnings(), self.gpytorch.settings.max_cholesky_size(10**6):
            warnings.simplefilter("ignore")
            tX = torch.as_tensor(X, dtype=f64)
            tY = torch.as_tensor(y, dtype=f64).unsqueeze(-1)
            covar = ScaleKernel(RBFKernel(ard_num_dims=d)).to(f64)
            covar.base_kernel.lengthscale = torch.full((1, d), ls, dtype=f64)
            covar.outputscale = torch.tensor(1.0, dtype=f64)
            lik = GaussianLikelihood().to(f64)
            lik.noise = torch.tensor(self.noise_variance, dtype=f64)
            model = SingleTaskGP(tX, tY, likelihood=lik, covar_module=covar, mean_module=ZeroMean(),
                                 outcome_transform=None).to(f64).eval()
            acq = UpperConfidenceBound(model, beta=beta)
            bounds = torch.stack([torch.zeros(d, dtype=f64), torch.ones(d, dtype=f64)])
            cand, _ = optimize_acqf(acq, bounds=bounds, q=1, num_restarts=5, raw_samples=1000)
        return cand.detach().numpy().reshape(-1)

    def time_steps(self, base, steps: list[int], warmup: int) -> tuple[list[float], list]:
        """Seconds per BoTorch step at each of `steps` (after `warmup` untimed ones), candidates."""
        X, y, ls = base.gp.X_, base.gp.y_, self.lengthscale(base.domain.dim)
        for k in range(warmup):
            self.step(X, y, self.beta(base, steps[0]), ls, seed=10_000 + k)
        times, cands = [], []
        for k, t in enumerate(steps):
            t0 = time.perf_counter()
            cands.append(self.step(X, y, self.beta(base, t), ls, seed=k))
            times.append(time.perf_counter() - t0)
        return times, cands
