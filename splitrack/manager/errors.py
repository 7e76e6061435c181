"""What HTTP status each failure is: ApiError, and the rack's errors mapped.

ApiError(status, message) is raised by the manager and the request checks; the
service answers it as `status` with {"error": message}. The rack answers FIT
calls with errno-like codes (fit_rpc/errors.py): from_rack() gives each its
status, so a client sees why in the terms of the REST API.
"""

import errno

_STATUS = {
    errno.EINVAL: 400,     # a bad name or count
    errno.E2BIG: 400,      # more than the whole rack has
    errno.EPERM: 403,
    errno.EACCES: 403,
    errno.ENOENT: 404,     # no such slice (at global)
    errno.EEXIST: 409,     # the name is taken
    errno.EBUSY: 409,
}


class ApiError(Exception):
    """A request the manager refuses: `status` (4xx, 5xx) and a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def from_rack(exc: OSError, doing: str) -> ApiError:
    """The ApiError for a failed FIT call: 503 for what is no fault of the request
    (the rack did not answer, a FIT-level failure)."""
    status = _STATUS.get(exc.errno or 0, 503)
    return ApiError(status, f"{doing}: {exc.strerror or exc}")
