"""Running one piece of test code on several Python threads at once."""

from __future__ import annotations

import threading
from collections.abc import Callable


def at_once(work: Callable[[int], None], count: int = 4) -> None:
    """work(0), ..., work(count - 1), each on its own thread, all started before any is
    joined; the first failure is raised here."""
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as error:  # noqa: BLE001 - raised below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
