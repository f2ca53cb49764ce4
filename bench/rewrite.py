#!/usr/bin/env python3
"""A file laid out, then written again in order: what fio and databases do.

  rewrite.py FILE SIZE_MIB

creates FILE, fallocates SIZE_MIB MiB and closes it (the layout), then opens
it again and writes it from offset 0 in order, 1 MiB a write, each MiB its
own bytes, fsyncs it and closes it. Prints one JSON object: write_mib_s (the
writes alone), fsync_s, close_s and total_mib_s (the writes, the fsync and
the close).
"""
import json
import os
import sys
import time


def main(path, size_mib):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, size_mib << 20)
    os.close(fd)
    block = bytearray(os.urandom(1 << 20))
    fd = os.open(path, os.O_RDWR)
    t0 = time.monotonic()
    for i in range(size_mib):
        block[8:16] = i.to_bytes(8, "little")
        os.pwrite(fd, block, i << 20)
    t1 = time.monotonic()
    os.fsync(fd)
    t2 = time.monotonic()
    os.close(fd)
    t3 = time.monotonic()
    print(json.dumps({
        "write_mib_s": size_mib / (t1 - t0),
        "fsync_s": t2 - t1,
        "close_s": t3 - t2,
        "total_mib_s": size_mib / (t3 - t0),
    }))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], int(sys.argv[2]))
