#!/usr/bin/env bash
# Issue 10, a lost worker under on_worker_lost=wait: real processes on
# 127.0.0.1 (OS-chosen ports), a coordinator with its default lost_after
# (3 s) and worker daemons. Cases (the optional 4th argument, default
# "ring_grpc ps_tcp timeout"; //tests:wait_ring_tcp_test runs "ring_tcp"):
# ring over gRPC, ps over raw TCP and ring over raw TCP
# (--peer_transport=tcp), each K=3:
#   A  a K=3 wait job; once it has run 20 steps, one worker is SIGKILLed.
#      Asserted, with deadlines and no sleeps to synchronise: within
#      LOST_S (5 s) of the kill the job is RUNNING, paused (regrouping,
#      generation 1), waiting_for_ranks = [the lost rank] and its reason
#      says "waiting for a worker to replace rank R (lost: worker w-N (rank
#      R, ...". Then a FRESH worker daemon is started: within RESUME_S (5 s)
#      of its port file (it registers right after) it has taken rank R
#      (generation 2, a "replace" event naming it, with the step s the group
#      continued at, the "wait" event at the same s) and the group runs
#      again; the job ends SUCCEEDED with every step checked in sync.
#   B  the same spec, uninterrupted, K=3: A's final hash must EQUAL B's (K
#      and the global batch never changed; the newcomer received rank 0's
#      weights + optimizer state at s; README "Failure semantics").
#   T  no replacement: a K=3 wait job with --wait_timeout_ms=2000 (ps over
#      gRPC) loses a worker and nobody registers: FAILED "no worker
#      replaced rank R within 2s (spec.wait_timeout_ms 2000); worker w-N
#      (rank R, ...) lost: ..." within LOST_S + 2 s + 1 s of the kill, and
#      the survivors idle within 3 s of that.
#   R  ("restart", //tests:wait_restart_test) as A over a raw-TCP ring,
#      with the coordinator (--state_dir) SIGKILLed while the job waits and
#      restarted on its address: the job still waits for the same rank with
#      the same deadline, then the fresh worker takes it and the final hash
#      equals B's.
#   W  ("worker_restart", //tests:wait_worker_restart_test) as A over a
#      raw-TCP ring, but the killed worker's process is restarted at once
#      on its own address (a supervisor's restart): the coordinator refuses
#      the new process while the old registration is live (it has no
#      token: "already registered by live worker w-N ... a restarted worker
#      is accepted once the old one is LOST", in the new daemon's log, when
#      it asked before the old one was LOST; it says so when it did not),
#      the daemon retries, and once the old one is LOST the
#      job waits for its rank and the new registration, at the same
#      address, takes it: resumed within LOST_S + RESUME_S of the restart,
#      the final hash equals B's.
# Measured times are printed.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"; CASES="${4:-ring_grpc ps_tcp timeout}"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=20
LOST_S=5
RESUME_S=5
source "$(dirname "$0")/e2e_lib.sh"

write_blobs "$T" 7 240 60 3 0.6   # overlapping classes: the loss stays well above 0
DATA='csv:train.csv;test.csv'

if [[ " $CASES " == *" restart "* ]]; then
  S="$T/state"
  start_coordinator  # e2e_lib.sh: --state_dir=$S, so it can restart
else
  "$COORD" --insecure --listen=127.0.0.1:0 --port_file="$T/coord.port" 2>"$T/coord.log" & pids+=($!)
  wait_file "$T/coord.port"
  C="127.0.0.1:$(cat "$T/coord.port")"
fi
# waiting JOB RANK: paused, waiting for a worker to take RANK.
waiting() {
  cli status "$1" --json | json "d['state'] == 'RUNNING' and d.get('regrouping', False) and [int(r) for r in d.get('waiting_for_ranks', [])] == [$2] and d['reason'].startswith('waiting for a worker to replace rank $2 (lost: worker ')" | grep -q True
}
# (kill_worker, address_of, poll_rank_at, regrouped_to: e2e_lib.sh)

for _ in 1 2 3; do start_worker; done

# wait_case NAME VICTIM_INDEX -- SUBMIT FLAGS...  (3 idle workers, the
# victim among them; leaves the victim dead and its replacement idle)
wait_case() {
  local name=$1 vi=$2; shift 3
  local SPEC=(--model=mlp:8 --dataset="$DATA" --batch=24 --steps=8000 --lr=0.1 "$@")
  echo "== $name"
  local a; a=$(cli submit --workers=3 --on_worker_lost=wait "${SPEC[@]}") || fail "$name: submit A: $a"
  local vid="w-$vi"
  # One status call between step 20 and the kill (the job runs 1000 or
  # more steps/s on a fast machine; each call takes 0.2-0.6 s).
  local vaddr; vaddr=$(address_of "$vid")
  local vrank; vrank=$(poll_rank_at "$a" 20 "$vid") || fail "$name: A made no progress: $(cli status "$a")"
  kill_worker "$vi"
  [ "$(state_of "$a")" = RUNNING ] || fail "$name: A not RUNNING at the kill: $(cli status "$a")"
  local t0 t1 t2 resume_s=$RESUME_S; t0=$(now_ms)
  if [ -n "${WORKER_RESTART:-}" ]; then
    # The victim's process restarted at once on its own address (kill_worker
    # has reaped the killed one, so its port is free).
    spawn_worker --listen="$vaddr"
    t1=$(now_ms) t2=$t1 resume_s=$(( LOST_S + RESUME_S ))
  else
    wait_until $(( t0 + LOST_S * 1000 )) waiting "$a" "$vrank" \
      || fail "$name: A not waiting for rank $vrank within ${LOST_S}s of the SIGKILL: $(cli status "$a")"
    t1=$(now_ms)
    cli status "$a" | grep -q "wait: rank $vrank lost (generation 1), waiting for a worker to replace it; worker $vid (rank $vrank" \
      || fail "$name: status line while waiting: $(cli status "$a")"
    if [ -n "${WAIT_RESTART:-}" ]; then
      # The coordinator SIGKILLed while the job waits (after every live
      # worker logged failed heartbeats for 1 s) and restarted on the same
      # address and --state_dir: the job comes back waiting for the same rank
      # with the same deadline.
      local deadline; deadline=$(cli status "$a" --json | json "d['wait_deadline_unix_s']")
      local offsets=() w
      for w in "${live[@]}"; do offsets+=("$T/w${w#w-}.log:$(log_size "$T/w${w#w-}.log")"); done
      kill_coordinator
      local k0; k0=$(now_ms)
      wait_until $(( k0 + 5000 )) down_for 1000 "${offsets[@]}" \
        || fail "$name: the workers did not see the coordinator down within 5 s"
      start_coordinator
      local k1; k1=$(now_ms)
      wait_until $(( k1 + 10000 )) waiting "$a" "$vrank" \
        || fail "$name: A not waiting for rank $vrank after the restart: $(cli status "$a")"
      local deadline2; deadline2=$(cli status "$a" --json | json "d['wait_deadline_unix_s']")
      [ "$deadline2" = "$deadline" ] || fail "$name: wait deadline $deadline2 after the restart, $deadline before"
      echo "$name: coordinator SIGKILLed while waiting, restarted $(( k1 - k0 )) ms later; still waiting for rank $vrank, deadline $deadline"
    fi
    # The replacement: a fresh daemon (a new id, a new address).
    spawn_worker
    t2=$(now_ms)
  fi
  local nid="w-$n_workers"
  # resumed: generation 2 decided its start after a "replace", K=3.
  wait_until $(( t2 + resume_s * 1000 )) regrouped_to "$a" 2 replace 3 \
    || fail "$name: A not resumed within ${resume_s}s of $nid's start: $(cli status "$a")"
  local t3; t3=$(now_ms)
  if [ -n "${WORKER_RESTART:-}" ]; then
    [ "$(address_of "$nid")" = "$vaddr" ] \
      || fail "$name: $nid is not at $vid's address $vaddr: $(cli workers)"
    # Refused while w-2 was live. A daemon that starts slowly (a sanitizer
    # build on a loaded host) may first ask after w-2 is LOST: then it is
    # never refused, and any refusal it got must be this one.
    if grep -q "cannot register, retrying" "$T/w$n_workers.log"; then
      grep -q "cannot register, retrying .*is already registered by live worker $vid .*a restarted worker is accepted once the old one is LOST" "$T/w$n_workers.log" \
        || fail "$name: $nid was refused otherwise than for $vid being live: $(grep "cannot register" "$T/w$n_workers.log")"
    else
      echo "$name: $nid first asked after $vid was LOST (a slow start): no refusal to check"
    fi
    cli status "$a" --json | json "d['membership_events'][0]['reason']" | grep -q "^worker $vid (rank $vrank, host [^,]*, $vaddr) lost: no heartbeat for" \
      || fail "$name: the wait's reason: $(cli status "$a" --json | json "d['membership_events'][0]['reason']")"
  fi
  wait_until $(( t3 + 300000 )) finished "$a" || fail "$name: A did not finish: $(cli status "$a")"
  local st; st=$(cli status "$a" --json)
  [ "$(json "d['state']" <<<"$st")" = SUCCEEDED ] || fail "$name: A not SUCCEEDED: $(cli status "$a")"
  local ev; ev=$(json "[(e['kind'], e['worker_id'], e['rank'], int(e['step'])) for e in d['membership_events']]" <<<"$st")
  local s; s=$(json "int(d['membership_events'][-1]['step'])" <<<"$st")
  [ "$ev" = "[('wait', '$vid', $vrank, $s), ('replace', '$nid', $vrank, $s)]" ] \
    || fail "$name: membership events: $ev: $(cli status "$a")"
  [ "$(json "[r['worker_id'] for r in d['ranks']][$vrank] == '$nid' and d['world'] == 3 and d['reason'] == '' and not d.get('waiting_for_ranks')" <<<"$st")" = True ] \
    || fail "$name: ranks after the replacement: $(cli status "$a")"
  [ "$(json "int(d['checked_steps']) > 0 and int(d['mismatched_steps']) == 0" <<<"$st")" = True ] \
    || fail "$name: sync: $(cli status "$a")"
  cli status "$a" | grep -q "replace: $nid as rank $vrank, 2 -> 3 workers (generation 2), joined at step $s" \
    || fail "$name: status line: $(cli status "$a")"
  local ha; ha=$(json "d['final_hash']" <<<"$st")
  wait_until $(( $(now_ms) + 10000 )) idle "${live[@]}" || fail "$name: workers not idle: $(cli workers)"
  # B: the uninterrupted run.
  local out; out=$(cli submit --workers=3 "${SPEC[@]}" --follow --json) || fail "$name: B exit $?: $out"
  [ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "$name: B: $out"
  local hb; hb=$(json "d['final_hash']" <<<"$out")
  [ -n "$ha" ] && [ "$ha" = "$hb" ] || fail "$name: A's final hash $ha != the uninterrupted run's $hb"
  awk -v n="$name" -v s="$s" -v a="$((t1 - t0))" -v b="$((t3 - t2))" -v w="$((t2 - t1))" -v h="$ha" \
    -v r="${WORKER_RESTART:+1}" 'BEGIN {
      lead = r ? sprintf("restarted %.2f s after SIGKILL", a / 1000) \
               : sprintf("waiting %.2f s after SIGKILL; replacement started %.2f s later", a / 1000, w / 1000)
      printf "%s: %s; resumed %.2f s after its start%s at step %d; SUCCEEDED, final hash %s = the uninterrupted run\n",
             n, lead, b / 1000, r ? " (lost_after 3 s)" : "", s, h }'
  wait_until $(( $(now_ms) + 10000 )) idle "${live[@]}" || fail "$name: workers not idle: $(cli workers)"
}

has_case() { [[ " $CASES " == *" $1 "* ]]; }
has_case ring_grpc && wait_case "SIGKILL ring/grpc K=3, wait, replaced" 3 -- --peer_transport=grpc
# w-2 this time (a middle rank).
has_case ps_tcp && wait_case "SIGKILL ps/tcp K=3, wait, replaced" 2 -- --sync=ps --ps_transport=tcp
# Raw-TCP ring (--peer_transport=tcp): the replacement meets the others on
# its data port. w-1 (rank 0) this time: the newcomer becomes rank 0 and
# copies a survivor's state.
has_case ring_tcp && wait_case "SIGKILL ring/tcp K=3, wait, replaced" 1 -- --peer_transport=tcp
# The coordinator restarted while the job waits (//tests:wait_restart_test,
# ring over raw TCP, w-2, a middle rank).
has_case restart && WAIT_RESTART=1 wait_case "SIGKILL ring/tcp K=3, wait, coordinator restarted, replaced" 2 -- \
  --peer_transport=tcp --wait_timeout_ms=120000
# A worker's process restarted on its own address (//tests:wait_worker_restart_test,
# ring over raw TCP, w-2, a middle rank).
has_case worker_restart && WORKER_RESTART=1 wait_case "SIGKILL ring/tcp K=3, wait, the worker restarted at its address" 2 -- \
  --peer_transport=tcp
has_case timeout || { echo PASS; exit 0; }

echo "== no replacement: wait_timeout_ms=2000, ps/grpc"
a=$(cli submit --workers=3 --on_worker_lost=wait --wait_timeout_ms=2000 --model=mlp:8 --dataset="$DATA" \
  --batch=24 --steps=100000 --lr=0.1 --sync=ps --ps_transport=grpc) || fail "T: submit: $a"
victim=${live[0]#w-}
vrank=$(poll_rank_at "$a" 20 "w-$victim") || fail "T: no progress: $(cli status "$a")"
kill_worker "$victim"
t0=$(now_ms)
wait_until $(( t0 + (LOST_S + 3) * 1000 )) finished "$a" \
  || fail "T: not ended within $((LOST_S + 3))s of the SIGKILL: $(cli status "$a")"
t1=$(now_ms)
st=$(cli status "$a" --json)
[ "$(json "d['state']" <<<"$st")" = FAILED ] || fail "T: not FAILED: $(cli status "$a")"
reason=$(json "d['reason']" <<<"$st")
grep -Eq "^no worker replaced rank $vrank within 2s \(spec.wait_timeout_ms 2000\); worker w-$victim \(rank $vrank, host [^,]+, 127.0.0.1:[0-9]+\) lost: no heartbeat for [0-9.]+s$" <<<"$reason" \
  || fail "T: reason: $reason"
wait_until $(( t1 + 3000 )) idle "${live[@]}" || fail "T: survivors not idle within 3 s: $(cli workers)"
t2=$(now_ms)
awk -v a="$((t1 - t0))" -v b="$((t2 - t1))" \
  'BEGIN { printf "no replacement: FAILED %.2f s after SIGKILL (lost_after 3 s + wait_timeout 2 s), survivors idle %.2f s later\n", a / 1000, b / 1000 }'
echo PASS
