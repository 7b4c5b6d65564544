"""Embeddings: derived, disposable vectors of immutable text (revisions and messages).

PostgreSQL stays the source of truth. A vector is keyed by the revision or message it was computed
from, the model and its dimensions, and the generation (one model's index). Retrieval uses only the
newest complete generation and always re-decides eligibility on canonical rows, so a stale vector
can never revive an amended or forgotten memory.
"""
