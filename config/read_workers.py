"""Threads that run independent reads of one request at the same time, each on its own connection.

A round's ``recall`` and ``search_history`` calls do not depend on each other; each spends most of
its time waiting for PostgreSQL, so running them side by side on two connections makes the round as
long as the slower of the two rather than their sum. The threads keep their connections between
requests, as a request thread does, and check them the way a request does before each task (Django's
``close_old_connections``: past ``CONN_MAX_AGE``, or found broken by the health check, a connection
is replaced). :meth:`ReadWorkers.close` stops the threads and closes their connections.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from django.db import close_old_connections, connections

T = TypeVar("T")
#: Threads per process: enough for the concurrent reads of a few requests at once (a threaded server).
WORKERS = 4

_Task = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]


class ReadWorkers:
    def __init__(self, size: int = WORKERS) -> None:
        self._size = size
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, function: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``function(*args)`` on a worker thread; its result or exception arrives in the future."""
        with self._lock:
            if not self._threads:
                self._threads = [
                    threading.Thread(target=self._work, name=f"engram-read-{n}", daemon=True) for n in range(self._size)
                ]
                for thread in self._threads:
                    thread.start()
        future: Future[T] = Future()
        self._tasks.put((future, function, args))
        return future

    def close(self) -> None:
        """Stop the threads; each closes its database connections first."""
        with self._lock:
            threads, self._threads = self._threads, []
            for _ in threads:
                self._tasks.put(None)
        for thread in threads:
            thread.join()

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            future, function, args = task
            if not future.set_running_or_notify_cancel():
                continue
            close_old_connections()
            try:
                future.set_result(function(*args))
            except BaseException as error:  # handed to the caller, which re-raises it
                future.set_exception(error)
        connections.close_all()


#: This process's workers (started on first use).
read_workers = ReadWorkers()
