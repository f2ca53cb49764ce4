#!/usr/bin/env bash
# Measures what the server writes to the disk for a page's first fsync: a
# mount of a new repository, one warm-up page, then PAGES (50) new pages,
# each with one 100-byte file written and fsynced. Prints the server's
# write_bytes (/proc/PID/io) per page and the sizes of the pages' sync logs.
# BIN names a built ledgerfs to measure instead of this checkout's.
#
#   bench/pagewrites.sh [WORKDIR]     (as root, or a user who may mount)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d /tmp/ledgerfs-pagewrites.XXXXXX)}
PAGES=${PAGES:-50}
mkdir -p "$work/mnt"
bin=${BIN:-$work/ledgerfs}
[ -n "${BIN:-}" ] || go build -o "$bin" ./cmd/ledgerfs
"$bin" mount -d --log-file "$work/server.log" "$work/repo" "$work/mnt"
trap '"$bin" umount "$work/mnt" || true' EXIT
pid=$(pgrep -f -- "mount -d --log-file $work/server.log" | head -1)

fsync_file() { # DIR
  mkdir -p "$1"
  python3 -c 'import os,sys
fd = os.open(sys.argv[1] + "/f", os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"y" * 100); os.fsync(fd); os.close(fd)' "$1"
}

fsync_file "$work/mnt/l/warm"
w0=$(awk '/^write_bytes/ {print $2}' "/proc/$pid/io")
for i in $(seq 1 "$PAGES"); do fsync_file "$work/mnt/l/p$i"; done
w1=$(awk '/^write_bytes/ {print $2}' "/proc/$pid/io")
echo "server write_bytes per page: $(( (w1 - w0) / PAGES )) ($PAGES pages, $(( w1 - w0 )) in all)"
echo "sync log sizes (bytes, count):"
find "$work/repo" -name ledgerfs-sync.log -printf '%s\n' | sort -n | uniq -c
