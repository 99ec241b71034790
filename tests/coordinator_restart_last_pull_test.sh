#!/usr/bin/env bash
# Issue 10, a coordinator restart while a rank is still pulling the last
# sum of a ps job on the coordinator's own shard. Real processes on
# 127.0.0.1: a coordinator with --state_dir, w-1 and w-2; w-2 holds its pull
# of the last step until a file exists (--fault_hold_pull_step, test-only),
# so w-1 finishes (job done) while w-2 has pushed but not pulled:
#   1. the same spec with the file present: the uninterrupted hash;
#   2. the file absent: once w-1 logged "job done", the coordinator is
#      SIGKILLed, the file created (w-2's pull fails: the shard is gone) and
#      the coordinator restarted at once. The restart regroups the job with
#      w-1 holding the final state (its done committed, or sent again when
#      asked); w-2 copies it at the final step and finishes: SUCCEEDED with
#      the uninterrupted hash, within BOUND_S of the kill.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=20
BOUND_S=60
STEPS=400
source "$(dirname "$0")/e2e_lib.sh"

write_blobs "$T" 11 240 60
DATA='csv:train.csv;test.csv'
S="$T/state"
GO="$T/go"

start_coordinator
done_logged() { tail -c +"$2" "$1" | grep -q "job done job=$3 "; }

start_worker
start_worker --fault_hold_pull_step=$((STEPS - 1)) --fault_hold_pull_file="$GO"

# Over gRPC (the pull is one RPC issued after the hold, so it meets the
# restarted coordinator); over tcp the shard's result has already reached the
# held worker's socket before the kill, so its pull is not lost.
SPEC=(--model=mlp:8 --dataset="$DATA" --workers=2 --batch=24 --steps=$STEPS --lr=0.1 --sync=ps
      --ps_transport=grpc)
echo "== uninterrupted (the held pull's file exists)"
touch "$GO"
J1=$(cli submit "${SPEC[@]}") || fail "submit: $J1"
wait_until $(( $(now_ms) + BOUND_S * 1000 )) finished "$J1" || fail "job $J1 did not end: $(cli status "$J1")"
[ "$(field "$J1" state)" = SUCCEEDED ] || fail "job $J1: $(cli status "$J1")"
H1=$(field "$J1" final_hash)
[ -n "$H1" ] || fail "job $J1 has no final hash"
echo "job $J1 final hash $H1"

echo "== w-2 holds its last pull; w-1 finishes; the coordinator is SIGKILLed and restarted"
wait_until $(( $(now_ms) + 10000 )) idle w-1 w-2 || fail "workers not idle: $(cli workers)"
rm -f "$GO"
o1=$(log_size "$T/w1.log"); o2=$(log_size "$T/w2.log")
J2=$(cli submit "${SPEC[@]}") || fail "submit: $J2"
wait_until $(( $(now_ms) + BOUND_S * 1000 )) done_logged "$T/w1.log" $((o1 + 1)) "$J2" \
  || fail "job $J2: w-1 did not finish: $(cli status "$J2")"
done_logged "$T/w2.log" $((o2 + 1)) "$J2" && fail "w-2 finished job $J2 with its pull held"
kill_coordinator
t0=$(now_ms)
touch "$GO"
start_coordinator
wait_until $(( t0 + BOUND_S * 1000 )) finished "$J2" \
  || fail "job $J2 did not end within ${BOUND_S}s of the kill: $(cli status "$J2")"
t1=$(now_ms)
[ "$(field "$J2" state)" = SUCCEEDED ] || fail "job $J2 after the restart: $(cli status "$J2")"
H2=$(field "$J2" final_hash)
[ "$H2" = "$H1" ] || fail "job $J2 final hash $H2 != uninterrupted $H1"
# w-2 continued at the final step from w-1's state (not by training again).
tail -c +$((o2 + 1)) "$T/w2.log" | grep "regroup: continuing in the new group job=$J2 " \
  | grep -q "start_step=$STEPS state_from_rank=0" \
  || fail "w-2 did not copy w-1's final state: $(tail -c +$((o2 + 1)) "$T/w2.log" | grep regroup)"
how="its done committed before the kill"
grep -q "ReportDone sent again" "$T/w1.log" && how="its done sent again when asked"
echo "job $J2 SUCCEEDED $(( t1 - t0 )) ms after the kill: w-2 copied w-1's final state ($how), final hash = job $J1's"
echo PASS
