"""The one root of every exception tvbod defines (imports nothing, so any module may use it).

`tvbod.core.errors` re-exports it as `TvbodError` beside the core's own children; the service,
the protocol, the client and the adapters derive their exceptions from it too, so
`except TvbodError` catches every mistake tvbod reports on purpose (tests/test_errors.py).
"""


class TvbodError(Exception):
    """Root of every error tvbod raises on purpose."""
