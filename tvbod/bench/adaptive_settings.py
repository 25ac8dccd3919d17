"""The adaptive kappa/lambda settings that `bench adaptive` and its `--composition` runs share
(a module of its own, so neither bench imports the other)."""

KAPPA0, KAPPA_MIN, KAPPA_MAX, LAMBDA_MAX = 2.0, 0.1, 10.0, 1.0
