"""A weight publish: the request a trainer sends (POST /publish_weights) and what each backend answered."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt


class PublishRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy_version: StrictInt = Field(ge=0)
    """The trainer's version of the weights; each server is told it (as text) and must say it back."""
    weights_path: str = Field(min_length=1)
    """A checkpoint directory every server can read (same architecture as it serves): vLLM reloads it in
    place (`reload_weights`), SGLang loads it (`/update_weights_from_disk`)."""
    addresses: list[str] | None = None
    """The backends to publish to (as registered); None: every backend in the pool."""
    pause: Literal["keep", "wait"] = "keep"
    """How requests in flight live through the update. `keep`: frozen where they are and resumed on the new
    weights (vLLM `/pause?mode=keep`, SGLang `/pause_generation {mode: in_place}`); a turn then spans the
    publish. `wait`: the server lets them finish first (vLLM `mode=wait`, SGLang `mode=retract` holds them
    and recomputes them on the new weights). Never `abort`."""
    timeout_s: float = Field(600.0, gt=0, le=3600)
    """Per backend: the whole protocol (pause, update, confirm, resume) ends by then."""


class BackendPublish(BaseModel):
    address: str
    kind: Literal["vllm", "sglang"]
    confirmed: bool
    """The server said it now serves `policy_version` (vLLM `/weight_info`, SGLang `/get_weight_version`),
    and the pool labels the backend with it."""
    served_version: str | None = None
    """What the server said it serves after the update (None: it did not answer)."""
    steps: list[str] = Field(default_factory=list)
    """Each route called, in order, with its status ("POST /pause?mode=keep 200")."""
    in_flight: int = 0
    """Model calls the farm had running on this backend when it was paused."""
    aborted: int | None = None
    """Requests the server aborted across the publish (vLLM: its `vllm:request_success_total`
    `finished_reason="abort"` counter before and after); None: not known, `aborted_unknown` says why."""
    aborted_unknown: str | None = None
    """Why `aborted` is None: the server counts no aborts (SGLang), its metrics could not be read, or the
    publish failed before the count after it."""
    seconds: float = 0.0
    removed: bool = False
    """The update could not be confirmed: the backend left the pool (`reason` says why)."""
    reason: str | None = None


class PublishResult(BaseModel):
    policy_version: int
    backends: list[BackendPublish]
    confirmed: int
    """Backends now labelled with `policy_version`."""
    removed: int
    in_flight: int
    aborted: int | None
    """Summed over the backends whose aborts were counted; None when none was."""
    aborts_uncounted: int = 0
    """Backends whose aborts are not known (each one's `aborted_unknown` says why): `aborted` leaves them
    out."""
    seconds: float
