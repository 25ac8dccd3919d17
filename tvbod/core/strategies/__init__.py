"""Strategies: the GP-UCB family (ET-GP-UCB, GP-UCB, R-GP-UCB, TV-GP-UCB, UI-TVBO), with fixed,
adaptive or A-GP-UCB exploration and UCB or EI acquisition, and Sobol random search."""

from .base import Measured, Strategy, TellResult
from .gpucb import GPUCBStrategy
from .random_search import RandomSearchStrategy

__all__ = ["GPUCBStrategy", "Measured", "RandomSearchStrategy", "Strategy", "TellResult"]
