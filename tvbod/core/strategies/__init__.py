"""Strategies: the GP-UCB family (ET-GP-UCB, GP-UCB, R-GP-UCB, TV-GP-UCB, UI-TVBO)."""

from .base import Strategy, TellResult
from .gpucb import GPUCBStrategy

__all__ = ["GPUCBStrategy", "Strategy", "TellResult"]
