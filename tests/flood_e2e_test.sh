#!/usr/bin/env bash
# Issue 11, real processes: "a flood of malformed messages at each daemon
# while a job trains: the job finishes with the same final hash as without
# the flood". On 127.0.0.1 with OS-chosen ports: a lockstep-server ps shard,
# a coordinator (--ps_addresses = that shard) and two workers, in plain text
# (--insecure).
#   1  a K=2 ring job over raw TCP runs without a flood: its final hash H1;
#   2  the same job again; once it has stepped, tests/flood.py floods every
#      port of every daemon (coordinator gRPC + its shard's TCP data port,
#      each worker's gRPC and raw-TCP data port, the ps server's gRPC and TCP
#      data port): malformed protos through a generic call to every method,
#      requests naming another job/worker/step, oversized messages, random
#      bytes, cut and forged hellos and frame headers (flood.py's header).
#      The flood goes round after round (0.5 s apart) until the job has
#      ended; at least one whole round must end while the job runs (checked).
#      No flooded request was obeyed (flood.py exits 1 on an OK), the job
#      SUCCEEDS with H1;
#   3  the same for a K=2 ps job over --ps_transport=tcp on the lockstep-server
#      shard: SUCCEEDED with its unflooded hash;
#   4  every daemon is still up and SERVING (lockstep health), and the logs of
#      the coordinator, both workers and the ps server have "request refused"
#      lines naming a 127.0.0.1 peer (common/grpcutil/refusal_log.h).
# With a 6th argument "tls" (and deploy/certs.sh as the 7th: the
# flood_tls_e2e_test target) the same on a cluster secured as deployed:
# mutual TLS on every gRPC channel, the coordinator's bearer token, and
# --data_plane_tls on both raw-TCP data planes; the flood comes from an
# insider holding a valid worker certificate (no worker token, no bearer
# token), its raw-TCP bytes meet TLS handshakes. Ring job only.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"; PS="$4"; FLOOD="$5"; MODE="${6:-plain}"; CERTS_SH="${7:-}"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=25
source "$(dirname "$0")/e2e_lib.sh"
if [ "$MODE" = tls ]; then
  bash "$CERTS_SH" --out="$T/pki" 2>/dev/null || fail "certs.sh"
  SEC_PS="$(tls "$T/pki" server) --data_plane_tls"
  SEC_COORD="$(tls "$T/pki" coordinator) --token_file=$T/pki/token --data_plane_tls"
  SEC_WORKER="$(tls "$T/pki" worker) --data_plane_tls"
  SEC_CLI="$(tls "$T/pki" client) --token_file=$T/pki/token"
  FLOOD_TLS=(--tls_dir="$T/pki" --tls_role=worker)
else
  SEC_PS=--insecure SEC_COORD=--insecure SEC_WORKER=--insecure SEC_CLI=--insecure
  FLOOD_TLS=()
fi
# shellcheck disable=SC2086  # SEC_* are lists of flags
cli() { "$CLI" $SEC_CLI --coordinator="$C" "$@"; }
# shellcheck disable=SC2086
health() { "$CLI" $SEC_CLI --coordinator="$1" health --timeout_ms=2000; }
write_blobs "$T" 11 2000 200 16
DATA='csv:train.csv;test.csv'
t_start=$(now_ms)

# shellcheck disable=SC2086
"$PS" $SEC_PS --listen=127.0.0.1:0 --port_file="$T/ps.port" --metrics_port=-1 \
  2>"$T/ps.log" & pids+=($!); ps_pid=$!
wait_file "$T/ps.port"
P="127.0.0.1:$(cat "$T/ps.port")"
# shellcheck disable=SC2086
"$COORD" $SEC_COORD --listen=127.0.0.1:0 --port_file="$T/coord.port" --metrics_port=-1 \
  --ps_addresses="$P" 2>"$T/coord.log" & pids+=($!); coord_pid=$!
wait_file "$T/coord.port"
C="127.0.0.1:$(cat "$T/coord.port")"
for i in 1 2; do
  # shellcheck disable=SC2086
  "$WORKER" $SEC_WORKER --coordinator="$C" --data_dir="$T" --port_file="$T/w$i.port" \
    --metrics_port=-1 2>"$T/w$i.log" & pids+=($!)
  wpid[$i]=$!
  wait_file "$T/w$i.port"
  wait_until $(( $(now_ms) + 10000 )) idle "w-$i" || fail "w-$i not IDLE: $(cli workers)"
done
# w-N ADDRESS DATA_ADDRESS ... (lockstep workers)
targets=("coordinator@$C" "ps@$P")
while read -r id addr data _; do
  targets+=("worker@$addr" "tcp@$data")
done < <(cli workers | grep -E '^w-[12] ')
[ "${#targets[@]}" = 6 ] || fail "expected 2 workers with data addresses: $(cli workers)"
echo "flood targets: ${targets[*]}"

# run_job NAME FLOOD SUBMIT_ARGS...: submits, optionally floods once the job
# has stepped, waits for the end; writes the final hash to $T/NAME.hash.
run_job() {
  local name=$1 flood=$2; shift 2
  local id t0 fl_ms
  id=$(cli submit "$@") || fail "$name: submit: $id"
  t0=$(now_ms)
  wait_until $(( $(now_ms) + 30000 )) stepped "$id" 3 || fail "$name: job $id never stepped"
  if [ "$flood" = flood ]; then
    # Round after round at every target until the job has finished; at
    # least one whole round must end while the job still runs.
    local f0 fpid rounds; f0=$(now_ms)
    /usr/bin/python3 "$FLOOD" --rounds=20 --seed="$RANDOM" --out="$T/$name.flood.json" \
      --until="$T/$name.stop" --progress="$T/$name.rounds" "${FLOOD_TLS[@]}" "${targets[@]}" \
      >"$T/$name.flood.out" 2>&1 &
    fpid=$!; pids+=($fpid)
    wait_until $(( $(now_ms) + 180000 )) finished "$id" || fail "$name: job $id not finished"
    rounds=$(cat "$T/$name.rounds" 2>/dev/null || echo 0)
    touch "$T/$name.stop"
    fl_ms=$(( $(now_ms) - f0 ))
    wait "$fpid" || { cat "$T/$name.flood.out"; fail "$name: flood.py failed"; }
    sed 's/^/  /' "$T/$name.flood.out"
    [ "$rounds" -ge 1 ] || fail "$name: the job ended before one round of the flood did"
    # Malformed requests are the caller's error: INVALID_ARGUMENT naming the
    # method, never gRPC's INTERNAL or UNIMPLEMENTED (refusal_log.h).
    python3 - "$T/$name.flood.json" <<'PY' || fail "$name: a gRPC target answered INTERNAL or UNIMPLEMENTED"
import json, sys
bad = {t: {c: n for c, n in codes.items() if c in ("INTERNAL", "UNIMPLEMENTED")}
       for t, codes in json.load(open(sys.argv[1])).items()}
bad = {t: c for t, c in bad.items() if c}
print("  INTERNAL/UNIMPLEMENTED answers:", bad or "none")
sys.exit(1 if bad else 0)
PY
    echo "$name: $rounds whole flood round(s) during the job's last $fl_ms ms"
  fi
  finish_job "$name" "$id" "$t0"
}

RING=(--workers=2 --peer_transport=tcp --model=mlp:256,256 --dataset="$DATA" --batch=64
      --steps=4000 --seed=5)
PSJOB=(--workers=2 --sync=ps --ps_transport=tcp --model=mlp:256,256 --dataset="$DATA"
       --batch=64 --steps=3500 --seed=6)
same_hash_with_and_without ring-tcp run_job quiet flood "${RING[@]}"
[ "$MODE" = tls ] || same_hash_with_and_without ps-tcp run_job quiet flood "${PSJOB[@]}"
jobs_expected=4; [ "$MODE" = tls ] && jobs_expected=2

# 4: every daemon up and serving, and naming the refused peers.
for p in "$ps_pid" "$coord_pid" "${wpid[1]}" "${wpid[2]}"; do
  kill -0 "$p" 2>/dev/null || fail "daemon pid $p died"
done
for a in "$C" "$P" $(cli workers | awk '/^w-[12] /{print $2}'); do
  [ "$(health "$a")" = SERVING ] || fail "$a not SERVING after the flood: $(health "$a")"
done
idle w-1 w-2 || fail "workers not IDLE after the jobs: $(cli workers)"
# Nothing the flood sent was obeyed: the same two workers, the four jobs.
[ "$(cli workers | grep -cE '^w-[0-9]+ ')" = 2 ] || fail "workers changed: $(cli workers)"
[ "$(cli jobs --json | json "len(d['jobs'])")" = "$jobs_expected" ] || fail "jobs changed: $(cli jobs)"
for f in coord ps w1 w2; do
  n=$(grep -c 'request refused .*peer=ipv4:127\.0\.0\.1:[0-9]' "$T/$f.log")
  [ "$n" -gt 0 ] || fail "$f.log names no refused peer"
  echo "$f.log: $n 'request refused' lines naming the peer; e.g.:"
  grep -m1 'request refused .*peer=ipv4:127\.0\.0\.1:' "$T/$f.log" | cut -c1-220
done
echo "total $(( $(now_ms) - t_start )) ms"
echo PASS
