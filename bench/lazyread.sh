#!/usr/bin/env bash
# Measures the first read of a large file on a device whose pull left its
# contents in the remote (a lazy read), against curl's GET of the same
# bytes from the same S3 server (versitygw on 127.0.0.1, as bench/sync.sh
# finds or builds it). For each ledgerfs binary given, in turn, RUNS times
# (3): a mount writes SIZE_MIB (1024) MiB of random bytes, `ledgerfs sync`
# pushes it to an encrypted store and pulls it on a second repository, the
# kernel's caches are dropped, and `cat` reads it through a mount of the
# second; then curl GETs the same bytes. Prints one line per run: the
# read's seconds, the mount's CPU-seconds and the S3 server's during the
# read, the GET's seconds and the S3 server's CPU-seconds during it. On a
# machine of few cores the two processes' CPU together bound the read.
#
#   bench/lazyread.sh BINARY...          (as root: mounts, drop_caches)
set -euo pipefail
RUNS=${RUNS:-3} SIZE_MIB=${SIZE_MIB:-1024}
vgw=${LEDGERFS_TEST_VERSITYGW:-$(command -v versitygw || true)}
if [ -z "$vgw" ]; then
  vgw="${XDG_CACHE_HOME:-$HOME/.cache}/ledgerfs-test/versitygw-v1.8.0/versitygw"
  [ -x "$vgw" ] || GOBIN=$(dirname "$vgw") GOFLAGS=-buildvcs=false go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
fi
work=$(mktemp -d /tmp/ledgerfs-lazyread.XXXXXX)
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1 LEDGERFS_PASSWORD=bench-passphrase
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ep=http://127.0.0.1:$port
mkdir -p "$work/s3" "$work/mnt"
"$vgw" --access bench --secret bench-secret --port "127.0.0.1:$port" posix "$work/s3" >"$work/versitygw.log" 2>&1 &
vpid=$!
mnt=$work/mnt lpid=
cleanup() {
  if mountpoint -q "$mnt"; then umount "$mnt" || true; fi
  [ -z "$lpid" ] || wait "$lpid" 2>/dev/null || true
  kill "$vpid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 100); do curl -s -o /dev/null "$ep" && break; sleep 0.1; done
head -c "${SIZE_MIB}M" /dev/urandom >"$work/big.bin"
now() { date +%s.%N; }
scpu() { awk '{print ($14+$15)/100}' "/proc/$1/stat"; } # a process's CPU-seconds so far
mountrepo() { "$1" mount "${@:3}" "$2" "$mnt" >"$work/mount.log" 2>&1 & lpid=$!; for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done; }
n=0
for run in $(seq "$RUNS"); do
  for bin in "$@"; do
    n=$((n + 1)) b=lazy$n
    mountrepo "$bin" "$work/a$n"
    mkdir -p "$mnt/home/work"
    cp "$work/big.bin" "$mnt/home/work/big.bin"
    umount "$mnt"; wait "$lpid"; lpid=
    "$bin" sync "$work/a$n" --remote "s3://$b/a" --endpoint "$ep" >/dev/null
    "$bin" sync "$work/b$n" --remote "s3://$b/a" --endpoint "$ep" >/dev/null
    curl -s -f --aws-sigv4 "aws:amz:us-east-1:s3" --user bench:bench-secret -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$work/big.bin" "$ep/$b/raw.bin"
    sync; echo 3 >/proc/sys/vm/drop_caches
    mountrepo "$bin" "$work/b$n"
    v0=$(scpu "$vpid")
    s=$(now); cat "$mnt/home/work/big.bin" >/dev/null; e=$(now)
    v1=$(scpu "$vpid")
    cpu=$(scpu "$lpid")
    umount "$mnt"; wait "$lpid"; lpid=
    s2=$(now); curl -s -f --aws-sigv4 "aws:amz:us-east-1:s3" --user bench:bench-secret -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -o /dev/null "$ep/$b/raw.bin"; e2=$(now)
    v2=$(scpu "$vpid")
    printf '%s\trun %d\tlazy read %.2f s\tmount CPU %.2f s\tS3 server CPU %.2f s\tGET %.2f s\tS3 server CPU %.2f s\n' "$bin" "$run" \
      "$(echo "$e-$s" | bc -l)" "$cpu" "$(echo "$v1-$v0" | bc -l)" "$(echo "$e2-$s2" | bc -l)" "$(echo "$v2-$v1" | bc -l)"
    rm -rf "$work/a$n" "$work/b$n"
  done
done
