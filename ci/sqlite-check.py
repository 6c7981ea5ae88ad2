#!/usr/bin/env python3
"""SQLite as an application test of a mount (sourced by ci/posix-lib.sh's run_sqlite).

    ci/sqlite-check.py DB JOURNAL_MODE

Builds a table in 60 transactions of 100 random inserts, replacements and deletes of blobs of
1-3,000 bytes (writes of partial pages at odd offsets, journal files created, truncated and
deleted; in WAL mode a -shm file shared through mmap), runs VACUUM (the file rewritten and
shrunk), then reopens the database: PRAGMA integrity_check must say ok and the rows must be the
ones a dict kept beside it. Exits non-zero otherwise.
"""
import os
import random
import sqlite3
import sys


def main() -> None:
    path, journal_mode = sys.argv[1], sys.argv[2]
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA journal_mode={journal_mode}")
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
    rnd = random.Random(7)
    rows = {}
    for _ in range(60):
        with db:
            for _ in range(100):
                k = rnd.randrange(3000)
                if k in rows and rnd.random() < 0.2:
                    db.execute("DELETE FROM t WHERE k = ?", (k,))
                    del rows[k]
                else:
                    rows[k] = rnd.randbytes(rnd.randrange(1, 3000))
                    db.execute("INSERT OR REPLACE INTO t VALUES (?, ?)", (k, rows[k]))
    db.execute("VACUUM")
    db.close()

    db = sqlite3.connect(path)
    check = db.execute("PRAGMA integrity_check").fetchone()[0]
    if check != "ok":
        sys.exit(f"integrity_check: {check}")
    if dict(db.execute("SELECT k, v FROM t")) != rows:
        sys.exit("the rows read back differ from the rows written")
    print(f"{journal_mode}: {len(rows)} rows, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
