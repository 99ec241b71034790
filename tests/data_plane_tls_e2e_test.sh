#!/usr/bin/env bash
# Issue 11, real processes: --data_plane_tls. On 127.0.0.1 with OS-chosen
# ports and mutual TLS (certificates from deploy/certs.sh): a lockstep-server
# ps shard, a coordinator (--ps_addresses = that shard) and two workers.
#   A  the cluster without --data_plane_tls: a K=2 ring job over raw TCP
#      and a K=2 ps job over --ps_transport=tcp; their final hashes;
#   B  the same cluster with --data_plane_tls on every daemon: the same two
#      jobs SUCCEED with the same hashes (TLS changes no byte the
#      collectives see);
#   C  a stranger with a worker certificate from another CA at a B worker's
#      data port: refused in the handshake, logged naming its address;
#   D  --data_plane_tls with no --ps_addresses (the coordinator's own shard,
#      which holds a coordinator certificate): the ps job has A's hash.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"; PS="$4"; CERTS="$5"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=20
source "$(dirname "$0")/e2e_lib.sh"
command -v openssl >/dev/null || fail "openssl not installed (deploy/setup.sh installs it)"
t_start=$(now_ms)

mkdir -p "$T/data"
write_blobs "$T/data" 11 400 60 8
bash "$CERTS" --out="$T/pki" 2>/dev/null || fail "certs.sh"
bash "$CERTS" --out="$T/other" 2>/dev/null || fail "certs.sh (other CA)"
PKI="$T/pki"
cli() { "$CLI" --coordinator="$C" $(tls "$PKI" client) --token_file="$PKI/token" "$@"; }

BASE=(--workers=2 --model=mlp:32,32 --dataset='csv:train.csv;test.csv' --batch=32 --steps=400
      --lr=0.05 --optimizer=sgd --momentum=0.9 --seed=9 --eval_each_epoch=false)
RING=(--sync=ring --peer_transport=tcp)
PSJ=(--sync=ps --ps_transport=tcp)

start() {  # NAME EXTRA_DAEMON_FLAGS [own: no --ps_addresses, ps jobs use the coordinator's shard]
  local n="$1" extra="$2" own="${3:-}"
  "$PS" --listen=127.0.0.1:0 --port_file="$T/$n.ps.port" --metrics_port=-1 \
    $(tls "$PKI" server) $extra 2>"$T/$n.ps.log" & pids+=($!)
  wait_file "$T/$n.ps.port"
  "$COORD" --listen=127.0.0.1:0 --port_file="$T/$n.coord.port" --metrics_port=-1 \
    $([ "$own" = own ] || echo "--ps_addresses=127.0.0.1:$(cat "$T/$n.ps.port")") $(tls "$PKI" coordinator) \
    --token_file="$PKI/token" $extra 2>"$T/$n.coord.log" & pids+=($!)
  wait_file "$T/$n.coord.port"
  C="127.0.0.1:$(cat "$T/$n.coord.port")"
  for i in 1 2; do
    "$WORKER" --coordinator="$C" --data_dir="$T/data" --port_file="$T/$n.w$i.port" \
      --metrics_port=-1 $(tls "$PKI" worker) $extra 2>"$T/$n.w$i.log" & pids+=($!)
    wait_file "$T/$n.w$i.port"
    # One at a time: registration order gives the ids (w-1 is $n.w1.log's).
    for _ in $(seq 200); do [ "$(cli workers | grep -c IDLE)" = "$i" ] && break; sleep 0.05; done
    [ "$(cli workers | grep -c IDLE)" = "$i" ] || fail "$n: worker $i did not register: $(cli workers)"
  done
  for _ in $(seq 200); do [ "$(cli workers | grep -c IDLE)" = 2 ] && return 0; sleep 0.05; done
  fail "$n: workers not idle: $(cli workers)"
}
run_job() {  # flags...; prints the final hash
  local out
  out=$(cli submit "${BASE[@]}" "$@" --follow --json) || fail "submit $* exit $?: $out"
  [ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "job $*: $out"
  json "d['final_hash']" <<<"$out"
}

start plain ""
ring_plain=$(run_job "${RING[@]}") || exit 1
ps_plain=$(run_job "${PSJ[@]}") || exit 1
echo "A plain data plane: ring/tcp $ring_plain, ps/tcp $ps_plain"
cleanup; pids=()

start tls "--data_plane_tls"
ring_tls=$(run_job "${RING[@]}") || exit 1
ps_tls=$(run_job "${PSJ[@]}") || exit 1
echo "B --data_plane_tls: ring/tcp $ring_tls, ps/tcp $ps_tls"
[ -n "$ring_plain" ] && [ "$ring_tls" = "$ring_plain" ] \
  || fail "ring/tcp over TLS: final hash $ring_tls, plain $ring_plain"
[ -n "$ps_plain" ] && [ "$ps_tls" = "$ps_plain" ] \
  || fail "ps/tcp over TLS: final hash $ps_tls, plain $ps_plain"

# C: a stranger holding a worker certificate from another CA connects to a
# B worker's data port (Python's ssl, TLS 1.3): refused in the handshake and
# logged naming its own address.
W1_DATA=$(cli workers | awk '$1 == "w-1" {print $3}')
[ -n "$W1_DATA" ] || fail "no data address for w-1: $(cli workers)"
from=$(python3 - "$W1_DATA" "$T/other" "$PKI/ca.pem" <<'PY'
import socket, ssl, sys
host, port = sys.argv[1].rsplit(":", 1)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
ctx.check_hostname = False
ctx.load_verify_locations(sys.argv[3])
ctx.load_cert_chain(sys.argv[2] + "/worker.pem", sys.argv[2] + "/worker.key")
s = socket.create_connection((host, int(port)), timeout=10)
print("%s:%d" % s.getsockname()[:2])
try:
    t = ctx.wrap_socket(s)
    t.recv(1)  # the acceptor's alert (or end of stream): never its challenge
    sys.exit("the other CA's certificate was accepted")
except (ssl.SSLError, OSError):
    pass
PY
) || fail "stranger: $from"
for _ in $(seq 200); do
  grep -qF "connection from $from: TLS handshake failed" "$T/tls.w1.log" && break
  sleep 0.05
done
grep -m1 -F "connection from $from: TLS handshake failed" "$T/tls.w1.log" | cut -c1-300 | grep . \
  || fail "w1 did not log the handshake from $from as refused: $(tail -5 "$T/tls.w1.log")"
cleanup; pids=()

# D: the coordinator's own shard over --data_plane_tls (the worker expects
# the coordinator's certificate there, a server certificate at a
# lockstep-server shard): the ps job SUCCEEDS with A's hash.
start own "--data_plane_tls" own
ps_own=$(run_job "${PSJ[@]}") || exit 1
[ -n "$ps_plain" ] && [ "$ps_own" = "$ps_plain" ] \
  || fail "ps/tcp over TLS on the coordinator's shard: final hash $ps_own, plain $ps_plain"
echo "D --data_plane_tls, the coordinator's own shard: ps/tcp $ps_own"
echo "total $(( $(now_ms) - t_start )) ms"
echo PASS
