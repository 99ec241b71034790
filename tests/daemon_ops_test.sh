#!/usr/bin/env bash
# Operating the daemons, end to end with real processes on 127.0.0.1
# (OS-chosen ports): every daemon (coordinator, 2 workers, a ps server)
# serves the standard gRPC health service (`lockstep health`) and server
# reflection; SIGTERM is graceful: a worker stopped mid-job exits 0 within
# 5 s and its job FAILS naming it and SIGTERM (not "no heartbeat"); a
# coordinator stopped mid-job fails the job "coordinator shut down
# (SIGTERM)", lets its workers go idle and exits 0 within 5 s; the workers
# keep running and register with the next coordinator on the same address.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"; PS="$4"; PROBE="$5"
T="${TEST_TMPDIR:-$(mktemp -d)}"
source "$(dirname "$0")/e2e_lib.sh"
now() { echo "${EPOCHREALTIME/./}"; }  # microseconds (bash 5)
since() { local d=$(( $(now) - $1 )); printf '%d.%02d' $((d / 1000000)) $((d % 1000000 / 10000)); }
# wait_exit PID SECONDS: the process's exit code once it exited, or fail.
wait_exit() {
  local pid=$1 limit=$2 t0; t0=$(now)
  while kill -0 "$pid" 2>/dev/null; do
    (( $(now) - t0 <= limit * 1000000 )) || fail "process $pid still running $limit s after SIGTERM"
    sleep 0.02
  done
  wait "$pid"
}
health() { "$CLI" --insecure --coordinator="$1" health "${@:2}"; }
# wait_health ADDR [STATUS]: polls `lockstep health` until it prints STATUS.
wait_health() {
  local want=${2:-SERVING} got=""
  for _ in $(seq 100); do got=$(health "$1" --timeout_ms=500 2>/dev/null); [ "$got" = "$want" ] && return 0; sleep 0.05; done
  fail "health of $1: want $want, got '$got'"
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }

mkdir -p "$T/data"
python3 - "$T/data" <<'PY'
import random, sys
r = random.Random(7)
for name, n in (("train", 240), ("test", 60)):
    with open(f"{sys.argv[1]}/{name}.csv", "w") as f:
        for _ in range(n):
            c = r.randrange(3)
            xs = [(2.0 if j == c else 0.0) + r.random() - 0.5 for j in range(3)]
            f.write(f"{c}," + ",".join(f"{x:.4f}" for x in xs) + "\n")
PY
DATA="csv:$T/data/train.csv;$T/data/test.csv"

"$COORD" --insecure --listen=127.0.0.1:0 --port_file="$T/coord.port" 2>"$T/coord.log" & cpid=$!; pids+=($cpid)
wait_file "$T/coord.port"
CPORT=$(cat "$T/coord.port"); C="127.0.0.1:$CPORT"
cli() { "$CLI" --insecure --coordinator="$C" "$@"; }
wpid=()
start_worker() {  # start_worker N [FLAGS...]
  local n=$1; shift
  "$WORKER" --insecure --coordinator="$C" --port_file="$T/w$n.port" "$@" 2>"$T/w$n.log" & wpid[$n]=$!; pids+=($!)
  wait_file "$T/w$n.port"
}
# Worker 2 loses its first RegisterWorker reply (a test-only fault): it
# repeats the call and gets the same registration back.
start_worker 1
# Worker 1 registers first, so it is w-1 (later lines kill wpid[2] as w-2).
for _ in $(seq 200); do [ "$(cli workers 2>/dev/null | grep -c '^w-')" = 1 ] && break; sleep 0.05; done
[ "$(cli workers 2>/dev/null | grep -c '^w-')" = 1 ] || fail "worker 1 did not register: $(cat "$T/w1.log")"
start_worker 2 --fault_lose_register_reply
W1="127.0.0.1:$(cat "$T/w1.port")"; W2="127.0.0.1:$(cat "$T/w2.port")"

echo "== health: every daemon answers lockstep health"
wait_health "$C"
for w in "$W1" "$W2"; do wait_health "$w"; done   # SERVING = registered
[ "$(health "$C" --service=lockstep.v1.Coordinator)" = SERVING ] || fail "coordinator service health"
[ "$(health "$C" --service=lockstep.v1.ParameterServer)" = SERVING ] || fail "coordinator ps health"
[ "$(health "$W1" --service=lockstep.v1.PeerService)" = SERVING ] || fail "worker peer health"
out=$(health "$W1" --service=lockstep.v1.Coordinator 2>"$T/err"); rc=$?
[ "$rc" = 1 ] && [ "$out" = SERVICE_UNKNOWN ] || fail "unknown service: rc $rc, '$out'"
grep -q 'service "lockstep.v1.Coordinator" is not served here' "$T/err" || fail "unknown service message: $(cat "$T/err")"
out=$(health "$C" --json); [ "$(json "d['status']" <<<"$out")" = SERVING ] || fail "json: $out"
out=$(health 127.0.0.1:1 --timeout_ms=500 2>"$T/err"); rc=$?
[ "$rc" = 1 ] && [ "$out" = UNREACHABLE ] || fail "unreachable: rc $rc, '$out'"
grep -q '127.0.0.1:1' "$T/err" || fail "unreachable message: $(cat "$T/err")"
echo "  coordinator, workers: SERVING; unknown service and closed port exit 1"
# The lost reply: one registration for worker 2, handed out twice, and no
# refusal (before RegisterWorkerRequest.instance_secret the repeat was
# refused ALREADY_EXISTS until the first registration was LOST, ~3 s).
grep -q "reply was dropped as if lost in transit" "$T/w2.log" || fail "worker 2 lost no reply: $(cat "$T/w2.log")"
w2id=$(grep -o 'INFO  worker: registered worker=w-[0-9]*' "$T/w2.log" | head -1 | sed 's/.*worker=//')
[ -n "$w2id" ] || fail "worker 2 did not register: $(cat "$T/w2.log")"
grep -q "worker registration repeated worker=$w2id " "$T/coord.log" || fail "no repeated registration of $w2id: $(cat "$T/coord.log")"
[ "$(grep -c 'worker registered ' "$T/coord.log")" = 2 ] || fail "registrations: $(grep 'worker registered' "$T/coord.log")"
grep -q "cannot register" "$T/w2.log" && ! grep -q "ALREADY_EXISTS\|already registered\|registered by live worker" "$T/w2.log" \
  || fail "worker 2's repeat was refused: $(cat "$T/w2.log")"
[ "$(cli workers | grep -c '^w-')" = 2 ] || fail "workers: $(cli workers)"
echo "  a RegisterWorker reply lost in transit: repeated, the same registration ($w2id) given back"
# A worker that cannot register (nothing listens at its coordinator address)
# is NOT_SERVING, and still exits 0 on SIGTERM.
"$WORKER" --insecure --coordinator=127.0.0.1:1 --port_file="$T/lonely.port" 2>"$T/lonely.log" & lpid=$!; pids+=($lpid)
wait_file "$T/lonely.port"
out=$(health "127.0.0.1:$(cat "$T/lonely.port")"); rc=$?
[ "$rc" = 1 ] && [ "$out" = NOT_SERVING ] || fail "unregistered worker: rc $rc, '$out'"
kill -TERM "$lpid"; wait_exit "$lpid" 5; rc=$?; [ "$rc" = 0 ] || fail "unregistered worker exit $rc"
echo "  a worker that cannot register: NOT_SERVING, exits 0 on SIGTERM"

echo "== reflection: every daemon lists its services"
out=$("$PROBE" "$C" lockstep.v1.Coordinator) || fail "reflection on the coordinator: $out"
echo "$out" | sed 's/^/  /'
for s in lockstep.v1.Coordinator lockstep.v1.ParameterServer grpc.health.v1.Health grpc.reflection.v1alpha.ServerReflection; do
  grep -qx "service $s" <<<"$out" || fail "coordinator reflection lacks $s: $out"
done
grep -q "^symbol lockstep.v1.Coordinator in proto/coordinator.proto" <<<"$out" || fail "reflection descriptor: $out"
out=$("$PROBE" "$W1" lockstep.v1.PeerService) || fail "reflection on a worker: $out"
grep -qx "service lockstep.v1.PeerService" <<<"$out" && grep -qx "service grpc.health.v1.Health" <<<"$out" \
  || fail "worker reflection: $out"
grep -q "^symbol lockstep.v1.PeerService in proto/peer.proto" <<<"$out" || fail "worker reflection descriptor: $out"

echo "== ps server: health, reflection, SIGTERM exits 0"
"$PS" --insecure --role=ps --listen=127.0.0.1:0 --port_file="$T/ps.port" 2>"$T/ps.log" & ppid=$!; pids+=($ppid)
wait_file "$T/ps.port"; P="127.0.0.1:$(cat "$T/ps.port")"
wait_health "$P"
[ "$(health "$P" --service=lockstep.v1.ParameterServer)" = SERVING ] || fail "ps service health"
out=$("$PROBE" "$P") || fail "reflection on the ps server: $out"
grep -qx "service lockstep.v1.ParameterServer" <<<"$out" || fail "ps reflection: $out"
# A second ps server on its address fails to start (no SO_REUSEPORT).
rc=0; timeout 10 "$PS" --insecure --role=ps --listen="$P" 2>"$T/dup_ps.log" || rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "a second ps server on $P: exit $rc (started?): $(cat "$T/dup_ps.log")"
grep -q "cannot listen: the address is in use" "$T/dup_ps.log" || fail "dup ps server: $(cat "$T/dup_ps.log")"
kill -TERM "$ppid"; wait_exit "$ppid" 5; rc=$?; [ "$rc" = 0 ] || fail "ps server exit $rc after SIGTERM"

# long_job: submits a K=2 job that would run for ages, waits until it stepped.
long_job() {
  local id s=0
  id=$(cli submit --workers=2 --model=mlp:64 --dataset="$DATA" --batch=20 --steps=1000000) || fail "submit"
  for _ in $(seq 200); do s=$(cli status "$id" --json | json "int(d['step'])"); [ "$s" -gt 2 ] && break; sleep 0.05; done
  [ "$s" -gt 2 ] || fail "job $id never stepped"
  echo "$id"
}

echo "== SIGTERM to a worker mid-job"
id=$(long_job) || fail "long job: $id"
t0=$(now)
kill -TERM "${wpid[2]}"
wait_exit "${wpid[2]}" 5; rc=$?
echo "  worker w-2 exited $rc after $(since "$t0") s"
[ "$rc" = 0 ] || fail "worker exit $rc after SIGTERM"
st=$(cli status "$id" --json)
[ "$(json "d['state']" <<<"$st")" = FAILED ] || fail "job $id after the worker's SIGTERM: $st"
reason=$(json "d['reason']" <<<"$st"); echo "  job $id FAILED: $reason"
grep -q "w-2" <<<"$reason" && grep -q "shutting down (SIGTERM)" <<<"$reason" || fail "reason: $reason"
grep -q "no heartbeat" <<<"$reason" && fail "reason blames heartbeats: $reason"
grep -q "deregistered worker=w-2" "$T/w2.log" || fail "worker did not deregister"
idle=0
for _ in $(seq 100); do
  wl=$(cli workers --json)
  [ "$(json "[w['worker_id'] + ':' + w['state'] for w in d.get('workers', [])]" <<<"$wl")" = "['w-1:IDLE']" ] && { idle=1; break; }
  sleep 0.05
done
[ "$idle" = 1 ] || fail "after w-2 left, want only w-1 IDLE: $wl"

echo "== SIGTERM to the coordinator mid-job"
start_worker 3; W3="127.0.0.1:$(cat "$T/w3.port")"; wait_health "$W3"
id=$(long_job) || fail "long job: $id"
t0=$(now)
kill -TERM "$cpid"
wait_exit "$cpid" 5; rc=$?
echo "  coordinator exited $rc after $(since "$t0") s"
[ "$rc" = 0 ] || fail "coordinator exit $rc after SIGTERM"
grep -Eq "job[ =]$id.*coordinator shut down \(SIGTERM\)" "$T/coord.log" || fail "coordinator log does not fail job $id"
grep -q "still busy" "$T/coord.log" && fail "workers were not idle before the coordinator exited"
for n in 1 3; do
  kill -0 "${wpid[$n]}" 2>/dev/null || fail "worker $n died with the coordinator"
  # The worker ended job 2: told to stop, or its peer stopped first ("job 2
  # ended ...", or structured "job stopped job=2 ..." / "job failed job=2 ...").
  grep -Eq "job[ =]$id([^0-9].*)?(ended|stopped|failed)|(ended|stopped|failed).*job[ =]$id([^0-9]|$)" "$T/w$n.log" \
    || fail "worker $n did not end job $id"
done
echo "  job $id failed, both workers ended it and keep running"

echo "== a new coordinator on the same address: the workers register again"
"$COORD" --insecure --listen="$C" --port_file="$T/coord2.port" 2>"$T/coord2.log" & cpid=$!; pids+=($cpid)
wait_file "$T/coord2.port"
n=0
for _ in $(seq 200); do n=$(cli workers | grep -c IDLE); [ "$n" = 2 ] && break; sleep 0.05; done
[ "$n" = 2 ] || fail "workers did not register with the new coordinator: $(cli workers)"
for w in "$W1" "$W3"; do wait_health "$w"; done
# K = 2: the new coordinator numbers jobs from 1 again, and both workers ran
# a job 1 under the old one; the Assignment's group key (incarnation << 20 |
# job id) keeps the new job 1's peer streams apart from the old one's.
out=$(cli submit --workers=2 --model=softmax --dataset="$DATA" --batch=16 --steps=10 --follow --json) || fail "job on the new coordinator: $out"
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "job on the new coordinator: $out"

echo "== a second worker on a worker's address fails to start (no SO_REUSEPORT)"
# gRPC turns SO_REUSEPORT on by default: two workers (or ps servers, checked
# above) on one port would share it silently, connections split between them.
rc=0; timeout 10 "$WORKER" --insecure --coordinator="$C" --listen="$W1" --port_file="$T/dup.port" \
  2>"$T/dup_worker.log" || rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "a second worker on $W1: exit $rc (started?)"
grep -q "cannot listen: the address is in use" "$T/dup_worker.log" || fail "dup worker: $(cat "$T/dup_worker.log")"
[ ! -s "$T/dup.port" ] || fail "a second worker on $W1 wrote a port file"
echo "  a second worker on $W1: exit $rc, \"cannot listen: the address is in use\""

echo "== SIGTERM to idle daemons: all exit 0"
for n in 1 3; do kill -TERM "${wpid[$n]}"; done
for n in 1 3; do wait_exit "${wpid[$n]}" 5; rc=$?; [ "$rc" = 0 ] || fail "idle worker $n exit $rc"; done
kill -TERM "$cpid"; wait_exit "$cpid" 5; rc=$?; [ "$rc" = 0 ] || fail "coordinator exit $rc"
echo "PASS"
