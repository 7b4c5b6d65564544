from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The first-run demo workspace: its tenant, people, conversations, memories and a few real turns
    (management commands only; no models). It writes through every app's services, so it sits above them."""

    name = "demo"
    default_auto_field = "django.db.models.BigAutoField"
