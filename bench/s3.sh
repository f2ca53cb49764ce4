# Sourced by the sync benchmarks (bench/sync.sh, bench/repack.sh):
# s3_start BUCKET... starts an S3 server on 127.0.0.1 with its data under
# $work/s3 and its log in $work/versitygw.log: versitygw (from
# $LEDGERFS_TEST_VERSITYGW, PATH, or built with go install into
# ~/.cache/ledgerfs-test), or MinIO with MINIO=PATH-OF-ITS-BINARY, whose
# buckets it makes (versitygw's, ledgerfs makes). It sets endpoint and s3pid,
# and exports the credentials ledgerfs and curl use.
s3_start() {
  export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
  export LEDGERFS_PASSWORD=bench-passphrase
  local port vgw b
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  endpoint=http://127.0.0.1:$port
  mkdir -p "$work/s3"
  if [ -n "${MINIO:-}" ]; then
    MINIO_ROOT_USER=bench MINIO_ROOT_PASSWORD=bench-secret "$MINIO" server --quiet --address "127.0.0.1:$port" "$work/s3" >"$work/versitygw.log" 2>&1 &
    s3pid=$!
    for _ in $(seq 300); do curl -s -o /dev/null "$endpoint/minio/health/live" && break; sleep 0.1; done
    for b in "$@"; do curl -s -f --aws-sigv4 "aws:amz:us-east-1:s3" --user bench:bench-secret -X PUT "$endpoint/$b" >/dev/null; done
  else
    vgw=${LEDGERFS_TEST_VERSITYGW:-$(command -v versitygw || true)}
    if [ -z "$vgw" ]; then
      vgw="${XDG_CACHE_HOME:-$HOME/.cache}/ledgerfs-test/versitygw-v1.8.0/versitygw"
      [ -x "$vgw" ] || GOBIN=$(dirname "$vgw") GOFLAGS=-buildvcs=false go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
    fi
    "$vgw" --access bench --secret bench-secret --port "127.0.0.1:$port" posix "$work/s3" >"$work/versitygw.log" 2>&1 &
    s3pid=$!
  fi
  for _ in $(seq 100); do curl -s -o /dev/null "$endpoint" && break; sleep 0.1; done
}
