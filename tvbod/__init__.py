"""tvbod: event-triggered time-varying Bayesian optimization for online controller tuning.

`tvbod.core` is the pure optimizer library (numpy and scipy only); `tvbod.service` is the daemon
around it; `tvbod.protocol` is the wire format the plant adapters speak.
"""

__version__ = "0.2.0"
