"""The CLI's side of the REST API: one HTTP call, JSON in and out (stdlib only).

    api = Client("http://127.0.0.1:8765")
    status, body = api.call("POST", "/slices", {"name": "wc", "p": 2})
    api.call("GET", "/jobs/j1", query={"wait": 30})

A call answered with a 2xx status returns (status, the decoded JSON). Anything
else raises ClientError with one line: the manager's {"error"} and the status,
or why the manager could not be reached (and the hint to start `splitrack serve`).
"""

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from splitrack.params import CLIENT_TIMEOUT_S, WAIT_MAX_S


class ClientError(RuntimeError):
    """The manager refused the call, or could not be reached; the message says which."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class Client:
    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def call(self, method: str, path: str, body: dict[str, Any] | None = None,
             query: dict[str, Any] | None = None) -> tuple[int, Any]:
        url = self.url + urllib.parse.quote(path)
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=CLIENT_TIMEOUT_S + WAIT_MAX_S) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            raise ClientError(f"{_error_of(exc)} (HTTP {exc.code})", exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ClientError(f"cannot reach the rack manager at {self.url} ({reason}); "
                              "is `splitrack serve` running?") from None


def _error_of(exc: urllib.error.HTTPError) -> str:
    try:
        return json.loads(exc.read())["error"]
    except (ValueError, KeyError, TypeError, OSError):
        return exc.reason
