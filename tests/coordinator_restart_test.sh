#!/usr/bin/env bash
# Issue 10, a coordinator that survives SIGKILL: real processes on
# 127.0.0.1, a coordinator with --state_dir and 2 worker daemons (OS-chosen
# ports; the restarted coordinator listens on the port the first one got).
#   1. job 1 runs uninterrupted (the reference final hash);
#   2. job 2, the same spec: its coordinator is SIGKILLed mid-job (the
#      job at step >= 200) and restarted on the same port with
#      the same --state_dir once both workers logged failed heartbeats
#      over more than 3.5 s (> lost_after; polled, within 10 s of the
#      kill), and within BOUND_S of the kill:
#        * `jobs`, `status`, `sync` show both jobs and their whole histories
#          (job 2's checks the database had not committed at the kill come
#          back from the workers' resent reports);
#        * the workers are back under their ids w-1, w-2 (not re-registered);
#        * job 2 continues and ends SUCCEEDED with job 1's final hash;
#   3. job 3: the coordinator is SIGKILLed as both workers log "job done"
#      and restarted at once: SUCCEEDED, job 1's hash, every step checked;
#   4. job 4: the coordinator's database commits nothing from the check of
#      step HOLD_FROM on (--fault_hold_state_from_step); it is SIGKILLed once
#      the job ended and restarted, so the restarted one lacks the job's end
#      and its last checks: both workers resend their kept reports from the
#      first step it lacks, then ReportDone; SUCCEEDED, every step checked;
#   5. a further coordinator start on a held --state_dir is refused (exit 2).
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=15
BOUND_S=180
STEPS=6000
HOLD_FROM=5500
source "$(dirname "$0")/e2e_lib.sh"

write_blobs "$T" 11 240 60
DATA='csv:train.csv;test.csv'
S="$T/state"

start_coordinator
stepped() { [ "$(cli status "$1" --json 2>/dev/null | json "int(d.get('step', 0))" 2>/dev/null)" -ge "$2" ] 2>/dev/null; }
ended() { case "$(field "$1" state 2>/dev/null)" in SUCCEEDED|FAILED|CANCELLED) return 0;; esac; return 1; }

for i in 1 2; do
  "$WORKER" --insecure --coordinator="$C" --data_dir="$T" --port_file="$T/w$i.port" --metrics_port=-1 \
    2>"$T/w$i.log" & pids+=($!)
  wait_file "$T/w$i.port"
  for _ in $(seq 100); do [ "$(cli workers | grep -c IDLE)" = "$i" ] && break; sleep 0.05; done
done
[ "$(cli workers | grep -c IDLE)" = 2 ] || fail "2 idle workers expected: $(cli workers)"

SPEC=(--model=mlp:8 --dataset="$DATA" --workers=2 --batch=24 --steps=$STEPS --lr=0.1)
echo "== job 1, uninterrupted"
J1=$(cli submit "${SPEC[@]}") || fail "submit 1: $J1"
wait_until $(( $(now_ms) + BOUND_S * 1000 )) ended "$J1" || fail "job $J1 did not end: $(cli status "$J1")"
[ "$(field "$J1" state)" = SUCCEEDED ] || fail "job $J1: $(cli status "$J1")"
H1=$(field "$J1" final_hash)
[ -n "$H1" ] || fail "job $J1 has no final hash"
echo "job $J1 final hash $H1"

echo "== job 2, coordinator SIGKILLed mid-job and restarted"
J2=$(cli submit "${SPEC[@]}") || fail "submit 2: $J2"
wait_until $(( $(now_ms) + 30000 )) stepped "$J2" 200 || fail "job $J2 made no progress: $(cli status "$J2")"
o1=$(log_size "$T/w1.log"); o2=$(log_size "$T/w2.log")
kill_coordinator
t0=$(now_ms)
# An outage longer than lost_after (3 s): the workers keep the job while the
# coordinator refuses connections. Restarted once both workers logged failed
# heartbeats over more than OUTAGE_MS (their own timestamps), at most
# DOWN_BOUND_S after the kill.
OUTAGE_MS=3500; DOWN_BOUND_S=10
echo "killed the coordinator (job $J2 at step >= 200)"
wait_until $(( t0 + DOWN_BOUND_S * 1000 )) down_for $OUTAGE_MS "$T/w1.log:$o1" "$T/w2.log:$o2" \
  || fail "the workers did not see the coordinator down for ${OUTAGE_MS} ms within ${DOWN_BOUND_S}s"
td=$(now_ms)
echo "both workers saw the coordinator down for >= ${OUTAGE_MS} ms; restarting on port $PORT $(( td - t0 )) ms after the kill"
start_coordinator
wait_until $(( t0 + BOUND_S * 1000 )) ended "$J2" || fail "job $J2 did not end within ${BOUND_S}s of the kill: $(cli status "$J2")"
t1=$(now_ms)
[ "$(field "$J2" state)" = SUCCEEDED ] || fail "job $J2 after the restart: $(cli status "$J2")"
H2=$(field "$J2" final_hash)
[ "$H2" = "$H1" ] || fail "job $J2 final hash $H2 != uninterrupted $H1"
echo "job $J2 SUCCEEDED $(( (t1 - t0) )) ms after the kill ($(( td - t0 )) ms down), final hash $H2 (= job $J1's)"

# The workers came back under their ids (the restarted coordinator knew them).
W=$(cli workers) || fail "workers: $W"
grep -Eq '^w-1 ' <<<"$W" && grep -Eq '^w-2 ' <<<"$W" || fail "workers w-1, w-2 expected: $W"
grep -q '^w-3 ' <<<"$W" && fail "a worker re-registered: $W"
grep -q "registering again" "$T"/w*.log && fail "a worker re-registered"

# jobs / status / sync still show both jobs and their history.
L=$(cli jobs) || fail "jobs: $L"
[ "$(grep -c SUCCEEDED <<<"$L")" = 2 ] || fail "jobs: 2 SUCCEEDED expected: $L"
S1=$(cli sync "$J1") || fail "sync $J1: $S1"
grep -q "job $J1: $STEPS steps checked, 0 mismatched" <<<"$S1" || fail "sync $J1: $S1"
grep -q "step   $(( STEPS - 1 ))  all 2 ranks match" <<<"$S1" || fail "sync $J1 newest check: $S1"
S2=$(cli sync "$J2" --json) || fail "sync $J2: $S2"
C2=$(json "int(d['checked_steps'])" <<<"$S2")
M2=$(json "int(d['mismatched_steps'])" <<<"$S2")
[ "$M2" = 0 ] || fail "job $J2 mismatches: $S2"
# Every step is checked: the checks committed before the kill (every 25 ms),
# the ones the database had not committed (each worker, on its new report
# stream, probes where its rank resumes and resends the kept reports from
# there: the restarted coordinator lacks those after its newest stored
# check; none may be lacking if the kill came right after a commit), and
# every step after the restart. (6000 steps, so that the
# kill lands mid-job even when the first status poll comes seconds late on
# a loaded machine.)
[ "$C2" = "$STEPS" ] || fail "job $J2 checked $C2 of $STEPS steps"
grep -q "resent step reports.* job=$J2 reports=[0-9]* from_step=[0-9]" "$T/w1.log" &&
  grep -q "resent step reports.* job=$J2 reports=[0-9]* from_step=[0-9]" "$T/w2.log" \
  || fail "a worker's new stream did not probe (from_step) and resend: $(grep -h 'resent step reports' "$T"/w*.log)"
echo "job $J2: $C2 of $STEPS steps checked after the restart, 0 mismatched; $(grep -h 'resent step reports' "$T/w1.log" | head -1)"
P2=$(cli sync "$J2" --max_entries=0 --all) || fail "sync $J2 --all: $P2"
[ "$(grep -c 'all 2 ranks match' <<<"$P2")" = "$STEPS" ] || fail "sync $J2 --all listed $(grep -c 'all 2 ranks match' <<<"$P2") of $STEPS checks"
# Paging reads job 1's whole history from the database.
P=$(cli sync "$J1" --max_entries=0 --all) || fail "sync --all: $P"
[ "$(grep -c 'all 2 ranks match' <<<"$P")" = "$STEPS" ] || fail "sync --all listed $(grep -c 'all 2 ranks match' <<<"$P") of $STEPS checks"

echo "== job 3, coordinator SIGKILLed as the workers finish, restarted at once"
# Their ReportDone is in flight, answered or not: retried while the
# coordinator is down (after the kept step reports), or asked for again by
# the restarted one when the job's end was not committed (the kept step
# reports go first). Either way the job ends SUCCEEDED with the
# uninterrupted hash and every step checked.
wait_until $(( $(now_ms) + 10000 )) eval '[ "$(cli workers | grep -c IDLE)" = 2 ]' \
  || fail "workers not idle: $(cli workers)"
kill_at_job_done "${SPEC[@]}"
J3=$JD
wait_until $(( t0 + 60000 )) ended "$J3" || fail "job $J3 did not end: $(cli status "$J3")"
[ "$(field "$J3" state)" = SUCCEEDED ] || fail "job $J3 after the restart: $(cli status "$J3")"
[ "$(field "$J3" final_hash)" = "$H1" ] || fail "job $J3 final hash $(field "$J3" final_hash) != $H1"
C3=$(cli sync "$J3" --json | json "int(d['checked_steps'])")
[ "$C3" = "$STEPS" ] || fail "job $J3 checked $C3 of $STEPS steps"
how="its end was committed before the kill"
after=$(tail -c +$((DONE_O1 + 1)) "$T/w1.log")
grep -q "the coordinator was down" <<<"$after" && how="its ReportDone retried after the step reports"
grep -q "ReportDone sent again" <<<"$after" && how="asked again by the restarted coordinator"
echo "job $J3 SUCCEEDED $(( $(now_ms) - t0 )) ms after the kill ($how), $C3 of $STEPS steps checked, final hash = job $J1's"

echo "== job 4, the database holds its last $((STEPS - HOLD_FROM)) checks and its end uncommitted at the kill"
# --fault_hold_state_from_step: from the check of step HOLD_FROM on, the
# database commits nothing. The kill comes once the job has ended on that
# coordinator (both ReportDone calls answered), so the restarted one always
# lacks the job's end and its last checks: it must ask both workers for
# their ReportDone again, and they must first send their kept step reports
# from the first step it lacks. (Coordinator 3 stops with SIGTERM, which
# commits what it queued: nothing of job 3 comes back to this one.)
kill -TERM "$cpid"; wait "$cpid" 2>/dev/null
start_coordinator --fault_hold_state_from_step=$HOLD_FROM
held_log="$T/coord$coord_starts.log"
wait_until $(( $(now_ms) + 20000 )) eval '[ "$(cli workers | grep -c IDLE)" = 2 ]' \
  || fail "workers not idle after the restart: $(cli workers)"
o1=$(log_size "$T/w1.log"); o2=$(log_size "$T/w2.log")
J4=$(cli submit "${SPEC[@]}") || fail "submit 4: $J4"
wait_until $(( $(now_ms) + BOUND_S * 1000 )) ended "$J4" || fail "job $J4 did not end: $(cli status "$J4")"
grep -q "fault: the state database commits nothing from now on.*job=$J4 step=$HOLD_FROM" "$held_log" \
  || fail "the coordinator did not hold its database at step $HOLD_FROM: $(grep fault "$held_log")"
kill_coordinator
t0=$(now_ms)
start_coordinator
wait_until $(( t0 + 60000 )) ended "$J4" || fail "job $J4 did not end after the restart: $(cli status "$J4")"
[ "$(field "$J4" state)" = SUCCEEDED ] || fail "job $J4 after the restart: $(cli status "$J4")"
[ "$(field "$J4" final_hash)" = "$H1" ] || fail "job $J4 final hash $(field "$J4" final_hash) != $H1"
C4=$(cli sync "$J4" --json | json "int(d['checked_steps'])")
[ "$C4" = "$STEPS" ] || fail "job $J4 checked $C4 of $STEPS steps"
P=$(cli sync "$J4" --max_entries=0 --all) || fail "sync --all: $P"
[ "$(grep -c 'all 2 ranks match' <<<"$P")" = "$STEPS" ] || fail "sync $J4 --all listed $(grep -c 'all 2 ranks match' <<<"$P") of $STEPS checks"
for w in 1 2; do
  o=$o1; [ "$w" = 2 ] && o=$o2
  line=$(tail -c +$((o + 1)) "$T/w$w.log" | grep "step reports sent again before ReportDone (the coordinator restarted).*job=$J4" |
         grep 'error=""' | sed -n 1p) \
    || fail "worker $w did not resend its step reports before ReportDone: $(tail -c +$((o + 1)) "$T/w$w.log" | grep -i "again" | tail -3)"
  # From the first step the restarted coordinator lacked: at most
  # HOLD_FROM (nothing from there on was committed).
  from=$(sed -n 's/.* from_step=\([0-9]*\).*/\1/p' <<<"$line")
  sent=$(sed -n 's/.* reports=\([0-9]*\).*/\1/p' <<<"$line")
  # (The first resend that went through: a failed one is asked again.)
  { [ -n "$from" ] && [ "$from" -le "$HOLD_FROM" ] && [ "$sent" = $((STEPS - from)) ]; } \
    || fail "worker $w resent: $line"
  echo "worker $w: $(grep -o 'reports=.*kept=[0-9]*' <<<"$line")"
done
echo "job $J4 SUCCEEDED $(( $(now_ms) - t0 )) ms after the kill, its end and its checks from step $HOLD_FROM uncommitted then; $C4 of $STEPS steps checked, final hash = job $J1's"

echo "== a second coordinator on the same --state_dir is refused"
"$COORD" --insecure --listen=127.0.0.1:0 --state_dir="$S" --metrics_port=-1 2>"$T/coord_refused.log"
rc=$?
[ "$rc" = 2 ] || fail "second coordinator on $S: exit $rc, expected 2"
grep -q "in use by another coordinator" "$T/coord_refused.log" || fail "no clear error: $(cat "$T/coord_refused.log")"
echo PASS
