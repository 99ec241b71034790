# Shared by the end-to-end shell tests; source it after setting T (the
# test's scratch directory, where the daemons' *.log files go) and, if the
# default of 8 does not suit, FAIL_TAIL (log lines shown per file on FAIL).
#   pids+=($!)      after starting a daemon: it is stopped at exit
#   fail MESSAGE    prints FAIL, the tail of every $T/*.log (to stderr), exits 1
#   wait_file F     waits up to 30 s for a non-empty F (a --port_file)
#   write_blobs DIR SEED TRAIN TEST [FEATURES [SEP]]
#                   writes DIR/train.csv (TRAIN rows) and DIR/test.csv (TEST
#                   rows): label c in {0,1,2} first, then FEATURES (3)
#                   values, feature c near SEP (2; 0.6 overlaps the classes
#                   so the loss stays well above 0) and the others near 0,
#                   from Python's random.Random(SEED)
#   log_size F      F's size in bytes (an offset for down_for)
#   tls DIR ROLE    the --tls_cert/--tls_key/--tls_ca flags of ROLE's
#                   certificate in DIR (as deploy/certs.sh writes it)
#   down_for MS F:OFFSET...
#                   true when every log F has, from byte OFFSET on,
#                   "heartbeat failed" lines spanning at least MS ms by their
#                   own timestamps: each worker saw its coordinator down for
#                   that long (poll it with a deadline)
# Cluster helpers (they read $C, the coordinator's address, and $CLI, $WORKER
# at call time; a test may redefine any of them):
#   cli ARGS...     lockstep --coordinator=$C ARGS...
#   json EXPR       evaluates EXPR with d = the JSON on stdin, prints it
#   now_ms          milliseconds since the epoch
#   wait_until DEADLINE_MS CMD...   polls CMD every 50 ms until it succeeds
#                   or the deadline passes (then runs it once more)
#   succeeded_hash ARGS...
#                   submit ARGS --follow --json; fails unless SUCCEEDED;
#                   prints the job's final weights hash
#   cancelled_at STEP ARGS...
#                   submit ARGS, wait (up to ~2 min: CI also runs under
#                   AddressSanitizer) until the job's step >= STEP, cancel
#                   it; fails unless it ends CANCELLED; prints the job id
#   idle W...       every worker id named is IDLE
#   stepped JOB N   JOB's step >= N
#   finished JOB    JOB is SUCCEEDED, FAILED or CANCELLED;  state_of JOB
#   spawn_worker [FLAGS...]
#                   starts worker w-N (N = ++n_workers; registration order
#                   gives the ids) with --data_dir=$T and FLAGS, records
#                   wpid[N] and live+=(w-N); returns once its port file is there
#   start_worker [FLAGS...]
#                   spawn_worker, then waits (10 s) until it is IDLE
#   kill_worker N   SIGKILLs w-N (spawn_worker's), reaps it (its ports are
#                   free on return) and drops it from live
#   address_of W    worker W's registered address (`workers --json`)
#   regrouped_to JOB GEN KIND WORLD
#                   JOB's membership generation GEN has started (not
#                   regrouping) with WORLD ranks, its newest membership
#                   event of KIND (shrink, wait, replace, join) decided
# Coordinator restarts (the coordinator_restart* tests; they set S, the
# --state_dir):
#   start_coordinator [FLAGS...]
#                   starts $COORD with --state_dir=$S and FLAGS, logging to
#                   $T/coord.log the first time (on 127.0.0.1:0; sets PORT and
#                   C), to $T/coordN.log (N = 2, 3, ...) later, on $C (FAIL
#                   unless it got PORT again); cpid = its pid; returns once it
#                   listens
#   kill_coordinator  SIGKILLs $cpid and reaps it
#   field JOB KEY   JOB's `status --json` field KEY ('' when absent)
#   poll_rank_at JOB N WORKER
#                   once JOB runs and has done N steps, prints WORKER's
#                   rank (one status call per poll; 30 s deadline)
#   finish_job NAME JOB T0_MS
#                   waits (120 s) for JOB to end; fails unless SUCCEEDED;
#                   prints its time since T0_MS, writes its status JSON to
#                   $T/NAME.status.json and its final hash to $T/NAME.hash
#   same_hash_with_and_without LABEL RUN QUIET DISTURBED SUBMIT_ARGS...
#                   runs `RUN LABEL-quiet QUIET SUBMIT_ARGS...` then `RUN
#                   LABEL-disturbed DISTURBED SUBMIT_ARGS...` (RUN NAME MODE
#                   ARGS... submits one job, disturbs it per MODE and ends
#                   with finish_job NAME); fails unless both final hashes
#                   agree (a flood or a stranger changed nothing)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  # Bounded: a daemon wedged on SIGTERM gets SIGKILL after 10 s.
  for _ in $(seq 100); do
    alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break; sleep 0.1
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
}
trap cleanup EXIT
fail() {  # to stderr: shown even when called inside $(...)
  {
    echo "FAIL: $*"
    for f in "$T"/*.log; do echo "== $f"; tail -"${FAIL_TAIL:-8}" "$f"; done
  } >&2
  exit 1
}
wait_file() { for _ in $(seq 300); do [ -s "$1" ] && return 0; sleep 0.1; done; fail "no $1"; }
write_blobs() {
  python3 - "$@" <<'PY'
import random, sys
d, seed, n_train, n_test = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
features = int(sys.argv[5]) if len(sys.argv) > 5 else 3
sep = float(sys.argv[6]) if len(sys.argv) > 6 else 2.0
r = random.Random(seed)
def write(path, n):
    with open(path, "w") as f:
        for _ in range(n):
            c = r.randrange(3)
            xs = [(sep if j == c else 0.0) + r.random() - 0.5 for j in range(features)]
            f.write(f"{c}," + ",".join(f"{x:.4f}" for x in xs) + "\n")
write(f"{d}/train.csv", n_train)
write(f"{d}/test.csv", n_test)
PY
}
log_size() { stat -c %s "$1"; }
tls() { echo "--tls_cert=$1/$2.pem --tls_key=$1/$2.key --tls_ca=$1/ca.pem"; }
# SEC_CLI / SEC_WORKER: the client's and workers' security flags, read by
# cli and spawn_worker when called (--insecure unless the test sets them,
# e.g. to `tls` flags).
SEC_CLI=("${SEC_CLI[@]:---insecure}")
SEC_WORKER=("${SEC_WORKER[@]:---insecure}")
cli() { "$CLI" "${SEC_CLI[@]}" --coordinator="$C" "$@"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
now_ms() { date +%s%3N; }
wait_until() {
  local deadline=$1; shift
  while [ "$(now_ms)" -lt "$deadline" ]; do "$@" && return 0; sleep 0.05; done
  "$@"
}
succeeded_hash() {
  local out
  out=$(cli submit "$@" --follow --json) || fail "submit exit $?: $out"
  [ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "not SUCCEEDED: $out"
  json "d['final_hash']" <<<"$out"
}
# in_sync_hash NAME STEPS FLAGS...: submits and follows a job that must
# end SUCCEEDED with all STEPS steps checked and every replica in sync;
# prints its final hash (and, on stderr, the hash and the spec's combine
# fields).
in_sync_hash() {
  local name=$1 steps=$2 out; shift 2
  out=$(cli submit "$@" --follow --json) || fail "$name: exit $?: $out"
  python3 - "$out" "$name" "$steps" <<'PY' >&2 || fail "$name: $out"
import json, sys
d = json.loads(sys.argv[1])
assert d["state"] == "SUCCEEDED", d["state"]
assert int(d["checked_steps"]) == int(sys.argv[3]), d
assert int(d.get("mismatched_steps", 0)) == 0, d
assert not d.get("out_of_sync") and all(r["in_sync"] for r in d["ranks"]), d
s = d["spec"]
keys = ("sync_mode", "peer_transport", "ps_transport", "ring_algorithm", "compression")
print(sys.argv[2], "hash", d["final_hash"], {k: s[k] for k in keys if k in s})
PY
  json "d['final_hash']" <<<"$out"
}
cancelled_at() {
  local at=$1 id step; shift
  id=$(cli submit "$@") || fail "submit: $id"
  for _ in $(seq 2400); do
    step=$(cli status "$id" --json | json "int(d.get('step', 0))")
    [ "$step" -ge "$at" ] && break; sleep 0.05
  done
  [ "$(cli cancel "$id" --json | json "d['state']")" = CANCELLED ] \
    || fail "cancel job $id (finished before the cancel?)"
  echo "$id"
}
idle() {
  local list; list=$(cli workers) || return 1
  for w in "$@"; do grep -Eq "^$w +.* IDLE " <<<"$list" || return 1; done
}
stepped() { [ "$(cli status "$1" --json | json "int(d.get('step', 0))")" -ge "$2" ]; }
finished() { cli status "$1" --json | grep -Eq '"state":"(SUCCEEDED|FAILED|CANCELLED)"'; }
state_of() { cli status "$1" --json | json "d['state']"; }
address_of() { cli workers --json | json "[w['address'] for w in d['workers'] if w['worker_id'] == '$1'][0]"; }
declare -A wpid
n_workers=0
live=()   # the ids of the workers alive
spawn_worker() {
  n_workers=$((n_workers + 1))
  local i=$n_workers
  "$WORKER" "${SEC_WORKER[@]}" --coordinator="$C" --data_dir="$T" --port_file="$T/w$i.port" "$@" 2>"$T/w$i.log" & pids+=($!)
  wpid[$i]=$!
  live+=("w-$i")
  wait_file "$T/w$i.port"
}
start_worker() {
  spawn_worker "$@"
  wait_until $(( $(now_ms) + 10000 )) idle "w-$n_workers" || fail "w-$n_workers not IDLE: $(cli workers)"
}
kill_worker() {
  kill -KILL "${wpid[$1]}"
  wait "${wpid[$1]}" 2>/dev/null
  local keep=() w; for w in "${live[@]}"; do [ "$w" != "w-$1" ] && keep+=("$w"); done; live=("${keep[@]}")
}
regrouped_to() {
  cli status "$1" --json | json "int(d.get('generation', 0)) == $2 and not d.get('regrouping') and int(d['world']) == $4 and d['membership_events'][-1]['kind'] == '$3' and int(d['membership_events'][-1]['step']) >= 0" | grep -q True
}
poll_rank_at() {
  local deadline=$(( $(now_ms) + 30000 )) r
  while [ "$(now_ms)" -lt "$deadline" ]; do
    r=$(cli status "$1" --json | json "[r['rank'] for r in d['ranks'] if r['worker_id']=='$3'][0] if d['state'] == 'RUNNING' and int(d.get('step', 0)) >= $2 else ''") \
      && [ -n "$r" ] && { echo "$r"; return 0; }
    sleep 0.05
  done
  return 1
}
down_for() {
  python3 - "$@" <<'PY'
import datetime, sys
ms = int(sys.argv[1])
def at(line):
    return datetime.datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ")
for arg in sys.argv[2:]:
    path, offset = arg.rsplit(":", 1)
    with open(path, "rb") as f:
        f.seek(int(offset))
        lines = [l for l in f.read().decode("utf-8", "replace").splitlines()
                 if "heartbeat failed" in l]
    if not lines or (at(lines[-1]) - at(lines[0])).total_seconds() * 1000 < ms:
        sys.exit(1)
PY
}
finish_job() {
  local name=$1 id=$2 t0=$3 out
  wait_until $(( $(now_ms) + 120000 )) finished "$id" || fail "$name: job $id not finished"
  out=$(cli status "$id" --json)
  [ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "$name: expected SUCCEEDED: $out"
  echo "$name: job $id SUCCEEDED in $(( $(now_ms) - t0 )) ms"
  printf '%s\n' "$out" >"$T/$name.status.json"
  json "d['final_hash']" <<<"$out" >"$T/$name.hash"
}
same_hash_with_and_without() {
  local label=$1 run=$2 quiet=$3 disturbed=$4 h1 h2; shift 4
  "$run" "$label-quiet" "$quiet" "$@"
  "$run" "$label-disturbed" "$disturbed" "$@"
  h1=$(cat "$T/$label-quiet.hash"); h2=$(cat "$T/$label-disturbed.hash")
  [ -n "$h1" ] && [ "$h1" = "$h2" ] \
    || fail "$label: final hash $h2 when disturbed differs from the quiet run's $h1"
  echo "$label: same final hash with and without the disturbance ($h1)"
}
coord_starts=0
start_coordinator() {
  coord_starts=$((coord_starts + 1))
  local log=coord.log
  [ "$coord_starts" -gt 1 ] && log="coord$coord_starts.log"
  rm -f "$T/coord.port"
  "$COORD" --insecure --listen="${C:-127.0.0.1:0}" --state_dir="$S" --metrics_port=-1 \
    --port_file="$T/coord.port" "$@" 2>>"$T/$log" & pids+=($!)
  cpid=$!
  wait_file "$T/coord.port"
  if [ -z "${C:-}" ]; then
    PORT=$(cat "$T/coord.port")
    C="127.0.0.1:$PORT"
  elif [ "$(cat "$T/coord.port")" != "$PORT" ]; then
    fail "restarted on port $(cat "$T/coord.port"), not $PORT"
  fi
}
kill_coordinator() {
  kill -9 "$cpid"
  wait "$cpid" 2>/dev/null
}
field() { cli status "$1" --json | json "d.get('$2', '')"; }
# Submits a job (`cli submit "$@"`), waits (BOUND_S) until $T/w1.log and
# $T/w2.log both logged "job done" after the submit, SIGKILLs the
# coordinator and restarts it at once. Sets JD (the job), t0 (now_ms at the
# kill) and DONE_O1 (w1.log's size before the submit).
kill_at_job_done() {
  local o2
  DONE_O1=$(log_size "$T/w1.log"); o2=$(log_size "$T/w2.log")
  JD=$(cli submit "$@") || fail "submit: $JD"
  wait_until $(( $(now_ms) + BOUND_S * 1000 )) \
    eval '[ "$(tail -c +$((DONE_O1 + 1)) "$T/w1.log" | grep -c "job done")" -ge 1 ] &&
          [ "$(tail -c +$((o2 + 1)) "$T/w2.log" | grep -c "job done")" -ge 1 ]' \
    || fail "job $JD: the workers did not log job done: $(cli status "$JD")"
  kill_coordinator
  t0=$(now_ms)
  start_coordinator
}
