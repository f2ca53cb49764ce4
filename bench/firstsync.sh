#!/usr/bin/env bash
# Measures a new device's first sync against a real S3 server on 127.0.0.1
# (versitygw, or MinIO with MINIO=PATH-OF-ITS-BINARY): a store whose 100
# pages of 20 files of 2 KiB were written in HISTORY (100) rounds, one file
# of each page a round, each round pushed by the mount before the next (a
# batch per page and round: 10,000 commits in 10,000 batches); the same
# content written in one round, in another store; and the first of them
# after `ledgerfs gc --remote`, whose collection writes a checkpoint. A new
# repository's `ledgerfs sync` of each, timed, RUNS (3) times each: the
# stores are written once. Medians. EVERY=0 skips the joins that read
# every batch (minutes each).
#
#   bench/firstsync.sh [WORKDIR]          (as root, for the mount that writes)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d /tmp/ledgerfs-firstsync.XXXXXX)}
RUNS=${RUNS:-3} HISTORY=${HISTORY:-100} PAGES=${PAGES:-100} EVERY=${EVERY:-1}
mkdir -p "$work"
go build -o "$work/ledgerfs" ./cmd/ledgerfs
. bench/s3.sh
s3_start first1
vpid=$s3pid
mnt=$work/mnt lpid=
cleanup() {
  if mountpoint -q "$mnt"; then umount "$mnt" || true; fi
  [ -z "$lpid" ] || wait "$lpid" 2>/dev/null || true
  kill "$vpid" 2>/dev/null || true
  rm -rf "$work/s3" "$work"/repo-*
}
trap cleanup EXIT

now() { date +%s.%N; }
out="$work/figures.tsv"
: >"$out"
put() { printf '%s\t%s\n' "$1" "$2" >>"$out"; }

# write REPO REMOTE ROUNDS: a mount of REPO syncing with REMOTE writes
# PAGES pages of 20 files in ROUNDS rounds (all 20 files in the first, one
# file of each page in each round after), each pushed before the next.
write() {
  mkdir -p "$mnt"
  "$work/ledgerfs" mount --remote "$2" --endpoint "$endpoint" "$1" "$mnt" >"$work/mount.log" 2>&1 & lpid=$!
  for _ in $(seq 150); do mountpoint -q "$mnt" && break; sleep 0.1; done
  python3 - "$mnt/home" "$PAGES" "$3" <<'PY'
import os, sys, time
home, pages, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def pushed():
    # The mount's status file of each page says when nothing waits.
    for p in range(pages):
        with open(os.path.join(home, "p%d" % p, ".ledger", "sync")) as f:
            if "waiting to upload: nothing" not in f.read():
                return False
    return True
for r in range(rounds):
    for p in range(pages):
        d = os.path.join(home, "p%d" % p)
        os.makedirs(d, exist_ok=True)
        for f in (range(20) if r == 0 else [r % 20]):
            with open(os.path.join(d, "f%d" % f), "wb") as fh:
                fh.write(os.urandom(2048))
    start = time.monotonic()
    while not pushed():
        if time.monotonic() - start > 120:
            sys.exit("round %d not pushed within 120 s" % r)
        time.sleep(0.05)
PY
  umount "$mnt"; wait "$lpid"; lpid=
}

# join NAME REMOTE: a new repository's first sync of REMOTE, timed.
join() {
  rm -rf "$work/repo-new"
  local s e
  s=$(now); "$work/ledgerfs" sync "$work/repo-new" --remote "$2" --endpoint "$endpoint" >"$work/join.log" 2>&1; e=$(now)
  put "$1" "$(echo "$e-$s" | bc -l)"
  rm -rf "$work/repo-new"
}

rm -rf "$work/repo-h" "$work/repo-c"
s=$(now); write "$work/repo-h" "s3://first1/history" "$HISTORY"; e=$(now)
put "writing $PAGES pages in $HISTORY rounds, each pushed, s" "$(echo "$e-$s" | bc -l)"
write "$work/repo-c" "s3://first1/content" 1
for run in $(seq "$RUNS"); do
  echo "run $run" >&2
  join "first sync, the content alone (1 round), s" "s3://first1/content"
  [ "$EVERY" = 0 ] || join "first sync, $HISTORY rounds of history, no collection (every batch), s" "s3://first1/history"
done
s=$(now); "$work/ledgerfs" gc --remote "$work/repo-h" >"$work/gc.log" 2>&1; e=$(now)
put "gc --remote of the history store (writes the checkpoint), s" "$(echo "$e-$s" | bc -l)"
for run in $(seq "$RUNS"); do
  join "first sync, $HISTORY rounds of history, after a collection (checkpoint), s" "s3://first1/history"
  grep -q "joined the store from a checkpoint" "$work/join.log" || { echo "the join after the collection did not use its checkpoint:" >&2; cat "$work/join.log" >&2; exit 1; }
done
rm -rf "$work/repo-h" "$work/repo-c"

python3 bench/medians.py "$out" 72
