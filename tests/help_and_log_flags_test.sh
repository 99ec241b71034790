#!/usr/bin/env bash
# Every binary's --help lists its own flags and the shared ones (job flags,
# logging flags) and exits 0; the daemons refuse a bad --log_format or
# --log_level with exit 2 naming the flag and the values it takes, and write
# one JSON object per line with --log_format=json.
#   help_and_log_flags_test.sh COORDINATOR WORKER PS_SERVER TRAIN CLIENT
set -uo pipefail
COORD=$1 WORKER=$2 PS=$3 TRAIN=$4 CLI=$5
T=$(mktemp -d "${TEST_TMPDIR:-/tmp}/help.XXXXXX")
fail() { echo "FAIL: $*"; exit 1; }

# help BINARY FLAG...: --help exits 0 on stdout, lists each --FLAG.
help() {
  local bin=$1; shift
  local out rc
  out=$("$bin" --help 2>"$T/err"); rc=$?
  [ "$rc" = 0 ] || fail "$(basename "$bin") --help exited $rc: $(cat "$T/err")"
  grep -q "No flags matched" <<<"$out" && fail "$(basename "$bin") --help: No flags matched"
  for f in "$@"; do
    grep -Eq "^    --$f \(" <<<"$out" || fail "$(basename "$bin") --help does not list --$f: $out"
  done
}
help "$COORD" listen advertise port_file heartbeat_ms lost_after_ms ps_addresses log_format log_level \
  insecure tls_cert tls_key tls_ca token_file
help "$WORKER" coordinator listen advertise data_port data_dir port_file combine_timeout_ms \
  log_format log_level insecure tls_cert tls_key tls_ca
help "$PS" role listen port_file max_jobs log_format log_level insecure tls_cert tls_key tls_ca
help "$TRAIN" model dataset batch epochs steps lr optimizer momentum decay seed sync json blas_threads
help "$CLI" coordinator json follow no_wait out model dataset batch epochs workers sync \
  peer_transport ps_shards optimizer lr job_file insecure tls_cert tls_key tls_ca token_file
# The client's help names the commands; the daemons' help has no job flags.
# (Through a file: with pipefail, grep -q exiting at the first match makes
# the writer die of SIGPIPE once the help text passes one 4 KiB stdio buffer.)
"$CLI" --help >"$T/cli_help.txt" || fail "lockstep --help: exit $?"
grep -q "submit takes the job flags" "$T/cli_help.txt" || fail "lockstep --help: no command summary"
"$WORKER" --help | grep -Eq '^    --model \(' && fail "lockstep-worker --help lists job flags"
# Abseil's other usage flags also exit 0.
"$COORD" --helpshort >/dev/null || fail "--helpshort exit code"
out=$("$WORKER" --helpmatch=data_port) || fail "--helpmatch exit code"
grep -q -- "--data_port" <<<"$out" || fail "--helpmatch=data_port: $out"

# bad_flag BINARY ARG TEXT: exit 2, stderr names the flag and the values.
bad_flag() {
  local err rc
  err=$("$1" "$2" 2>&1 >/dev/null); rc=$?
  [ "$rc" = 2 ] || fail "$(basename "$1") $2: exit $rc, want 2: $err"
  grep -qF -- "$3" <<<"$err" || fail "$(basename "$1") $2: want '$3' in: $err"
}
for b in "$COORD" "$WORKER" "$PS"; do
  bad_flag "$b" --log_format=xml '--log_format: expected text or json, got "xml"'
  bad_flag "$b" --log_level=loud '--log_level: expected debug, info, warn or error, got "loud"'
done

# JSON lines: the ps server's start-up and shutdown lines.
"$PS" --insecure --role=ps --listen=127.0.0.1:0 --port_file="$T/ps.port" --log_format=json 2>"$T/ps.log" &
pid=$!
for _ in $(seq 200); do [ -s "$T/ps.port" ] && break; sleep 0.05; done
[ -s "$T/ps.port" ] || { kill "$pid"; fail "ps server did not start: $(cat "$T/ps.log")"; }
port=$(cat "$T/ps.port")
kill -TERM "$pid"; wait "$pid"; rc=$?
[ "$rc" = 0 ] || fail "ps server exit $rc after SIGTERM"
ts='"ts":"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z"'
grep -Eqx "\{$ts,\"level\":\"INFO\",\"component\":\"ps\",\"msg\":\"listening\",\"role\":\"ps\",\"address\":\"127.0.0.1:$port\",\"port\":$port,\"data_port\":[0-9]+\}" "$T/ps.log" \
  || fail "no JSON listening line: $(cat "$T/ps.log")"
grep -Eqx "\{$ts,\"level\":\"INFO\",\"component\":\"ps\",\"msg\":\"shutting down\",\"signal\":\"SIGTERM\"\}" "$T/ps.log" \
  || fail "no JSON shutdown line: $(cat "$T/ps.log")"
[ "$(grep -cv '^{.*}$' "$T/ps.log")" = 0 ] || fail "non-JSON lines: $(cat "$T/ps.log")"
echo PASS
