"""The embedded SQLite database copies its write-ahead log back into the database file from a
thread of its own, not inside a commit: commits only checkpoint past a large backstop, and what
was committed still reaches the database file within moments."""

from __future__ import annotations

import threading
import time

from django.db.backends.sqlite3.base import DatabaseWrapper

from delegations import sqlite_checkpoints


def open_file_database(path) -> DatabaseWrapper:
    wrapper = DatabaseWrapper(
        {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(path),
            "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
            "TIME_ZONE": None,
            "CONN_MAX_AGE": 0,
            "CONN_HEALTH_CHECKS": False,
            "AUTOCOMMIT": True,
            "ATOMIC_REQUESTS": False,
            "TEST": {},
        },
        alias="checkpoint-test",
    )
    wrapper.ensure_connection()  # sends connection_created, as every connection Django opens
    return wrapper


def test_commits_leave_checkpoints_to_the_thread_which_copies_the_log_into_the_file(
    tmp_path, django_db_blocker
):
    path = tmp_path / "desk.sqlite3"
    with django_db_blocker.unblock():
        wrapper = open_file_database(path)
    try:
        with django_db_blocker.unblock(), wrapper.cursor() as cursor:
            cursor.execute("PRAGMA wal_autocheckpoint")
            assert cursor.fetchone()[0] == sqlite_checkpoints.BACKSTOP_PAGES
            cursor.execute("CREATE TABLE decided (id INTEGER PRIMARY KEY, note TEXT)")
            before = path.stat().st_size
            for index in range(200):  # 200 commits, far below the backstop's pages
                cursor.execute("INSERT INTO decided (note) VALUES (%s)", ["x" * 500 + str(index)])
        assert any(t.name == "sqlite-checkpoints" for t in threading.enumerate())
        deadline = time.monotonic() + 10
        while path.stat().st_size <= before + 50_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert path.stat().st_size > before + 50_000, "the log never reached the database file"
    finally:
        with django_db_blocker.unblock():
            wrapper.close()


def test_an_in_memory_database_gets_no_thread(db):
    from django.db import connection

    if connection.vendor != "sqlite":
        assert connection.vendor == "postgresql"  # nothing of this module applies there
        return
    assert connection.is_in_memory_db()
    assert str(connection.settings_dict["NAME"]) not in sqlite_checkpoints._started


def test_the_thread_ends_with_its_database_file(tmp_path, django_db_blocker):
    path = tmp_path / "scratch.sqlite3"
    with django_db_blocker.unblock():
        wrapper = open_file_database(path)
        wrapper.close()
    assert sqlite_checkpoints._started.get(str(path))
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"scratch.sqlite3{suffix}").unlink(missing_ok=True)
    deadline = time.monotonic() + 10
    while str(path) in sqlite_checkpoints._started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert str(path) not in sqlite_checkpoints._started
