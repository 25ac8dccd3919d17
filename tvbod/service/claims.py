"""Which adapter drives a plant: one at a time, by name (docs/protocol.md, *Adapters*)."""

from __future__ import annotations

import time

from tvbod.protocol import ErrorCode, ProtocolError
from tvbod.service.events import PlantEventLog
from tvbod.service.transition import PlantState


class AdapterClaim:
    """The adapter driving a plant and when it was last heard. A claim lasts the plant's
    `proposal_timeout` seconds after its adapter's last request; a restarted adapter with the
    same name takes over at once. A request without an adapter name is served only while no
    claim is live."""

    def __init__(self, state: PlantState, events: PlantEventLog) -> None:
        self.state, self.events = state, events
        self.adapter: str | None = None
        self.seen = 0.0  # monotonic time of its last request

    def check(self, adapter: str | None, request_id) -> None:
        """Refuse (`plant_claimed`) a request from another adapter while the claim is live;
        otherwise `adapter` (if named) holds the claim from now."""
        now, timeout = time.monotonic(), self.state.config.proposal_timeout
        live = self.adapter is not None and now - self.seen < timeout
        if live and adapter != self.adapter:
            raise ProtocolError(
                ErrorCode.PLANT_CLAIMED,
                f"plant {self.state.name!r} is driven by adapter {self.adapter!r} (last request "
                f"{now - self.seen:.1f} s ago; its claim lapses after {timeout:g} s of silence)",
                request_id)
        if adapter is None:
            return
        if adapter != self.adapter:
            self.events.emit("adapter_claimed", adapter=adapter, previous=self.adapter)
        self.adapter, self.seen = adapter, now
