"""The real Celery worker the suite starts: the process that runs Engram's tasks outside requests."""

import pytest

from tests.conftest import CeleryWorkerProcess

pytestmark = pytest.mark.worker


def test_worker_answers_ping(celery_worker_process: CeleryWorkerProcess) -> None:
    """A prefork worker on the test database and a private filesystem broker answers `inspect ping`."""
    assert celery_worker_process.process.poll() is None
    assert celery_worker_process.ping()
