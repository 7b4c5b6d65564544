from django.apps import AppConfig


class BenchConfig(AppConfig):
    """Benchmark, load and fault tooling (management commands only; no models, not product code)."""

    name = "bench"
    default_auto_field = "django.db.models.BigAutoField"
