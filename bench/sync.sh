#!/usr/bin/env bash
# Measures ledgerfs sync against a real S3 server on 127.0.0.1 (versitygw,
# from $LEDGERFS_TEST_VERSITYGW or PATH or built with go install into
# ~/.cache/ledgerfs-test; MinIO instead with MINIO=PATH-OF-ITS-BINARY): a
# 1 GiB file pushed to an encrypted store, to an unencrypted one
# (--no-encryption) and by a plain PUT of the same bytes by curl to the same
# server (time, requests, bytes); the bytes a
# 1-byte edit of it pushes; 10,000 small files pushed and pulled; with two
# mounts syncing in the background at their defaults, the time from a close
# on one to the content being readable on the other (20 changes a run); the
# first read of a 4 KiB file and of the big file on the second device, whose
# pull left contents in the remote, against a plain GET by curl; the big
# file read twice by a third device with a --cache-size; and
# the requests per minute of a mount of 100 pages in the 30 s after a change
# and once idle (versitygw only: it logs each request). Medians of RUNS
# (3) runs.
#
#   bench/sync.sh [WORKDIR]          (as root, for the mounts that write the data)
#
# SIZE_MIB (1024), FILES (10000) and CACHE_MIB (256, the --cache-size of a
# third device that reads the big file twice) scale it.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d /tmp/ledgerfs-syncbench.XXXXXX)}
SIZE_MIB=${SIZE_MIB:-1024} FILES=${FILES:-10000} RUNS=${RUNS:-3} CACHE_MIB=${CACHE_MIB:-256}
mkdir -p "$work"
go build -o "$work/ledgerfs" ./cmd/ledgerfs
. bench/s3.sh
buckets=()
for b in $(seq "$RUNS"); do buckets+=("bench$b"); done
s3_start "${buckets[@]}"
vpid=$s3pid
mnt=$work/mnt lpid= mnt2=$work/mnt2 lpid2=
cleanup() {
  if mountpoint -q "$mnt"; then umount "$mnt" || true; fi
  if mountpoint -q "$mnt2"; then umount "$mnt2" || true; fi
  [ -z "$lpid" ] || wait "$lpid" 2>/dev/null || true
  [ -z "$lpid2" ] || wait "$lpid2" 2>/dev/null || true
  kill "$vpid" 2>/dev/null || true
  rm -rf "$work/s3" "$work"/repo-* "$work/big.bin"
}
trap cleanup EXIT

now() { date +%s.%N; }
mountrepo() { mkdir -p "$mnt"; "$work/ledgerfs" mount "${@:2}" "$1" "$mnt" >"$work/mount.log" 2>&1 & lpid=$!; for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done; }
unmountrepo() { umount "$mnt"; wait "$lpid"; lpid=; }
# MinIO keeps an object as a directory with an xl.meta (and its parts).
if [ -n "${MINIO:-}" ]; then objects() { find "$work/s3/$1" -name xl.meta 2>/dev/null | wc -l; }
else objects() { find "$work/s3/$1" -type f 2>/dev/null | wc -l; }; fi
bytes() { du -sb "$work/s3/$1" 2>/dev/null | cut -f1; }
out="$work/figures.tsv"
: >"$out"
put() { printf '%s\t%s\n' "$1" "$2" >>"$out"; }

head -c "${SIZE_MIB}M" /dev/urandom >"$work/big.bin"
for run in $(seq "$RUNS"); do
  echo "run $run" >&2
  bucket=bench$run
  rm -rf "$work/repo-a$run" "$work/repo-b$run"
  mountrepo "$work/repo-a$run"
  mkdir -p "$mnt/home/work"
  cp "$work/big.bin" "$mnt/home/work/big.bin"
  head -c 4096 /dev/urandom >"$mnt/home/work/small.bin"
  unmountrepo
  cp -a "$work/repo-a$run" "$work/repo-p$run"
  s=$(now); "$work/ledgerfs" sync "$work/repo-p$run" --remote "s3://$bucket/plain" --endpoint "$endpoint" --no-encryption >/dev/null; e=$(now)
  put "push of a ${SIZE_MIB} MiB file, unencrypted, s" "$(echo "$e-$s" | bc -l)"
  rm -rf "$work/repo-p$run"
  s=$(now); "$work/ledgerfs" sync "$work/repo-a$run" --remote "s3://$bucket/a" --endpoint "$endpoint" >/dev/null; e=$(now)
  put "push of a ${SIZE_MIB} MiB file, encrypted, s" "$(echo "$e-$s" | bc -l)"
  put "push of a ${SIZE_MIB} MiB file, objects" "$(objects "$bucket/a")"
  put "push of a ${SIZE_MIB} MiB file, MiB stored" "$(echo "$(bytes "$bucket/a")/1048576" | bc -l)"
  s=$(now); curl -s -f --aws-sigv4 "aws:amz:us-east-1:s3" --user bench:bench-secret -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$work/big.bin" "$endpoint/$bucket/raw.bin"; e=$(now)
  put "plain PUT of the same bytes by curl, s" "$(echo "$e-$s" | bc -l)"
  s=$(now); "$work/ledgerfs" sync "$work/repo-b$run" --remote "s3://$bucket/a" --endpoint "$endpoint" >/dev/null; e=$(now)
  put "pull of it on a second device, s" "$(echo "$e-$s" | bc -l)"
  # That pull brought the tree: the contents are fetched when first read,
  # through a mount of the second device.
  mountrepo "$work/repo-b$run"
  put "first read of a 4 KiB file there (fetched), ms" "$(python3 -c '
import sys, time
s = time.monotonic()
with open(sys.argv[1], "rb") as f:
    assert len(f.read()) == 4096
print((time.monotonic() - s) * 1000)' "$mnt/home/work/small.bin")"
  s=$(now); cat "$mnt/home/work/big.bin" >/dev/null; e=$(now)
  put "first read of the ${SIZE_MIB} MiB file there (fetched), s" "$(echo "$e-$s" | bc -l)"
  sync; echo 3 >/proc/sys/vm/drop_caches
  s=$(now); cat "$mnt/home/work/big.bin" >/dev/null; e=$(now)
  put "second read of it (local), s" "$(echo "$e-$s" | bc -l)"
  unmountrepo
  # A third device reads it twice through a mount whose --cache-size is
  # CACHE_MIB: the repository's disk after each read, and the second
  # read's time (the file is larger than the cache: fetched again).
  "$work/ledgerfs" sync "$work/repo-c$run" --remote "s3://$bucket/a" --endpoint "$endpoint" >/dev/null
  mountrepo "$work/repo-c$run" --cache-size "${CACHE_MIB}MiB"
  for k in first second; do
    sync; echo 3 >/proc/sys/vm/drop_caches
    s=$(now); cat "$mnt/home/work/big.bin" >/dev/null; e=$(now)
    put "$k read of it with --cache-size ${CACHE_MIB}MiB, s" "$(echo "$e-$s" | bc -l)"
    # (the cache drops files while du walks: it says so on stderr)
    put "repository on disk after the $k read, MiB" "$(( $(du -s --block-size=1M "$work/repo-c$run" 2>/dev/null | cut -f1) ))"
  done
  unmountrepo
  rm -rf "$work/repo-c$run"
  s=$(now); curl -s -f --aws-sigv4 "aws:amz:us-east-1:s3" --user bench:bench-secret -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -o /dev/null "$endpoint/$bucket/raw.bin"; e=$(now)
  put "plain GET of the same bytes by curl, s" "$(echo "$e-$s" | bc -l)"

  # The repository keeps its remote now: the mount itself pushes what it
  # wrote (at the latest when it unmounts), the sync after finds the rest.
  before=$(bytes "$bucket/a")
  mountrepo "$work/repo-a$run"
  printf 'X' | dd of="$mnt/home/work/big.bin" bs=1 seek=$((SIZE_MIB * 1048576 / 2)) conv=notrunc 2>/dev/null
  unmountrepo
  "$work/ledgerfs" sync "$work/repo-a$run" >/dev/null
  put "1-byte edit: KiB stored" "$(echo "($(bytes "$bucket/a")-$before)/1024" | bc -l)"

  o=$(objects "$bucket/a")
  s=$(now)
  mountrepo "$work/repo-a$run"
  mkdir -p "$mnt/home/small"
  python3 - "$mnt/home/small" "$FILES" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, "f%05d" % i), "wb") as f:
        f.write(os.urandom(2048))
PY
  unmountrepo
  "$work/ledgerfs" sync "$work/repo-a$run" >/dev/null; e=$(now)
  put "$FILES 2 KiB files written, unmounted, pushed, s" "$(echo "$e-$s" | bc -l)"
  put "push of $FILES 2 KiB files, objects" "$(( $(objects "$bucket/a") - o ))"
  s=$(now); "$work/ledgerfs" sync "$work/repo-b$run" >/dev/null; e=$(now)
  put "pull of them on the second device, s" "$(echo "$e-$s" | bc -l)"

  # Two mounts syncing in the background, at their defaults.
  mkdir -p "$mnt" "$mnt2"
  "$work/ledgerfs" mount --remote "s3://$bucket/live" --endpoint "$endpoint" "$work/repo-l1$run" "$mnt" >"$work/mount1.log" 2>&1 & lpid=$!
  "$work/ledgerfs" mount --remote "s3://$bucket/live" --endpoint "$endpoint" "$work/repo-l2$run" "$mnt2" >"$work/mount2.log" 2>&1 & lpid2=$!
  for _ in $(seq 100); do mountpoint -q "$mnt" && mountpoint -q "$mnt2" && break; sleep 0.1; done
  mkdir -p "$mnt/home/live"
  python3 - "$mnt/home/live" "$mnt2/home/live" >"$work/latency.json" <<'PY'
import json, os, random, sys, time
a, b = sys.argv[1], sys.argv[2]
lat = []
rng = random.Random(1)
for i in range(20):
    # At a random moment: right after the other mount's poll, a change
    # would wait a whole --sync-every.
    time.sleep(rng.uniform(0, 2.5))
    want = b"change %d\n" % i
    with open(os.path.join(a, "f"), "wb") as f:
        f.write(want)
    start = time.monotonic()
    while True:
        try:
            with open(os.path.join(b, "f"), "rb") as f:
                if f.read() == want:
                    break
        except OSError:
            pass
        if time.monotonic() - start > 60:
            sys.exit("change %d not on the second mount within 60 s" % i)
        time.sleep(0.005)
    lat.append(time.monotonic() - start)
lat.sort()
print(json.dumps({"p50": lat[len(lat) // 2], "p99": lat[-1]}))
PY
  put "close on one mount to readable on the other: p50 s" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["p50"])' "$work/latency.json")"
  put "close on one mount to readable on the other: p99 s" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["p99"])' "$work/latency.json")"
  if [ "$run" = 1 ] && [ -z "${MINIO:-}" ]; then
    # An idle mount of 100 pages: its requests in 30 s, once the pages
    # are synced, counted in the server's log (one line each).
    for i in $(seq 100); do mkdir -p "$mnt/idle/p$i"; echo "$i" >"$mnt/idle/p$i/f"; done
    for _ in $(seq 600); do
      left=$(grep -L "waiting to upload: nothing" "$mnt"/idle/p*/.ledger/sync | wc -l)
      [ "$left" = 0 ] && break; sleep 0.1
    done
    umount "$mnt2"; wait "$lpid2"; lpid2=
    # For 30 s after its last change the mount syncs every 0.5 s, then
    # every --sync-every (2 s): both rates, the second once it is idle.
    before=$(wc -l <"$work/versitygw.log"); sleep 30; after=$(wc -l <"$work/versitygw.log")
    put "mount of 100 pages, first 30 s after a change: requests per minute" "$(( (after - before) * 2 ))"
    sleep 5
    before=$(wc -l <"$work/versitygw.log"); sleep 30; after=$(wc -l <"$work/versitygw.log")
    put "idle mount of 100 pages: requests per minute" "$(( (after - before) * 2 ))"
  fi
  umount "$mnt"; wait "$lpid"; lpid=
  if mountpoint -q "$mnt2"; then umount "$mnt2"; wait "$lpid2"; lpid2=; fi
done

python3 bench/medians.py "$out"
