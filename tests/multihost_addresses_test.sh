#!/usr/bin/env bash
# Across hosts without DNS: four network namespaces on a bridge, each with
# its own 10.x address and all sharing this machine's one host name (as
# cloned VMs and containers do). A coordinator and three workers run the
# README's by-hand commands:
#   A. defaults: every daemon listens on 0.0.0.0 with no --advertise. The
#      workers must show three distinct 10.x addresses (the IPs the
#      coordinator sees them call from, never the shared host name), and a
#      K=3 job trains to the end over ring tcp, ring grpc, ps and ps over
#      the shard's raw-TCP data plane (the coordinator's own shard, dialled
#      at the host the workers reach it at; its data port learned over
#      gRPC), every step in sync, one final hash across the four.
#   B. --advertise=10.x.0.N on every daemon, a bare host as a user would
#      first try: the bound port is added; the same three jobs, same hash.
#   C. two workers claiming one address (--advertise=vm): the second is
#      refused with ALREADY_EXISTS naming both, never swapped in.
#   D. a malformed --advertise is refused at start naming the flag.
# Needs root (ip netns); says SKIPPED loudly otherwise.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "SKIPPED: multihost_addresses_test needs root and iproute2 to create network namespaces"
  exit 0
fi
T="${TEST_TMPDIR:-$(mktemp -d)}"
# A /24 of our own per run (10.78.N.0/24, N from the pid).
NET="10.78.$(( $$ % 250 + 1 ))"
TAG="lsa$$"
source "$(dirname "$0")/netns_lib.sh"
fail() { echo "FAIL: $*"; for f in "$T"/*.log; do echo "== $f"; tail -5 "$f"; done; exit 1; }
netns_up "$NET" "$TAG" 4
C="$NET.1:7070"
cli() { on 1 "$CLI" --insecure --coordinator="$C" "$@"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }

stop_all() {
  for n in "${NETNS_LIST[@]}"; do
    for p in $(ip netns pids "$n" 2>/dev/null); do kill "$p" 2>/dev/null; done
  done
  for n in "${NETNS_LIST[@]}"; do
    for _ in $(seq 100); do [ -z "$(ip netns pids "$n" 2>/dev/null)" ] && break; sleep 0.05; done
  done
}
wait_workers() {  # $1 = expected number of IDLE workers
  for _ in $(seq 200); do
    [ "$(cli workers 2>/dev/null | grep -c IDLE)" = "$1" ] && return 0; sleep 0.05
  done
  fail "expected $1 idle workers: $(cli workers 2>&1)"
}
# start_cluster PHASE [extra coordinator flags] -- [per-worker advertise prefix]
start_cluster() {
  local phase=$1 cadv=$2 wadv=$3
  on 1 "$COORD" --insecure --listen=0.0.0.0:7070 $cadv 2>"$T/$phase-coord.log" &
  for _ in $(seq 200); do cli workers >/dev/null 2>&1 && break; sleep 0.05; done
  for i in 2 3 4; do
    local adv=""; [ -n "$wadv" ] && adv="--advertise=$wadv$i"
    on "$i" "$WORKER" --insecure --coordinator="$C" --listen=0.0.0.0:7071 --data_port=7072 $adv \
      2>"$T/$phase-w$i.log" &
  done
  wait_workers 3
}
run_jobs() {  # trains the same job over ring tcp, ring grpc, ps and ps tcp; prints the hashes
  local hashes=()
  for mode in "--sync=ring --peer_transport=tcp" "--sync=ring --peer_transport=grpc" "--sync=ps --ps_transport=grpc" \
      "--sync=ps --ps_transport=tcp"; do
    out=$(cli submit --workers=3 --model=softmax --steps=30 --batch=48 $mode --follow --json) \
      || fail "$1 $mode: exit $? $out"
    [ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "$1 $mode: $out"
    id=$(json "d['job_id']" <<<"$out")
    sy=$(cli sync "$id" --json --max_entries=0)
    [ "$(json "int(d['checked_steps'])" <<<"$sy")" = 30 ] || fail "$1 $mode sync: $sy"
    [ "$(json "int(d['mismatched_steps'])" <<<"$sy")" = 0 ] || fail "$1 $mode sync: $sy"
    hashes+=("$(json "d['final_hash']" <<<"$out")")
  done
  [ "${hashes[0]}" = "${hashes[1]}" ] && [ "${hashes[0]}" = "${hashes[2]}" ] \
    && [ "${hashes[0]}" = "${hashes[3]}" ] \
    || fail "$1: final hashes differ across tcp/grpc/ps/ps tcp: ${hashes[*]}"
  echo "${hashes[0]}"
}

echo "== A: defaults (0.0.0.0, no --advertise), one host name on every host"
start_cluster A "" ""
ws=$(cli workers --json)
addrs=$(json "sorted(w['address'] for w in d['workers'])" <<<"$ws")
[ "$addrs" = "['$NET.2:7071', '$NET.3:7071', '$NET.4:7071']" ] || fail "A: worker addresses $addrs"
daddrs=$(json "sorted(w['data_address'] for w in d['workers'])" <<<"$ws")
[ "$daddrs" = "['$NET.2:7072', '$NET.3:7072', '$NET.4:7072']" ] || fail "A: data addresses $daddrs"
hosts=$(json "sorted(set(w['hostname'] for w in d['workers']))" <<<"$ws")
[ "$hosts" = "['$(hostname)']" ] || fail "A: expected one shared host name, got $hosts"
hash_a=$(run_jobs A) || { echo "$hash_a"; exit 1; }
echo "A: ring tcp, ring grpc, ps and ps tcp all SUCCEEDED in sync, final hash $hash_a"
stop_all

echo "== B: --advertise=HOST without a port on every daemon"
start_cluster B "--advertise=$NET.1" "$NET."
addrs=$(cli workers --json | json "sorted(w['address'] for w in d['workers'])")
[ "$addrs" = "['$NET.2:7071', '$NET.3:7071', '$NET.4:7071']" ] || fail "B: worker addresses $addrs"
hash_b=$(run_jobs B) || { echo "$hash_b"; exit 1; }
[ "$hash_a" = "$hash_b" ] || fail "B: final hash $hash_b, defaults gave $hash_a"
echo "B: same four jobs SUCCEEDED, same final hash"
stop_all

echo "== C: two workers claiming one address are refused, never swapped"
on 1 "$COORD" --insecure --listen=0.0.0.0:7070 2>"$T/C-coord.log" &
for _ in $(seq 200); do cli workers >/dev/null 2>&1 && break; sleep 0.05; done
on 2 "$WORKER" --insecure --coordinator="$C" --listen=0.0.0.0:7071 --advertise=vm 2>"$T/C-w2.log" &
wait_workers 1
on 3 "$WORKER" --insecure --coordinator="$C" --listen=0.0.0.0:7071 --advertise=vm 2>"$T/C-w3.log" &
for _ in $(seq 200); do grep -q "already registered" "$T/C-w3.log" && break; sleep 0.05; done
grep -q "address vm:7071 is already registered by live worker w-1 (host $(hostname), pid" "$T/C-w3.log" \
  || fail "C: second claimant not refused naming both: $(tail -2 "$T/C-w3.log")"
ws=$(cli workers --json)
[ "$(json "[(w['worker_id'], w['address']) for w in d['workers']]" <<<"$ws")" = "[('w-1', 'vm:7071')]" ] \
  || fail "C: workers $ws"
stop_all

echo "== D: a malformed --advertise names the flag"
on 2 "$WORKER" --insecure --coordinator="$C" --listen=0.0.0.0:0 --advertise=10.0.0.9: 2>"$T/D.log"
rc=$?
[ "$rc" = 2 ] || fail "D: exit $rc, expected 2"
grep -q -- '--advertise: expected HOST or HOST:PORT' "$T/D.log" || fail "D: $(cat "$T/D.log")"
on 1 "$COORD" --insecure --listen=0.0.0.0:0 --advertise=coord:x 2>"$T/D2.log"
rc=$?
[ "$rc" = 2 ] || fail "D: coordinator exit $rc, expected 2"
grep -q -- '--advertise: expected HOST or HOST:PORT' "$T/D2.log" || fail "D: $(cat "$T/D2.log")"
echo "PASS"
