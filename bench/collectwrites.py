"""How long a writer of a page waits while the page is collected.

Run by bench/collectwrites.sh: `setup` fills MNT/l/p with 3 rounds of 6,000
files of 600 bytes; `idle` rewrites one file of the page in a loop for 5 s;
`collect` does the same and, after 2 s, writes l/p to MNT/.collect. Each
prints the writes' count and their longest and 99th-percentile times, over
the whole run and over the writes that began during the collection.
"""

import os
import sys
import threading
import time

mnt, mode = sys.argv[1], sys.argv[2]
page = os.path.join(mnt, "l", "p")
if mode == "setup":
    for _ in range(3):
        for i in range(6000):
            with open(os.path.join(page, str(i)), "wb") as f:
                f.write(os.urandom(600))
    fd = os.open(page, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    sys.exit(0)

stop = False
took = []  # (start, seconds)


def writer():
    while not stop:
        t = time.monotonic()
        with open(os.path.join(page, "w"), "wb") as f:
            f.write(os.urandom(100))
        took.append((t, time.monotonic() - t))


th = threading.Thread(target=writer)
th.start()
try:
    time.sleep(2)
    t0 = time.monotonic()
    if mode == "collect":
        with open(os.path.join(mnt, ".collect"), "w") as f:
            f.write("l/p\n")
    t1 = time.monotonic()
    time.sleep(1 if mode == "collect" else 3)
finally:
    stop = True  # the writer ends with the run, even one that failed
    th.join()


def stats(xs):
    xs = sorted(xs)
    if not xs:
        return "none"
    return f"{len(xs)} writes, longest {xs[-1]*1000:.1f} ms, p99 {xs[int(len(xs)*.99)]*1000:.1f} ms"


print(f"{mode}: .collect took {t1-t0:.2f} s; all: {stats(l for _, l in took)};",
      f"during: {stats(l for t, l in took if t0 <= t <= t1)}")
