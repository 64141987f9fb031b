"""One exception tree for Relay, and the single map from it to HTTP status and error code.

    RelayError                      (status, code, message)
    ├── InvalidRequest        400   invalid_request / a specific code
    ├── Unauthenticated       401   unauthenticated
    ├── Forbidden             403   a specific code (no_policy, model_not_allowed, ...)
    ├── NotFound              404   not_found
    ├── Conflict              409   conflict
    ├── Unprocessable         422   unprocessable
    ├── PayloadTooLarge       413   payload_too_large
    ├── RateLimited           429   rate_limit_exceeded (+ retry_after)
    │   └── BudgetExceeded    429   budget_exceeded (a spend limit, SPEC §5)
    └── Unavailable           503   a specific code (no_binding, no_keys, ...)

Each boundary (control API, inference API, batch runner) renders these in its own wire shape; the
messages never contain secrets or request/response bodies, because they are returned to callers and
logged.
"""

from __future__ import annotations


class RelayError(Exception):
    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        return self.message


class InvalidRequest(RelayError):
    status = 400
    code = "invalid_request"


class Unauthenticated(RelayError):
    status = 401
    code = "unauthenticated"


class Forbidden(RelayError):
    status = 403
    code = "forbidden"


class NotFound(RelayError):
    status = 404
    code = "not_found"


class Conflict(RelayError):
    status = 409
    code = "conflict"


class PayloadTooLarge(RelayError):
    status = 413
    code = "payload_too_large"


class Unprocessable(RelayError):
    status = 422
    code = "unprocessable"


class RateLimited(RelayError):
    status = 429
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class BudgetExceeded(RateLimited):
    """A spend limit (meter ``cost_usd``) is spent for the current window; a ``RateLimited`` so every
    boundary that renders a 429 with ``Retry-After`` renders this one the same way."""

    code = "budget_exceeded"


class Unavailable(RelayError):
    status = 503
    code = "unavailable"
