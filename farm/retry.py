"""The farm's retry policies, configured in one place (tenacity).

Two shapes cover every retry outside Redis (whose commands retry inside redis-py, farm/settings.py):
- `within(window_s)`: keep trying a call that meets infrastructure trouble for a window of time (a
  gateway or API restart takes seconds), then give up with the last failure;
- `reconnecting(attempts)`: a client call retried a bounded number of times.
Both back off exponentially from `first_s`, capped at `cap_s`, and re-raise the caller's own error
(never tenacity's RetryError), so callers handle exactly the exceptions they did before.
"""

from __future__ import annotations

from typing import Any

from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)
from tenacity.stop import StopBaseT

Errors = type[BaseException] | tuple[type[BaseException], ...]


def _backoff(errors: Errors, stop: StopBaseT, first_s: float, cap_s: float) -> dict[str, Any]:
    """What both shapes share: the errors retried, when to stop, the backoff, the caller's error re-raised."""
    return {
        "retry": retry_if_exception_type(errors),
        "stop": stop,
        "wait": wait_exponential(multiplier=first_s, max=cap_s),
        "reraise": True,
    }


def within(errors: Errors, window_s: float, first_s: float = 0.2, cap_s: float = 2.0) -> Retrying:
    """Retry `errors` with backoff until `window_s` has passed since the first attempt."""
    return Retrying(**_backoff(errors, stop_after_delay(window_s), first_s, cap_s))


def reconnecting(errors: Errors, attempts: int, first_s: float = 0.5, cap_s: float = 5.0) -> AsyncRetrying:
    """Retry `errors` with backoff, `attempts` times in all (async callers)."""
    return AsyncRetrying(**_backoff(errors, stop_after_attempt(attempts), first_s, cap_s))
