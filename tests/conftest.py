"""Shared fixtures. Every test runs on real PostgreSQL (the embedded server unless DATABASE_URL is set)."""
