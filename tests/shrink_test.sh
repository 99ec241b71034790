#!/usr/bin/env bash
# Issue 10, a lost worker under on_worker_lost=shrink: real processes on
# 127.0.0.1 (OS-chosen ports), a coordinator with its default lost_after
# (3 s) and worker daemons. For ring over gRPC (K=3) and ps over raw TCP
# (K=3):
#   A  a K=3 shrink job; once it has run 20 steps, one worker is SIGKILLed
#      mid-step. Asserted, with deadlines and no sleeps to synchronise:
#      the job regroups (generation 1, 2 ranks, the lost worker out, a
#      "shrink" event with the step s it continued at) within REGROUP_MS
#      (REGROUP_MS, 6 s: lost_after 3 s + heartbeats + the state hand-over) of the kill,
#      and ends SUCCEEDED.
#   B  the same run, uninterrupted at K=3, with a checkpoint every step;
#      cancelled once its checkpoint of step s is on disk;
#   C  the same run resumed from B's step-s checkpoint with K=2 workers.
#   What is exactly expected: A's final hash == C's (the K=3 run up to s,
#   then K=2 from s on, with the same global batch; README "Failure
#   semantics"), and != D's (the same checkpoint resumed with K=3, i.e.
#   the uninterrupted run), so the comparison can fail. The killed
#   worker's replacement (a fresh worker) serves B and D.
# Measured times are printed.
# With a 4th argument "restart" (//tests:shrink_restart_test), the
# coordinator runs with --state_dir and, once A has regrouped, is SIGKILLed
# and restarted on the same port (after both survivors logged failed
# heartbeats for 1 s; polled, bound 5 s): the ring job must still end
# SUCCEEDED with C's hash (its generation, members and group key came back
# from the database); the ps job, whose shard was the coordinator's own,
# must end FAILED saying to resume it from its last checkpoint.
# With a 4th argument "ps_servers" and a 5th, lockstep-server
# (//tests:shrink_ps_servers_test), only the ps case runs, on two
# lockstep-server shards (the coordinator's --ps_addresses) instead of the
# coordinator's own: on top of the above, each shard's lockstep_ps_jobs
# gauge shows that the coordinator's Control messages (server/ps_control.h)
# reached it: after the regroup the shards hold no more groups than
# before the kill (generation 0's keys forgotten, generation 1's in use),
# and once each job ends they hold none (polled, bound FORGET_S).
# With a 4th argument "sigterm" (//tests:shrink_sigterm_test), only a ring
# case runs (the default raw-TCP plane) and the victim gets SIGTERM instead:
# lockstep-worker leaves the job (DeregisterWorker) before it stops, so the
# job regroups within REGROUP_MS (6 s, as for SIGKILL: the bound is loose
# so that sanitizer runs side by side stay green; the shrink event's reason,
# the worker's "left: shutting down (SIGTERM)", is what tells the leave
# from the loss path, "lost: no heartbeat ...") and ends with C's hash as
# above. The time is printed (0.27 s on 2026-12-06, lost_after 3 s).
# "ps_servers_tls" with a 6th argument, deploy/certs.sh
# (//tests:shrink_ps_servers_tls_test): the same under mutual TLS, where a
# shard takes a job's data-plane secret only from the coordinator's
# Control message, so generation 1 trains only if the coordinator sent
# its new group key's secret to both shards.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"; MODE="${4:-}"; PS="${5:-}"; CERTS_SH="${6:-}"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=20
REGROUP_MS=6000
SIGNAL=KILL
if [ "$MODE" = sigterm ]; then SIGNAL=TERM; fi
source "$(dirname "$0")/e2e_lib.sh"
SEC_COORD=(--insecure) SEC_PS=(--insecure)
if [ "$MODE" = ps_servers_tls ]; then
  bash "$CERTS_SH" --out="$T/pki" 2>/dev/null || fail "certs.sh"
  read -ra SEC_PS <<<"$(tls "$T/pki" server)"
  read -ra SEC_COORD <<<"$(tls "$T/pki" coordinator) --token_file=$T/pki/token"
  read -ra SEC_WORKER <<<"$(tls "$T/pki" worker)"
  read -ra SEC_CLI <<<"$(tls "$T/pki" client) --token_file=$T/pki/token"
  MODE=ps_servers
fi

write_blobs "$T" 7 240 60 3 0.6   # overlapping classes: the loss stays well above 0
DATA='csv:train.csv;test.csv'
CK="$T/ckpt"
mkdir -p "$CK"

COORD_FLAGS=()
[ "$MODE" = restart ] && COORD_FLAGS=(--state_dir="$T/state")
FORGET_S=5
# Steps per job: the kill comes a status call or two after step 20, which
# on a fast machine is thousands of steps (CI once saw a 4000-step job
# killed at step 3267); the ps cases on two shards then read the shards'
# gauges while generation 1 runs, so they run longer.
STEPS=6000
[ "$MODE" = ps_servers ] && STEPS=20000
[ "$MODE" = restart ] && STEPS=12000
shard_metrics=()   # the lockstep-server shards' metrics URLs (ps_servers)
if [ "$MODE" = ps_servers ]; then
  shards=()
  for i in 1 2; do
    "$PS" "${SEC_PS[@]}" --listen=127.0.0.1:0 --port_file="$T/ps$i.port" --metrics_host=127.0.0.1 \
      --metrics_port=0 --metrics_port_file="$T/ps$i.metrics" 2>"$T/ps$i.log" & pids+=($!)
    wait_file "$T/ps$i.port"; wait_file "$T/ps$i.metrics"
    shards+=("127.0.0.1:$(cat "$T/ps$i.port")")
    shard_metrics+=("http://127.0.0.1:$(cat "$T/ps$i.metrics")/metrics")
  done
  COORD_FLAGS=(--ps_addresses="$(IFS=,; echo "${shards[*]}")")
fi
# ps_jobs: every shard's lockstep_ps_jobs gauge, space-separated.
ps_jobs() {
  local u out=()
  for u in "${shard_metrics[@]}"; do
    out+=("$(python3 -c 'import sys, urllib.request
for l in urllib.request.urlopen(sys.argv[1], timeout=5).read().decode().splitlines():
    if l.startswith("lockstep_ps_jobs "): print(int(float(l.split()[1])))' "$u")") || return 1
  done
  echo "${out[*]}"
}
# ps_jobs_between LO HI: every shard holds from LO to HI groups.
ps_jobs_between() {
  local n g; n=$(ps_jobs) || return 1
  for g in $n; do [ "$g" -ge "$1" ] && [ "$g" -le "$2" ] || return 1; done
}
"$COORD" "${SEC_COORD[@]}" --listen=127.0.0.1:0 --port_file="$T/coord.port" "${COORD_FLAGS[@]}" 2>"$T/coord.log" & pids+=($!)
cpid=$!
wait_file "$T/coord.port"
C="127.0.0.1:$(cat "$T/coord.port")"
regrouped() {
  cli status "$1" --json | json "int(d.get('generation', 0)) == 1 and not d.get('regrouping') and len(d['ranks']) == 2 and int(d['membership_events'][0]['step']) >= 0" | grep -q True
}

# restart_coordinator NAME: SIGKILL, wait until every live worker logged
# failed heartbeats for 1 s, restart on the same port and --state_dir.
restart_coordinator() {
  local offsets=() w
  for w in "${live[@]}"; do offsets+=("$T/w${w#w-}.log:$(log_size "$T/w${w#w-}.log")"); done
  kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
  local k0; k0=$(now_ms)
  wait_until $(( k0 + 5000 )) down_for 1000 "${offsets[@]}" \
    || fail "$1: the workers did not see the coordinator down within 5 s"
  rm -f "$T/coord.port"
  "$COORD" "${SEC_COORD[@]}" --listen="$C" --port_file="$T/coord.port" "${COORD_FLAGS[@]}" 2>>"$T/coord2.log" & pids+=($!)
  cpid=$!
  wait_file "$T/coord.port"
  echo "$1: coordinator SIGKILLed after the regroup, restarted $(( $(now_ms) - k0 )) ms later"
}

for _ in 1 2 3; do start_worker; done

# shrink_case NAME VICTIM_INDEX -- SUBMIT FLAGS...  (3 idle workers, the
# victim among them; leaves the victim dead and a fresh worker started)
shrink_case() {
  local name=$1 vi=$2; shift 3
  local SPEC=(--model=mlp:8 --dataset="$DATA" --batch=24 --steps="$STEPS" --lr=0.1 "$@")
  echo "== $name"
  local a; a=$(cli submit --workers=3 --on_worker_lost=shrink "${SPEC[@]}") || fail "$name: submit A: $a"
  local vid="w-$vi"
  # One status call between step 20 and the kill (gives the victim's rank
  # too): every call before the kill lets a fast machine run hundreds of
  # steps (CI once saw the kill land at step 3267 of 4000).
  local vrank; vrank=$(poll_rank_at "$a" 20 "$vid") || fail "$name: A made no progress: $(cli status "$a")"
  local held=""
  if [ -n "$PS" ]; then
    held=$(ps_jobs) || fail "$name: shard metrics"
    for g in $held; do [ "$g" -gt 0 ] || fail "$name: a shard holds no group of the running job: $held"; done
  fi
  kill -"$SIGNAL" "${wpid[$vi]}"
  local keep=(); for w in "${live[@]}"; do [ "$w" != "$vid" ] && keep+=("$w"); done; live=("${keep[@]}")
  local t0; t0=$(now_ms)
  [ "$(state_of "$a")" = RUNNING ] || fail "$name: A not RUNNING at the kill: $(cli status "$a")"
  [ -z "$PS" ] || echo "$name: groups held per shard before the kill: $held"
  wait_until $(( t0 + REGROUP_MS )) regrouped "$a" \
    || fail "$name: A not regrouped within ${REGROUP_MS} ms of the SIG$SIGNAL: $(cli status "$a")"
  local t1; t1=$(now_ms)
  if [ -n "$PS" ]; then
    # Generation 1 uses as many groups per shard as generation 0 did;
    # generation 0's are forgotten (without the Control message each shard
    # would hold both generations' until idle eviction).
    local most; most=$(tr ' ' '\n' <<<"$held" | sort -n | tail -1)
    # Polled from the shards' gauges alone (no CLI call, each of which lets
    # a fast machine run hundreds of steps): every shard holds a group
    # (generation 1's: the job is still running, since an ended job's are
    # all dropped) and none more than before the kill.
    wait_until $(( $(now_ms) + FORGET_S * 1000 )) ps_jobs_between 1 "$most" \
      || fail "$name: after the regroup the shards hold $(ps_jobs) groups, before the kill $held (generation 0's not forgotten, or A ended before they were read): $(cli status "$a")"
    echo "$name: groups held per shard after the regroup: $(ps_jobs)"
  fi
  if [ "$MODE" = restart ]; then
    # A ps job on the coordinator's own shard lost the shard's sums: the
    # restarted coordinator regroups it (a "restart" event after the shrink)
    # and it ends with the same hash as a ring job would.
    [ "$(state_of "$a")" = RUNNING ] \
      || fail "$name: A ended before the coordinator restart (it should run for seconds after the regroup): $(cli status "$a")"
    restart_coordinator "$name"
  fi
  # (Generous: only that it finishes is checked; TSan-built daemons in CI
  # are several times slower.)
  wait_until $(( t1 + 300000 )) finished "$a" || fail "$name: A did not finish: $(cli status "$a")"
  local t2; t2=$(now_ms)
  local st; st=$(cli status "$a" --json)
  [ "$(json "d['state']" <<<"$st")" = SUCCEEDED ] || fail "$name: A not SUCCEEDED: $(cli status "$a")"
  local s; s=$(json "int(d['membership_events'][0]['step'])" <<<"$st")
  local ev; ev=$(json "(d['membership_events'][0]['kind'], d['membership_events'][0]['worker_id'], d['membership_events'][0]['rank'], d['membership_events'][0]['world_before'], d['membership_events'][0]['world_after'], d['world'])" <<<"$st")
  [ "$ev" = "('shrink', '$vid', $vrank, 3, 2, 2)" ] || fail "$name: shrink event: $ev: $(cli status "$a")"
  json "' '.join(r['worker_id'] for r in d['ranks'])" <<<"$st" | grep -q "$vid" \
    && fail "$name: $vid still a rank of A: $(cli status "$a")"
  local ha; ha=$(json "d['final_hash']" <<<"$st")
  cli status "$a" | grep -q "shrink: 3 -> 2 workers (generation 1), continued at step $s; worker $vid (rank $vrank" \
    || fail "$name: status line: $(cli status "$a")"
  if [ "$SIGNAL" = TERM ]; then
    # It left (DeregisterWorker), it was not found lost.
    json "d['membership_events'][0]['reason']" <<<"$st" | grep -q "^worker $vid (rank $vrank, .*) left: shutting down (SIGTERM)\$" \
      || fail "$name: the shrink's reason is not the worker's leaving: $(json "d['membership_events'][0]['reason']" <<<"$st")"
  fi
  [ "$(json "int(d['checked_steps']) > 0 and int(d['mismatched_steps']) == 0" <<<"$st")" = True ] \
    || fail "$name: sync: $(cli status "$a")"
  if [ -n "$PS" ]; then
    wait_until $(( $(now_ms) + FORGET_S * 1000 )) ps_jobs_between 0 0 \
      || fail "$name: A ended but the shards still hold $(ps_jobs) groups"
    echo "$name: groups held per shard once A ended: $(ps_jobs)"
  fi

  start_worker   # the victim's replacement
  # B: the uninterrupted K=3 run, a checkpoint every step, cancelled once
  # step s's is on disk.
  local b; b=$(cli submit --workers=3 "${SPEC[@]}" --checkpoint_dir="$CK" --checkpoint_every_steps=1 \
    --checkpoint_keep=100000) || fail "$name: submit B: $b"
  local file; file=$(printf '%s/job-%s/step-%012d.ckpt' "$CK" "$b" "$s")
  wait_until $(( $(now_ms) + 120000 )) test -f "$file" || fail "$name: B wrote no $file: $(cli status "$b")"
  cli cancel "$b" >/dev/null || fail "$name: cancel B"
  wait_until $(( $(now_ms) + 10000 )) idle "${live[@]}" >/dev/null
  # C: resumed from step s with K=2.
  local out; out=$(cli submit --workers=2 "${SPEC[@]}" --resume_from="$file" --follow --json) \
    || fail "$name: C exit $?: $out"
  [ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "$name: C: $out"
  local hc; hc=$(json "d['final_hash']" <<<"$out")
  [ -n "$ha" ] && [ "$ha" = "$hc" ] || fail "$name: A's final hash $ha != C's (K=3 to step $s, then K=2) $hc"
  # D: the same checkpoint resumed with K=3 (the uninterrupted run) ends
  # elsewhere: the comparison above can fail.
  out=$(cli submit --workers=3 "${SPEC[@]}" --resume_from="$file" --follow --json) || fail "$name: D exit $?: $out"
  local hd; hd=$(json "d['final_hash']" <<<"$out")
  [ "$hd" != "$ha" ] || fail "$name: the K=3 continuation has A's hash too ($hd): the test cannot tell"
  awk -v n="$name" -v s="$s" -v a="$((t1 - t0))" -v b="$((t2 - t0))" -v h="$ha" \
    -v sig="SIG$SIGNAL" 'BEGIN { printf "%s: regrouped %.2f s after %s, continued at step %d with K=2, SUCCEEDED %.2f s after the kill; final hash %s = K=3 to step %d then K=2 (resumed checkpoint)\n", n, a / 1000, sig, s, b / 1000, h, s }'
  wait_until $(( $(now_ms) + 10000 )) idle "${live[@]}" || fail "$name: workers not idle: $(cli workers)"
}

if [ "$MODE" = ps_servers ]; then
  shrink_case "SIGKILL ps/tcp on 2 lockstep-server shards K=3 -> 2" 2 -- --sync=ps --ps_transport=tcp --ps_shards=2
  wait_until $(( $(now_ms) + FORGET_S * 1000 )) ps_jobs_between 0 0 \
    || fail "the shards still hold $(ps_jobs) groups after every job ended"
  echo PASS
  exit 0
fi
if [ "$MODE" = sigterm ]; then
  shrink_case "SIGTERM ring/tcp K=3 -> 2" 2 --
  echo PASS
  exit 0
fi
shrink_case "SIGKILL ring/grpc K=3 -> 2" 3 -- --peer_transport=grpc
# w-2 this time (a middle rank: the survivors are renumbered).
shrink_case "SIGKILL ps/tcp K=3 -> 2" 2 -- --sync=ps --ps_transport=tcp
echo PASS
