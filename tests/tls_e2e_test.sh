#!/usr/bin/env bash
# Mutual TLS and roles end to end (issue 11, "Every channel authenticated"),
# real processes on 127.0.0.1 with OS-chosen ports, certificates made by
# deploy/certs.sh (Debian's openssl):
#   A  a plain-text cluster (coordinator, lockstep-server ps shard, 2 workers)
#      trains a K=2 ring/grpc job and a K=2 ps job: the reference hashes;
#   B  the same cluster with --tls_* on every process trains both jobs with
#      the same final hashes (the ring job submitted with --token_file, the
#      ps job with $LOCKSTEP_TOKEN);
#   C  refused, and nothing changes (`lockstep jobs`, `lockstep workers`):
#      no certificate / another CA's -> UNAVAILABLE; no or a wrong token ->
#      UNAUTHENTICATED; a worker certificate calling SubmitJob/CancelJob/
#      ListJobs -> PERMISSION_DENIED; a client certificate calling
#      RegisterWorker/Heartbeat/ReportStep/UploadWeights, ps Push/Pull (on
#      lockstep-server and on the coordinator's shard), a worker's
#      PeerService/Stream and ReplicaState/FetchState -> PERMISSION_DENIED;
#      a worker pointed at another worker's port (a worker certificate
#      posing as the coordinator) fails the handshake, never registers;
#   E  a lockstep-server holding a coordinator certificate: a ps job FAILS,
#      the workers naming the role (the worker's ps channel expects a server
#      certificate, the coordinator's only for the coordinator's own shard);
#      a ps job on the coordinator's own shard over TLS SUCCEEDS with A's hash;
#   D  bad flags exit 2 naming the flag and file; neither --tls_* nor
#      --insecure, or both, exit 2 (every daemon and the CLI); --insecure
#      warns.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"; PS="$4"; CERTS="$5"; PROBE="$6"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=6
source "$(dirname "$0")/e2e_lib.sh"
command -v openssl >/dev/null || fail "openssl not installed (deploy/setup.sh installs it)"

mkdir -p "$T/data"
write_blobs "$T/data" 11 300 60 4
bash "$CERTS" --out="$T/pki" 2>/dev/null || fail "certs.sh"
bash "$CERTS" --out="$T/other" 2>/dev/null || fail "certs.sh (other CA)"
PKI="$T/pki"
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }

JOB=(--workers=2 --model=mlp:16 --dataset='csv:train.csv;test.csv' --batch=30 --steps=300
     --lr=0.05 --optimizer=sgd --momentum=0.9 --seed=9 --eval_each_epoch=false)

# start NAME SECURE [PS_ROLE [own]]: SECURE 1 = --tls_* on every process (0
# = --insecure); PS_ROLE: the certificate the lockstep-server holds (default
# server); "own": the coordinator gets no --ps_addresses (ps jobs use its own
# shard). Sets C, PSA, W1 (worker 1's address).
start() {
  local n="$1" secure="$2" cf="--insecure" wf="--insecure" sf="--insecure"
  local psr="${3:-server}" own="${4:-}"
  if [ "$secure" = 1 ]; then
    cf="$(tls "$PKI" coordinator) --token_file=$PKI/token"; wf="$(tls "$PKI" worker)"
    sf="$(tls "$PKI" "$psr")"
  fi
  "$PS" --listen=127.0.0.1:0 --port_file="$T/$n.ps.port" --metrics_port=-1 $sf \
    2>"$T/$n.ps.log" & pids+=($!)
  wait_file "$T/$n.ps.port"
  PSA="127.0.0.1:$(cat "$T/$n.ps.port")"
  "$COORD" --listen=127.0.0.1:0 --port_file="$T/$n.coord.port" --metrics_port=-1 \
    $([ "$own" = own ] || echo "--ps_addresses=$PSA") $cf 2>"$T/$n.coord.log" & pids+=($!)
  wait_file "$T/$n.coord.port"
  C="127.0.0.1:$(cat "$T/$n.coord.port")"
  for i in 1 2; do
    "$WORKER" --coordinator="$C" --data_dir="$T/data" --port_file="$T/$n.w$i.port" \
      --metrics_port=-1 $wf 2>"$T/$n.w$i.log" & pids+=($!)
    wait_file "$T/$n.w$i.port"
  done
  W1="127.0.0.1:$(cat "$T/$n.w1.port")"
}
idle() {
  for _ in $(seq 200); do [ "$(cli workers | grep -c IDLE)" = 2 ] && return 0; sleep 0.05; done
  fail "workers not idle"
}
run_job() {  # extra flags...; prints the final hash
  local out
  out=$(cli submit "${JOB[@]}" "$@" --follow --json) || fail "submit $* exit $?: $out"
  [ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "job $*: $out"
  json "d['final_hash']" <<<"$out"
}
stop_all() { cleanup; pids=(); }

echo "== A: plain text"
start plain 0
cli() { "$CLI" --insecure --coordinator="$C" "$@"; }
idle
t0=$(date +%s.%N)
ring_ref=$(run_job --sync=ring --peer_transport=grpc) || exit 1
ps_ref=$(run_job --sync=ps) || exit 1
t1=$(date +%s.%N)
echo "plain: ring/grpc $ring_ref, ps $ps_ref ($(python3 -c "print(f'{$t1-$t0:.1f}')") s for both jobs)"
stop_all

echo "== B: mutual TLS on every process"
start tls 1
grep -q 'grpc_security="mutual TLS' "$T/tls.coord.log" || fail "coordinator does not log mutual TLS"
grep -q 'grpc_security="mutual TLS' "$T/tls.w1.log" || fail "worker does not log mutual TLS"
cli() { "$CLI" --coordinator="$C" $(tls "$PKI" client) "$@"; }
idle
t0=$(date +%s.%N)
ring_tls=$(run_job --sync=ring --peer_transport=grpc --token_file="$PKI/token") || exit 1
ps_tls=$(LOCKSTEP_TOKEN="$(cat "$PKI/token")" run_job --sync=ps) || exit 1
t1=$(date +%s.%N)
echo "tls:   ring/grpc $ring_tls, ps $ps_tls ($(python3 -c "print(f'{$t1-$t0:.1f}')") s for both jobs)"
[ "$ring_tls" = "$ring_ref" ] || fail "ring/grpc over TLS: hash $ring_tls, plain $ring_ref"
[ "$ps_tls" = "$ps_ref" ] || fail "ps over TLS: hash $ps_tls, plain $ps_ref"
idle

echo "== C: refusals change nothing"
# What a refused call could change: the jobs (id, state, step, hash, spec)
# and the registered workers.
jobs_view() { cli jobs --json | json "[(j['job_id'], j['state'], j['step'], j.get('final_hash'), j['spec']) for j in d['jobs']]"; }
jobs_before=$(jobs_view) || fail "jobs"
workers_before=$(cli workers --json | json "sorted((w['worker_id'], w['address']) for w in d['workers'])") \
  || fail "workers"
expect_cli() {  # CODE args...: the CLI exits 1 with CODE on stderr
  local code="$1"; shift
  local err
  err=$("$CLI" --coordinator="$C" --timeout_s=3 "$@" 2>&1 >/dev/null); local rc=$?
  [ "$rc" = 1 ] && grep -q "$code" <<<"$err" || fail "lockstep $*: exit $rc, expected 1 with $code: $err"
  echo "ok   $(grep -v "^E[0-9]" <<<"$err" | head -c 200)"
}
echo wrong-token > "$T/wrong.token"
expect_cli UNAVAILABLE --insecure jobs
expect_cli UNAVAILABLE --insecure submit "${JOB[@]}"
expect_cli UNAVAILABLE $(tls "$T/other" client) --token_file="$T/other/token" submit "${JOB[@]}"
expect_cli UNAUTHENTICATED $(tls "$PKI" client) submit "${JOB[@]}"
expect_cli UNAUTHENTICATED $(tls "$PKI" client) --token_file="$T/wrong.token" submit "${JOB[@]}"
expect_cli UNAUTHENTICATED $(tls "$PKI" client) --token_file="$T/wrong.token" cancel 1
expect_cli PERMISSION_DENIED $(tls "$PKI" worker) --token_file="$PKI/token" submit "${JOB[@]}"
expect_cli PERMISSION_DENIED $(tls "$PKI" worker) --token_file="$PKI/token" cancel 1
expect_cli PERMISSION_DENIED $(tls "$PKI" worker) jobs
TOKEN=$(cat "$PKI/token")
CO=lockstep.v1.Coordinator
# Debian's python3 (python3-grpcio); a pyenv python may be first on PATH.
PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1 /usr/bin/python3 "$PROBE" \
  "$C|/$CO/ListJobs|unary|-|-|UNAVAILABLE" \
  "$C|/$CO/ListJobs|unary|$T/other/client|-|UNAVAILABLE" \
  "$C|/$CO/RegisterWorker|unary|$T/other/worker|-|UNAVAILABLE" \
  "$C|/$CO/SubmitJob|unary|$PKI/worker|$TOKEN|PERMISSION_DENIED" \
  "$C|/$CO/SubmitJob|unary|$PKI/client|wrong|UNAUTHENTICATED" \
  "$C|/$CO/RegisterWorker|unary|$PKI/client|$TOKEN|PERMISSION_DENIED" \
  "$C|/$CO/RegisterWorker|unary|$PKI/server|-|PERMISSION_DENIED" \
  "$C|/$CO/Heartbeat|unary|$PKI/client|-|PERMISSION_DENIED" \
  "$C|/$CO/ReportStep|unary|$PKI/client|-|PERMISSION_DENIED" \
  "$C|/$CO/ReportDone|unary|$PKI/client|-|PERMISSION_DENIED" \
  "$C|/$CO/UploadWeights|stream_unary|$PKI/client|-|PERMISSION_DENIED" \
  "$C|/lockstep.v1.ParameterServer/Push|unary|$PKI/client|-|PERMISSION_DENIED" \
  "$PSA|/lockstep.v1.ParameterServer/Push|unary|$PKI/client|-|PERMISSION_DENIED" \
  "$PSA|/lockstep.v1.ParameterServer/Pull|unary|$PKI/client|-|PERMISSION_DENIED" \
  "$PSA|/lockstep.v1.ParameterServer/Push|unary|-|-|UNAVAILABLE" \
  "$PSA|/lockstep.v1.ParameterServer/Control|unary|$PKI/worker|-|PERMISSION_DENIED" \
  "$PSA|/lockstep.v1.ParameterServer/Control|unary|$PKI/server|-|PERMISSION_DENIED" \
  "$PSA|/lockstep.v1.ParameterServer/Control|unary|$PKI/client|$TOKEN|PERMISSION_DENIED" \
  "$W1|/lockstep.v1.PeerService/Stream|stream_unary|$PKI/client|-|PERMISSION_DENIED" \
  "$W1|/lockstep.v1.PeerService/Stream|stream_unary|$T/other/worker|-|UNAVAILABLE" \
  "$W1|/lockstep.v1.ReplicaState/FetchState|unary_stream|$PKI/client|-|PERMISSION_DENIED" \
  "$C|/grpc.health.v1.Health/Check|unary|$PKI/client|-|OK" \
  "$W1|/grpc.health.v1.Health/Check|unary|$PKI/worker|-|OK" \
  || fail "a probe ended with another status"
# The Python client (client/python) with the same options as the CLI.
PYTHONPATH="${TEST_SRCDIR}/${TEST_WORKSPACE}/client/python" PYTHONDONTWRITEBYTECODE=1 \
  PYTHONNOUSERSITE=1 /usr/bin/python3 -P - "$C" "$PKI" "$T/wrong.token" "$T/other" <<'PY' \
  || fail "python client"
import sys
import lockstep
addr, pki, wrong, other = sys.argv[1:]
def tls(d, role):
    return dict(tls_ca=f"{d}/ca.pem", tls_cert=f"{d}/{role}.pem", tls_key=f"{d}/{role}.key")
def code(f):
    try:
        f()
        return "OK"
    except lockstep.LockstepError as e:
        return e.code.name
job = dict(model="mlp:16", workers=2, dataset="csv:train.csv;test.csv", steps=10)
with lockstep.Client(addr, **tls(pki, "client")) as c:
    assert [j.state for j in c.jobs()] == ["SUCCEEDED"] * 2, c.jobs()
    assert code(lambda: c.submit(**job)) == "UNAUTHENTICATED"
with lockstep.Client(addr, **tls(pki, "client"), token_file=wrong) as c:
    assert code(lambda: c.submit(**job)) == "UNAUTHENTICATED"
    assert code(lambda: c.cancel(1)) == "UNAUTHENTICATED"
with lockstep.Client(addr, **tls(pki, "worker"), token_file=f"{pki}/token") as c:
    assert code(lambda: c.submit(**job)) == "PERMISSION_DENIED"
with lockstep.Client(addr, timeout=3, **tls(other, "client"), token_file=f"{other}/token") as c:
    assert code(c.jobs) == "UNAVAILABLE"
with lockstep.Client(addr, timeout=3, insecure=True) as c:
    assert code(c.jobs) == "UNAVAILABLE"
for bad, what in [(dict(tls_ca=f"{pki}/ca.pem"), "tls_cert: missing"),
                  (dict(tls(pki, "client"), tls_key=f"{pki}/nope.key"), "tls_key: cannot read"),
                  (dict(token="abc"), "token: needs mutual TLS"),
                  (dict(), "no transport security chosen"),
                  (dict(tls(pki, "client"), insecure=True), "insecure: cannot be combined")]:
    try:
        lockstep.Client(addr, **bad)
        raise SystemExit(f"accepted {bad}")
    except ValueError as e:
        assert what in str(e), (what, str(e))
print("ok   python client: jobs over mTLS; UNAUTHENTICATED, PERMISSION_DENIED, UNAVAILABLE; "
      "bad options name the option")
PY
# A worker's channels check the role they mean to reach: a worker pointed at
# worker 1's port (a worker certificate posing as the coordinator, as a
# stolen worker key would) fails the handshake and never calls it (before,
# the handshake passed and RegisterWorker reached worker 1: UNIMPLEMENTED).
"$WORKER" --coordinator="$W1" --data_dir="$T/data" --port_file="$T/fake.w.port" \
  --metrics_port=-1 $(tls "$PKI" worker) 2>"$T/fake.w.log" & pids+=($!); fake_pid=$!
wait_until $(( $(now_ms) + 20000 )) \
  eval '[ "$(grep -c "cannot register" "$T/fake.w.log")" -ge 3 ]' \
  || fail "the worker pointed at a worker's port did not report 3 failed registrations"
grep -qi "unimplemented" "$T/fake.w.log" \
  && fail "a worker certificate was accepted as the coordinator's: $(grep -m1 "cannot register" "$T/fake.w.log")"
grep -q "cannot register.*has role worker, expected coordinator" "$T/fake.w.log" \
  || fail "no role refusal in the handshake: $(grep -m1 "cannot register" "$T/fake.w.log")"
kill "$fake_pid" 2>/dev/null
echo "ok   worker certificate posing as the coordinator: handshake refused ($(grep -m1 -o 'has role worker, expected coordinator[^"]*' "$T/fake.w.log"))"
jobs_after=$(jobs_view) || fail "jobs"
workers_after=$(cli workers --json | json "sorted((w['worker_id'], w['address']) for w in d['workers'])")
[ "$jobs_after" = "$jobs_before" ] || fail "jobs changed: before $jobs_before after $jobs_after"
[ "$workers_after" = "$workers_before" ] || fail "workers changed: $workers_before -> $workers_after"
[ "$(cli jobs --json | json "len(d['jobs'])")" = 2 ] || fail "expected only the 2 jobs of B: $jobs_after"
echo "ok   jobs and workers unchanged: $(cli jobs | tail -n +2 | awk '{print $1, $2}' | tr '\n' ' ')"
stop_all

echo "== E: a ps shard must hold the role the job names"
# A lockstep-server holding the coordinator's certificate (as a stolen
# coordinator key would): the worker's ps channel expects a server
# certificate, so the handshake fails and the ps job FAILS (the coordinator
# stops it once every rank has waited for the shard for lost_after), and
# each worker's "job stopped" line names the role its combine could not
# connect to.
start roles 1 coordinator
cli() { "$CLI" --coordinator="$C" $(tls "$PKI" client) --token_file="$PKI/token" "$@"; }
idle
out=$(cli submit "${JOB[@]}" --sync=ps --follow --json)
[ "$(json "d['state']" <<<"$out")" = FAILED ] \
  || fail "a ps job on a shard holding a coordinator certificate did not fail: $out"
grep -q "has role coordinator, expected server" "$T/roles.w1.log" "$T/roles.w2.log" \
  || fail "no role refusal in the workers' logs: $(json "d.get('reason')" <<<"$out")"
echo "ok   coordinator certificate posing as a ps server: refused ($(grep -h -m1 -o 'has role coordinator, expected server[^"]*' "$T/roles.w1.log" "$T/roles.w2.log" | head -1 | head -c 120))"
stop_all
# The coordinator's own shard (no --ps_addresses) holds the coordinator's
# certificate: the same job SUCCEEDS with the hash of A's ps job.
start own 1 server own
idle
own_ps=$(run_job --sync=ps) || exit 1
[ "$own_ps" = "$ps_ref" ] || fail "ps on the coordinator's shard over TLS: hash $own_ps, A's ps $ps_ref"
echo "ok   ps on the coordinator's own shard over TLS: SUCCEEDED, hash $own_ps = A's"
stop_all

echo "== D: bad flags"
expect_exit2() {  # WHAT-to-find binary args...
  local want="$1"; shift
  local err; err=$("$@" --listen=127.0.0.1:0 --metrics_port=-1 2>&1 </dev/null); local rc=$?
  [ "$rc" = 2 ] && grep -q -- "$want" <<<"$err" || fail "$* exit $rc, expected 2 naming $want: $err"
  echo "ok   exit 2: $(grep -o -- "$want.*" <<<"$err" | head -1 | head -c 150)"
}
expect_exit2 "--tls_key: cannot read $T/nope.key" "$COORD" --tls_cert="$PKI/coordinator.pem" \
  --tls_key="$T/nope.key" --tls_ca="$PKI/ca.pem" --token_file="$PKI/token"
expect_exit2 "--tls_ca: missing" "$WORKER" --coordinator=127.0.0.1:1 --tls_cert="$PKI/worker.pem" \
  --tls_key="$PKI/worker.key"
expect_exit2 "--tls_cert: $PKI/token is not a PEM" "$PS" --tls_cert="$PKI/token" \
  --tls_key="$PKI/server.key" --tls_ca="$PKI/ca.pem"
expect_exit2 "--token_file: missing" "$COORD" $(tls "$PKI" coordinator)
# Secure by default: neither --tls_* nor --insecure is refused by every
# binary, naming both choices; both together are refused naming the flags.
expect_exit2 "no transport security chosen: pass --tls_cert, --tls_key and --tls_ca" "$COORD"
expect_exit2 "no transport security chosen" "$WORKER" --coordinator=127.0.0.1:1
expect_exit2 "no transport security chosen" "$PS"
expect_exit2 "--insecure: cannot be combined with --tls_cert/--tls_key/--tls_ca" "$COORD" --insecure $(tls "$PKI" coordinator) --token_file="$PKI/token"
expect_exit2 "--insecure: cannot be combined" "$WORKER" --coordinator=127.0.0.1:1 --insecure $(tls "$PKI" worker)
expect_exit2 "--insecure: cannot be combined" "$PS" --insecure $(tls "$PKI" server)
for args in "" "--insecure $(tls "$PKI" client)"; do
  err=$("$CLI" --coordinator=127.0.0.1:1 $args jobs 2>&1); rc=$?
  want="no transport security chosen"; [ -n "$args" ] && want="--insecure: cannot be combined"
  [ "$rc" = 2 ] && grep -q -- "$want" <<<"$err" || fail "lockstep $args jobs: exit $rc, expected 2 naming $want: $err"
  echo "ok   exit 2: lockstep $([ -n "$args" ] && echo "--insecure --tls_*" || echo "(no flags)"): $(head -c 150 <<<"$err")"
done
# --insecure: plain text, and the daemon says so in a warning.
"$COORD" --listen=127.0.0.1:0 --port_file="$T/insecure.port" --metrics_port=-1 --insecure \
  2>"$T/insecure.coord.log" & pids+=($!)
wait_file "$T/insecure.port"
grep -q "WARN.*--insecure: gRPC in plain text" "$T/insecure.coord.log" || fail "no --insecure warning"
"$CLI" --coordinator="127.0.0.1:$(cat "$T/insecure.port")" --insecure jobs >/dev/null 2>"$T/cli.err" \
  || fail "lockstep --insecure jobs against an --insecure coordinator: $(cat "$T/cli.err")"
grep -q "warning: --insecure" "$T/cli.err" || fail "the CLI does not warn about --insecure"
echo "ok   --insecure: plain text with a warning from the coordinator and the CLI"
err=$("$CLI" --coordinator=127.0.0.1:1 --tls_cert="$PKI/client.pem" jobs 2>&1); rc=$?
[ "$rc" = 2 ] && grep -q -- "--tls_key: missing" <<<"$err" || fail "lockstep with --tls_cert only: exit $rc: $err"
echo PASS
