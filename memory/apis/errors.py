"""The error responses the agent API and the end user's endpoints document."""

from __future__ import annotations

from config.api import ErrorSerializer

ERRORS = {400: ErrorSerializer, 401: ErrorSerializer, 404: ErrorSerializer, 409: ErrorSerializer, 422: ErrorSerializer}
#: The end user's endpoints use Django's session login: without one (or without its CSRF token) they
#: answer 403, as Django's session authentication does.
USER_ERRORS = {**ERRORS, 403: ErrorSerializer}
