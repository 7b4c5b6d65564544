"""What a gunicorn worker holds once it has loaded the application."""

from __future__ import annotations

import subprocess
import sys

from django.conf import settings

#: Loads the WSGI module as a worker does, then reports what the collector still tracks.
WORKER = """
import gc
import config.wsgi
import history.apis, memory.apis
print(gc.get_freeze_count(), len(gc.get_objects()))
"""


def test_a_worker_freezes_the_loaded_application_out_of_the_collectors_reach() -> None:
    result = subprocess.run(
        [sys.executable, "-c", WORKER], cwd=settings.BASE_DIR, capture_output=True, text=True, check=True
    )
    frozen, tracked = (int(n) for n in result.stdout.split())
    # Every view module was imported before the freeze (the second import finds them loaded), so a
    # full collection has almost nothing of the application left to walk.
    assert frozen > 50_000
    assert tracked < 1_000
