"""The farm's retry policies, configured in one place (tenacity).

Two shapes cover every retry outside Redis (whose commands retry inside redis-py, farm/settings.py):
- `within(window_s)`: keep trying a call that meets infrastructure trouble for a window of time (a
  gateway or API restart takes seconds), then give up with the last failure;
- `reconnecting(attempts)`: a client call retried a bounded number of times.
Both back off exponentially from `first_s`, capped at `cap_s`, and re-raise the caller's own error
(never tenacity's RetryError), so callers handle exactly the exceptions they did before.
"""

from __future__ import annotations

from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

Errors = type[BaseException] | tuple[type[BaseException], ...]


def within(errors: Errors, window_s: float, first_s: float = 0.2, cap_s: float = 2.0) -> Retrying:
    """Retry `errors` with backoff until `window_s` has passed since the first attempt."""
    return Retrying(
        retry=retry_if_exception_type(errors),
        stop=stop_after_delay(window_s),
        wait=wait_exponential(multiplier=first_s, max=cap_s),
        reraise=True,
    )


def reconnecting(errors: Errors, attempts: int, first_s: float = 0.5, cap_s: float = 5.0) -> AsyncRetrying:
    """Retry `errors` with backoff, `attempts` times in all (async callers)."""
    return AsyncRetrying(
        retry=retry_if_exception_type(errors),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=first_s, max=cap_s),
        reraise=True,
    )
