"""The WSGI application gunicorn serves (``scripts/run``, and the benchmarks' server).

Each worker loads Django, its models and the URL configuration (every view module) here, then moves
everything loaded so far out of the cyclic garbage collector's reach (``gc.freeze``). Those objects
live as long as the worker, yet without this every full collection walks them all: some 120,000
objects, 52-57 ms a collection (measured with ``gc.collect()`` after loading this module), charged to
whichever request happens to trigger it. Frozen, a full collection walks only what requests left
behind. Nothing a request creates is frozen, so garbage made while serving is collected as before.
"""

import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()
# The URL configuration is otherwise imported by the first request, after the freeze.
get_resolver().url_patterns  # noqa: B018 (evaluated for its imports)
gc.collect()
gc.freeze()
