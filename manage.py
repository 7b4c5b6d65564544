#!/usr/bin/env python
"""Django's command-line utility for Engram."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.conf import settings
    from django.core.management import execute_from_command_line

    # Load the settings before any command. Django would otherwise swallow their ImproperlyConfigured
    # and still run its own commands (`shell`, `help`, ...); the production profile's refusal
    # (config/production.py) must stop every command, so it is raised here.
    settings.INSTALLED_APPS  # noqa: B018 (evaluated to load the settings)
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
