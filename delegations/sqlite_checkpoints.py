"""Write-ahead-log checkpoints of the embedded SQLite database, off the commit path.

SQLite copies its write-ahead log back into the database file (a checkpoint, with a sync of both
files) inside whichever commit makes the log cross ``wal_autocheckpoint`` pages: on these
machines that commit takes 4-9 ms instead of a fraction of one, and it may be a decision's, just
before its status write. So each process that writes to a SQLite file runs one daemon thread, on
a connection of its own, that checkpoints every ``INTERVAL`` seconds (PASSIVE: it never waits
for, nor blocks, readers and writers; its sync releases the GIL), and the connections Django
opens set ``wal_autocheckpoint`` to ``BACKSTOP_PAGES``, so that a commit checkpoints only if
the log grows that far anyway (a process without the thread, or a burst faster than it).

Started lazily by the first connection a process opens to a SQLite file (after a fork, too: the
thread belongs to the process that started it). PostgreSQL and in-memory databases need none.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

INTERVAL = 0.25  # seconds between checkpoints; a checkpoint with nothing to copy costs ~µs
BACKSTOP_PAGES = 10_000  # ~40 MB of log before a commit checkpoints itself

_started: dict[str, int] = {}  # database file -> pid of the process whose thread runs
_lock = threading.Lock()


def _run(path: str) -> None:
    try:
        # mode=rw: never create the file (it may have been removed since the thread started).
        db = sqlite3.connect(
            Path(path).resolve().as_uri() + "?mode=rw",
            uri=True,
            isolation_level=None,
            timeout=20,
            check_same_thread=False,
        )
    except sqlite3.Error:
        if os.path.exists(path):
            logger.exception("cannot open %s for checkpoints; commits will checkpoint", path)
        _forget(path)
        return
    # Until the file is gone (a removed test or scratch database): the next connection to a new
    # file of that name starts a thread again.
    while os.path.exists(path):
        time.sleep(INTERVAL)
        try:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            logger.debug("checkpoint of %s skipped: %s", path, exc)
    db.close()
    _forget(path)


def _forget(path: str) -> None:
    with _lock:
        if _started.get(path) == os.getpid():
            del _started[path]


def on_connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: sets the backstop and starts this process's thread."""
    if connection.vendor != "sqlite" or connection.is_in_memory_db():
        return
    path = str(connection.settings_dict["NAME"])
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
    with _lock:
        if _started.get(path) == os.getpid():
            return
        _started[path] = os.getpid()
    threading.Thread(target=_run, args=(path,), name="sqlite-checkpoints", daemon=True).start()
