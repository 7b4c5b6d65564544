"""The HTTP client of the benchmark and fault commands: the standard library's, one connection a call.

gunicorn's sync workers close every connection after answering, so nothing is kept between calls.
The client shares the server's two cores and runs between its requests, so its own CPU is part of
every step a benchmark times: for the ledger read on this project's 2-core machine, ``requests``
cost 2.78 ms of client CPU a call and ``http.client`` 0.98 ms (600 calls each, in alternating
blocks). It is also what the run install has: ``requests`` comes only with the test extras.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

#: What a call raises when no answer arrives (refused, reset, timed out, malformed).
NO_ANSWER = (OSError, http.client.HTTPException)


@dataclass(frozen=True)
class Answer:
    status: int
    text: str

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is not JSON."""
        return json.loads(self.text)


def call(base_url: str, method: str, path: str, *, timeout: float, secret: str = "", body: Any = None) -> Answer:
    """``method path`` on the server at ``base_url``, with the agent key ``secret`` and a JSON ``body``
    if given. Raises one of :data:`NO_ANSWER` when the server does not answer."""
    address = urlsplit(base_url)
    headers = {"Accept": "application/json"}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    payload = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        payload = json.dumps(body)
    connection = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port, timeout=timeout)
    try:
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        return Answer(response.status, response.read().decode(errors="replace"))
    finally:
        connection.close()
