#!/usr/bin/env bash
# Issue 10, a coordinator that survives SIGKILL, for ps jobs on the
# coordinator's own parameter-server shard (no --ps_addresses), whose sums
# a restart loses. Real processes on 127.0.0.1: a coordinator with
# --state_dir and 2 worker daemons (OS-chosen ports; a restarted
# coordinator listens on the port the first one got). For
# --ps_transport=grpc and tcp:
#   1. a ps job runs uninterrupted (the reference final hash);
#   2. the same spec: the coordinator is SIGKILLed mid-job (step >= 200)
#      and restarted once both workers logged failed heartbeats over more
#      than 1.5 s (polled, within 10 s of the kill): the job regroups (a
#      "restart" membership event: the ranks continue at the newest step
#      one of them completed) and ends SUCCEEDED with the reference hash,
#      within BOUND_S of the kill, with every step checked once but at
#      most the one before the restart's start (a rank that had not pulled
#      its sum copies the state after it): the checks the database lacked
#      come back as late reports of generation 0. For ps/grpc the
#      coordinator runs with --fault_hold_state_from_step=HOLD_FROM (150)
#      before that job, so its database commits nothing from step 150 on
#      and the restarted one lacks every check from there.
# Then (grpc) the coordinator is SIGKILLed as soon as both workers logged
# "job done" (their ReportDone is in flight, answered or not: it is retried
# while the coordinator is down, or asked again by the restarted one when
# its row was not committed), restarted at once: the job ends SUCCEEDED
# with the reference hash.
# Last (grpc), before the job's first step: the coordinator, restarted with
# --lost_after_ms=30000, starts a job while both workers are SIGSTOPped (so
# they never receive it and no step can complete), is SIGKILLed once the
# job's RUNNING row is committed (polled in the database), the workers are
# continued and the coordinator restarted at once: nobody holds a step, the
# group starts at step 0 (each rank building the initial replica) and the
# job ends SUCCEEDED with the reference hash.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=20
BOUND_S=180
STEPS=3000
HOLD_FROM=150
source "$(dirname "$0")/e2e_lib.sh"

write_blobs "$T" 11 240 60
DATA='csv:train.csv;test.csv'
S="$T/state"

start_coordinator

start_worker
start_worker

for transport in grpc tcp; do
  # (ps/tcp runs 8000 steps: its kill comes after step 200 and a status
  # call or two, which on a fast machine is thousands of steps.)
  steps=$STEPS; [ "$transport" = tcp ] && steps=8000
  SPEC=(--model=mlp:8 --dataset="$DATA" --workers=2 --batch=24 --steps=$steps --lr=0.1
        --sync=ps --ps_transport=$transport)
  echo "== ps/$transport: uninterrupted"
  J1=$(cli submit "${SPEC[@]}") || fail "submit: $J1"
  wait_until $(( $(now_ms) + BOUND_S * 1000 )) finished "$J1" || fail "job $J1 did not end: $(cli status "$J1")"
  [ "$(field "$J1" state)" = SUCCEEDED ] || fail "job $J1: $(cli status "$J1")"
  H1=$(field "$J1" final_hash)
  [ -n "$H1" ] || fail "job $J1 has no final hash"
  echo "job $J1 final hash $H1"
  [ "$transport" = grpc ] && HG=$H1 JG=$J1   # jobs 5 and 6 below run this spec

  echo "== ps/$transport: coordinator SIGKILLed mid-job and restarted"
  if [ "$transport" = grpc ]; then
    # Forced (ps/grpc, whose slower steps keep the kill within the
    # workers' 4096 kept reports): from the check of step HOLD_FROM on the
    # database commits nothing, so the restarted coordinator lacks every
    # check from there and gets them back only as late reports.
    kill -TERM "$cpid"; wait "$cpid" 2>/dev/null
    start_coordinator --fault_hold_state_from_step=$HOLD_FROM
    held_log="$T/coord$coord_starts.log"
  fi
  wait_until $(( $(now_ms) + 10000 )) idle w-1 w-2 || fail "workers not idle: $(cli workers)"
  J2=$(cli submit "${SPEC[@]}") || fail "submit: $J2"
  wait_until $(( $(now_ms) + 30000 )) stepped "$J2" 200 || fail "job $J2 made no progress: $(cli status "$J2")"
  if [ "$transport" = grpc ]; then
    grep -q "fault: the state database commits nothing from now on.*job=$J2 step=$HOLD_FROM" "$held_log" \
      || fail "the coordinator did not hold its database at step $HOLD_FROM: $(grep fault "$held_log")"
  fi
  o1=$(log_size "$T/w1.log"); o2=$(log_size "$T/w2.log")
  kill_coordinator
  t0=$(now_ms)
  wait_until $(( t0 + 10000 )) down_for 1500 "$T/w1.log:$o1" "$T/w2.log:$o2" \
    || fail "the workers did not see the coordinator down for 1500 ms within 10 s"
  td=$(now_ms)
  start_coordinator
  wait_until $(( t0 + BOUND_S * 1000 )) finished "$J2" \
    || fail "job $J2 did not end within ${BOUND_S}s of the kill: $(cli status "$J2")"
  t1=$(now_ms)
  [ "$(field "$J2" state)" = SUCCEEDED ] || fail "job $J2 after the restart: $(cli status "$J2")"
  H2=$(field "$J2" final_hash)
  [ "$H2" = "$H1" ] || fail "job $J2 final hash $H2 != uninterrupted $H1"
  ST=$(cli status "$J2") || fail "status $J2: $ST"
  grep -q "restart: coordinator restarted, regrouped 2 ranks at step [0-9]* (generation 1)" <<<"$ST" \
    || fail "job $J2: no restart regroup in its status: $ST"
  echo "job $J2 SUCCEEDED $(( t1 - t0 )) ms after the kill ($(( td - t0 )) ms down), final hash = job $J1's; $(grep 'restart:' <<<"$ST" | sed 's/;.*//')"
  # Every step is checked once, the ones the database had not committed
  # included (each worker resends its kept generation-0 reports as late
  # reports), except the step before the restart's start when a rank had
  # not run it (it copied the state after it): at most that one.
  start=$(grep -o 'regrouped 2 ranks at step [0-9]*' <<<"$ST" | grep -o '[0-9]*$')
  C2=$(cli sync "$J2" --json | json "int(d['checked_steps'])")
  P2=$(cli sync "$J2" --max_entries=0 --all) || fail "sync $J2 --all: $P2"
  missing=$(python3 -c '
import re, sys
steps = [int(m.group(1)) for m in re.finditer(r"step +([0-9]+) +all 2 ranks match", sys.stdin.read())]
n = int(sys.argv[1])
dups = len(steps) - len(set(steps))
miss = sorted(set(range(n)) - set(steps))
print("dups=%d" % dups if dups else " ".join(map(str, miss)))' "$steps" <<<"$P2")
  case "$missing" in
    "" | "$(( start - 1 ))") ;;
    *) fail "job $J2 (restart start step $start): sync --all lacks steps: $missing" ;;
  esac
  [ "$C2" = $(( steps - $(wc -w <<<"$missing") )) ] || fail "job $J2 checked $C2 of $steps steps (unlisted: ${missing:-none})"
  echo "job $J2: $C2 of $steps steps checked (not checked: ${missing:-none}; start step $start)"
  grep -q "registering again" "$T"/w*.log && fail "a worker re-registered"
done

echo "== ps/grpc: coordinator SIGKILLed as the workers finish, restarted at once"
SPEC=(--model=mlp:8 --dataset="$DATA" --workers=2 --batch=24 --steps=$STEPS --lr=0.1 --sync=ps
      --ps_transport=grpc)
wait_until $(( $(now_ms) + 10000 )) idle w-1 w-2 || fail "workers not idle: $(cli workers)"
kill_at_job_done "${SPEC[@]}"
J3=$JD
wait_until $(( t0 + 30000 )) finished "$J3" || fail "job $J3 did not end: $(cli status "$J3")"
[ "$(field "$J3" state)" = SUCCEEDED ] || fail "job $J3 after the restart: $(cli status "$J3")"
H3=$(field "$J3" final_hash)
[ "$H3" = "$HG" ] || fail "job $J3 final hash $H3 != uninterrupted $HG"
how="its ReportDone retried"
grep -q "ReportDone sent again" "$T"/w*.log && how="asked again by the restarted coordinator"
echo "job $J3 SUCCEEDED $(( $(now_ms) - t0 )) ms after the kill ($how), final hash = job $JG's"

echo "== ps/grpc: coordinator SIGKILLed before the job's first step, restarted at once"
# The job row's state in the database (2 = RUNNING), read-only.
db_state() {
  python3 -c "import sqlite3,sys; c=sqlite3.connect('file:$S/coordinator.db?mode=ro', uri=True); r=c.execute('select state from jobs where id=?', (int(sys.argv[1]),)).fetchone(); print(r[0] if r else '')" "$1"
}
wait_until $(( $(now_ms) + 10000 )) idle w-1 w-2 || fail "workers not idle: $(cli workers)"
kill_coordinator
# Long enough that the stopped workers are not declared lost meanwhile.
start_coordinator --lost_after_ms=30000
wait_until $(( $(now_ms) + 10000 )) idle w-1 w-2 || fail "workers not idle: $(cli workers)"
kill -STOP "${wpid[1]}" "${wpid[2]}"
J4=$(cli submit "${SPEC[@]}") || fail "submit: $J4"
wait_until $(( $(now_ms) + 10000 )) eval '[ "$(db_state "$J4")" = 2 ]' \
  || { kill -CONT "${wpid[1]}" "${wpid[2]}"; fail "job $J4's RUNNING row was not committed: $(cli status "$J4")"; }
kill_coordinator
kill -CONT "${wpid[1]}" "${wpid[2]}"
t0=$(now_ms)
start_coordinator --lost_after_ms=30000
wait_until $(( t0 + BOUND_S * 1000 )) finished "$J4" || fail "job $J4 did not end: $(cli status "$J4")"
[ "$(field "$J4" state)" = SUCCEEDED ] || fail "job $J4 after the restart: $(cli status "$J4")"
H4=$(field "$J4" final_hash)
[ "$H4" = "$HG" ] || fail "job $J4 final hash $H4 != uninterrupted $HG"
ST=$(cli status "$J4") || fail "status $J4: $ST"
grep -q "restart: coordinator restarted, regrouped 2 ranks at step 0 (generation 1)" <<<"$ST" \
  || fail "job $J4: no restart regroup at step 0 in its status: $ST"
echo "job $J4 SUCCEEDED $(( $(now_ms) - t0 )) ms after the kill (no step completed before it), final hash = job $JG's"
echo PASS
