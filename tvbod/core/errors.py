"""One error root for the core, with children that say what kind of mistake was made."""

from __future__ import annotations

from tvbod.errors import TvbodError

__all__ = ["DomainError", "InvalidValue", "NumericalError", "SpecError", "StateError",
           "TvbodError"]


class InvalidValue(TvbodError, ValueError):
    """The value at a dotted key of a configuration mapping is invalid (`tvbod.core.validate`).

    `key` is the dotted path of the offending key (e.g. `kernel.lengthscales`), `allowed` says what
    values would have been accepted.
    """

    def __init__(self, key: str, problem: str, allowed: str | None = None) -> None:
        self.key = key
        self.problem = problem
        self.allowed = allowed
        text = f"{key}: {problem}"
        if allowed:
            text += f" (allowed: {allowed})"
        super().__init__(text)


class SpecError(InvalidValue):
    """A strategy spec (the `optimizer:` mapping) is invalid (`key`, `problem`, `allowed`)."""


class DomainError(TvbodError, ValueError):
    """A point is not in the domain (wrong shape, out of bounds, not one of the finite points)."""


class NumericalError(TvbodError, ArithmeticError):
    """The GP's kernel matrix could not be factorized even with the largest allowed jitter."""


class StateError(TvbodError, ValueError):
    """A `state_dict` does not fit the strategy it is loaded into."""
