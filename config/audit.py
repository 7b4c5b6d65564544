"""Keyed digests for audit rows. Audit rows never hold query text: recall queries are a few words
about a person, and a plain hash of them is reversed by hashing guesses, so the digest is an
HMAC-SHA256 under a subkey derived from the service's audit key. Without a key, no digest."""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings

_SUBKEY_LABEL = b"engram/audit-digest/v1"


def audit_digest(text: str) -> str:
    key: str = settings.ENGRAM_AUDIT_KEY
    if not key:
        return ""
    subkey = hmac.new(key.encode(), _SUBKEY_LABEL, hashlib.sha256).digest()
    return hmac.new(subkey, text.encode(), hashlib.sha256).hexdigest()
