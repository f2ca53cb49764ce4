#!/usr/bin/env python3
"""Small synchronous writes, each timed: what a commit costs a database.

  syncwrite.py pwrite FILE SIZE_MIB COUNT
      writes FILE (random bytes, fsynced), then COUNT times a 4 KiB pwrite
      at a random 4 KiB-aligned offset followed by fdatasync
  syncwrite.py sqlite DB delete|wal SIZE_MIB COUNT [SECONDS]
      builds a SQLite database of about SIZE_MIB MiB (1,000-byte rows), then
      one-row transactions (an UPDATE of a random row), with
      synchronous=FULL in the given journal mode: COUNT of them, and more
      until SECONDS (default 0) have passed. A few hundred transactions
      take a fraction of a second on a fast filesystem, and whether one
      background flush or compaction of the server's lands in so short a
      window decides the figure; a window of seconds holds its share.
  syncwrite.py save DIR COUNT
      COUNT times a safe save, timed whole: 4 KiB written to a new
      temporary name in DIR, fsynced, closed, renamed over DIR/saved, and
      DIR fsynced (how editors, git with core.fsync and package managers
      replace a file)

Prints one JSON object: ops_per_s (over the timed operations only), p50_ms,
p99_ms, max_ms. A stall that comes once every few hundred calls (a commit
the calls wait for) is below the p99 of a few hundred calls: time thousands
of them, and read max_ms.
"""
import json
import os
import random
import sqlite3
import sys
import time


def report(lat):
    lat.sort()
    n = len(lat)
    print(json.dumps({
        "ops_per_s": n / sum(lat),
        "p50_ms": lat[n // 2] * 1e3,
        "p99_ms": lat[min(n - 1, (n * 99) // 100)] * 1e3,
        "max_ms": lat[-1] * 1e3,
    }))


def pwrite(path, size_mib, count):
    with open(path, "wb") as f:
        for _ in range(size_mib):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
    rng = random.Random(1)
    blocks = (size_mib << 20) // 4096
    fd = os.open(path, os.O_RDWR)
    lat = []
    for _ in range(count):
        data = os.urandom(4096)
        off = rng.randrange(blocks) * 4096
        t = time.perf_counter()
        os.pwrite(fd, data, off)
        os.fdatasync(fd)
        lat.append(time.perf_counter() - t)
    os.close(fd)
    report(lat)


def sqlite(path, mode, size_mib, count, seconds):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=%s" % mode)
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
    rows = (size_mib << 20) // 1000
    db.execute("BEGIN")
    db.executemany("INSERT INTO t (v) VALUES (?)", ((os.urandom(1000),) for _ in range(rows)))
    db.execute("COMMIT")
    rng = random.Random(2)
    lat = []
    start = time.perf_counter()
    while len(lat) < count or time.perf_counter() - start < seconds:
        v, row = os.urandom(1000), rng.randrange(rows) + 1
        t = time.perf_counter()
        try:
            db.execute("BEGIN")
            db.execute("UPDATE t SET v = ? WHERE id = ?", (v, row))
            db.execute("COMMIT")
        except sqlite3.Error as e:
            # The extended code (SQLITE_IOERR_FSYNC, _WRITE, _SHMMAP...)
            # names the call that failed; "disk I/O error" alone does not.
            sys.exit("sqlite %s: transaction %d failed: %s (%s)" % (mode, len(lat) + 1, e, getattr(e, "sqlite_errorname", "?")))
        lat.append(time.perf_counter() - t)
    db.close()
    report(lat)


def save(d, count):
    final, tmp = os.path.join(d, "saved"), os.path.join(d, "saved.tmp")
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    lat = []
    for _ in range(count):
        data = os.urandom(4096)
        t = time.perf_counter()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        os.rename(tmp, final)
        os.fsync(dfd)
        lat.append(time.perf_counter() - t)
    os.close(dfd)
    report(lat)


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) == 4 and a[0] == "pwrite":
        pwrite(a[1], int(a[2]), int(a[3]))
    elif len(a) in (5, 6) and a[0] == "sqlite" and a[2] in ("delete", "wal"):
        sqlite(a[1], a[2], int(a[3]), int(a[4]), float(a[5]) if len(a) == 6 else 0)
    elif len(a) == 3 and a[0] == "save":
        save(a[1], int(a[2]))
    else:
        sys.exit(__doc__)
