"""A load's threads: started together, told to stop together, waited for."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Crew"]


class Crew:
    """Daemon threads that run until ``stopping`` is set (by ``stop``)."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def add(self, target: Callable[..., object], *args: Any) -> None:
        """Run ``target(*args)`` in a thread of its own once started."""
        self._threads.append(threading.Thread(target=target, args=args, daemon=True))

    def start(self) -> None:
        """Start every thread added."""
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Tell every thread to stop, and wait for each (up to ``timeout`` seconds)."""
        self.stopping.set()
        for thread in self._threads:
            thread.join(timeout)
