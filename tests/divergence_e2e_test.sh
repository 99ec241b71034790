#!/usr/bin/env bash
# Divergence end to end with real processes on 127.0.0.1 (OS-chosen
# ports): a coordinator and five worker daemons; w-2 runs with the
# test-only --fault_flip_step=3 (one bit of its weights flipped after step
# 3 of every job it runs; it is rank 1 of every job it is in). Checks:
#   * K = 3, --on_divergence=repair: SUCCEEDED; the sync history names rank
#     1 and block W0 at step 3, the repair in step 4's combine (rank 1
#     copied rank 0's state over FetchState, step 4 computed again) and the
#     coordinator's repair at step 9; status counts one repair, every rank
#     in sync; the final hash equals the same job's on three fault-free
#     workers (w-2 stopped, w-1 w-3 w-4);
#   * the same in ps mode (--sync=ps --ps_transport=tcp, the
#     coordinator's shard): SUCCEEDED, the same notes, and the final hash
#     equals the fault-free ps run's;
#   * K = 3, --on_divergence=halt: FAILED "replicas diverged at step 3:
#     rank 1 differs from the majority in block W0";
#   * K = 2 (no majority), repair, no checkpoints: FAILED "ranks 0 and 1
#     differ, no majority ... no checkpoint to resolve from ... set
#     --checkpoint_dir and --checkpoint_every_steps", both ranks out of
#     sync, and --follow prints no test accuracy for a job that never
#     evaluated;
#   * K = 2, repair, --checkpoint_every_steps=10 (none before the flip):
#     FAILED "... no majority ... no checkpoint before step 4 to resolve it
#     from ... --checkpoint_every_steps";
#   * K = 2, repair, --checkpoint_every_steps=2: SUCCEEDED; the history
#     shows the no-majority divergence at step 3 and the rollback in step
#     4's combine to the checkpoint of step 2; the final hash equals the
#     same job's on two fault-free workers (w-1 w-3);
#   * K = 4 where w-5's training set has the same shape but other
#     contents: FAILED before step 0 naming rank 3 and both hashes.
# Every job ends within 30 s.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=6
source "$(dirname "$0")/e2e_lib.sh"

mkdir -p "$T/host1" "$T/host5"
python3 - "$T" <<'PY'
import random, sys
t = sys.argv[1]
def write(path, n, seed):
    r = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            c = r.randrange(3)
            xs = [(2.0 if j == c else 0.0) + r.random() - 0.5 for j in range(4)]
            f.write(f"{c}," + ",".join(f"{x:.4f}" for x in xs) + "\n")
write(f"{t}/host1/train.csv", 240, 7)
write(f"{t}/host1/test.csv", 60, 8)
write(f"{t}/host5/train.csv", 240, 9)   # stale: same shape, other examples
write(f"{t}/host5/test.csv", 60, 8)
PY
DATA='csv:train.csv;test.csv'

"$COORD" --insecure --listen=127.0.0.1:0 --port_file="$T/coord.port" 2>"$T/coord.log" & pids+=($!)
wait_file "$T/coord.port"
C="127.0.0.1:$(cat "$T/coord.port")"
cli() { "$CLI" --insecure --coordinator="$C" "$@"; }
for i in 1 2 3 4 5; do
  dir="$T/host1"; [ "$i" = 5 ] && dir="$T/host5"
  extra=(); [ "$i" = 2 ] && extra=(--fault_flip_step=3 --fault_flip_target=weights --fault_flip_index=1)
  "$WORKER" --insecure --coordinator="$C" --listen=127.0.0.1:0 --data_dir="$dir" --port_file="$T/w$i.port" \
    --metrics_port=-1 "${extra[@]}" 2>"$T/w$i.log" & pids+=($!)
  [ "$i" = 2 ] && w2pid=$!
  wait_file "$T/w$i.port"   # registration order = worker ids w-1 .. w-4
  for _ in $(seq 100); do [ "$(cli workers | grep -c IDLE)" = "$i" ] && break; sleep 0.05; done
done
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
JOB=(--model=mlp:8 --dataset="$DATA" --batch=20 --steps=20 --lr=0.1 --momentum=0.9)
timed() {  # timed SECONDS CMD...: runs CMD, fails when it took longer
  local limit=$1; shift
  local t0=$SECONDS
  "$@"; local rc=$?
  [ $((SECONDS - t0)) -le "$limit" ] || fail "took $((SECONDS - t0)) s (> $limit s): $*"
  return $rc
}
wait_idle() { for _ in $(seq 200); do [ "$(cli workers | grep -c IDLE)" = "${1:-5}" ] && return 0; sleep 0.05; done; fail "workers not idle"; }

echo "== K=3, repair"
out=$(timed 30 cli submit --workers=3 "${JOB[@]}" --on_divergence=repair --follow --json)
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "repair job: $out"
python3 -c "
import json,sys; d=json.loads(sys.argv[1])
assert int(d['repairs']) == 1, d
assert d['last_divergence'] == 'step 3: rank 1 differs from the majority in block W0', d
assert not d['out_of_sync'] and all(r['in_sync'] for r in d['ranks']), d
assert d['final_hash'], d" "$out" || fail "repair job figures: $out"
id=$(json "d['job_id']" <<<"$out")
sy=$(cli sync "$id" --json --max_entries=0)
python3 -c "
import json,sys; d=json.loads(sys.argv[1]); c = {int(x['step']): x for x in d['checks']}
assert c[3]['differing_ranks'] == [1] and c[3]['first_differing_block'] == 'W0', c[3]
assert c[3]['note'] == 'divergence: rank 1 differs from the majority in block W0; repair at step 9 from rank 0', c[3]
assert c[4]['note'] == \"repaired in the combine of step 4: rank 1 copied rank 0's state and the step was computed again\", c[4]
assert c[9].get('all_match') and c[9]['note'].startswith('repaired: rank 1 copied rank 0'), c[9]
assert all(c[t].get('all_match') for t in list(range(0, 3)) + list(range(4, 20))), d
assert int(d['mismatched_steps']) == 1, d" "$sy" || fail "repair job history: $sy"
cli sync "$id" | sed -n '1p;5,6p;11p'
grep -q "divergence repair: copied a peer's state" "$T/w2.log" || fail "w-2 did not log the repair"
repaired_hash=$(json "d['final_hash']" <<<"$out")
wait_idle

echo "== K=3, repair, ps mode (raw TCP to the coordinator's shard)"
PS=(--sync=ps --ps_transport=tcp)
out=$(timed 30 cli submit --workers=3 "${JOB[@]}" "${PS[@]}" --follow --json)
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "ps repair job: $out"
[ "$(json "int(d['repairs'])" <<<"$out")" = 1 ] || fail "ps repair job: $out"
id=$(json "d['job_id']" <<<"$out")
sy=$(cli sync "$id" --json --max_entries=0)
python3 -c "
import json,sys; d=json.loads(sys.argv[1]); c = {int(x['step']): x for x in d['checks']}
assert c[3]['differing_ranks'] == [1] and c[3]['first_differing_block'] == 'W0', c[3]
assert c[4]['note'] == \"repaired in the combine of step 4: rank 1 copied rank 0's state and the step was computed again\", c[4]
assert all(c[t].get('all_match') for t in list(range(0, 3)) + list(range(4, 20))), d
assert int(d['mismatched_steps']) == 1, d" "$sy" || fail "ps repair job history: $sy"
ps_repaired_hash=$(json "d['final_hash']" <<<"$out")
wait_idle

echo "== K=3, halt"
out=$(timed 30 cli submit --workers=3 "${JOB[@]}" --on_divergence=halt --follow --json)
[ "$(json "d['state']" <<<"$out")" = FAILED ] || fail "halt job: $out"
[ "$(json "d['reason']" <<<"$out")" = "replicas diverged at step 3: rank 1 differs from the majority in block W0" ] \
  || fail "halt reason: $out"
wait_idle

echo "== K=2, repair: no majority"
t0=$(date +%s%N)
out=$(timed 30 cli submit --workers=2 "${JOB[@]}" --follow); rc=$?
echo "K=2 job without checkpoints: submit to FAILED in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
[ "$rc" = 3 ] || fail "K=2 job exit $rc: $out"
echo "$out" | grep -q "ranks 0 and 1 differ, no majority" || fail "K=2 reason: $out"
echo "$out" | grep -q "no checkpoint to resolve from (the job writes none: set --checkpoint_dir and --checkpoint_every_steps)" \
  || fail "K=2 reason does not say there is no checkpoint: $out"
echo "$out" | grep -q "final test accuracy" && fail "an accuracy for a job that never evaluated: $out"
echo "$out" | grep -q "no test evaluation" || fail "K=2 follow: $out"
id=$(cli jobs --json | json "d['jobs'][-1]['job_id']")
st=$(cli status "$id" --json)
python3 -c "
import json,sys; d=json.loads(sys.argv[1])
assert [r['in_sync'] for r in d['ranks']] == [False, False], d" "$st" || fail "K=2 status: $st"
wait_idle

echo "== K=2, repair, the first checkpoint only after the divergence: FAILED"
out=$(timed 30 cli submit --workers=2 "${JOB[@]}" --checkpoint_dir="$T/ck10" --checkpoint_every_steps=10 --follow --json)
[ "$(json "d['state']" <<<"$out")" = FAILED ] || fail "K=2 late-checkpoint job: $out"
reason=$(json "d['reason']" <<<"$out")
echo "$reason" | grep -Eq "^rank [01] \(w-[12]\): replicas diverged after step 3 with no majority \(found in the combine of step 4\) and there is no checkpoint before step 4 to resolve it from \(on_divergence=repair: write checkpoints more often with --checkpoint_every_steps\)$" \
  || fail "K=2 late-checkpoint reason: $reason"
wait_idle

echo "== K=2, repair, a checkpoint every 2 steps: rolled back, SUCCEEDED"
CK=(--checkpoint_dir="$T/ck" --checkpoint_every_steps=2)
t0=$(date +%s%N)
out=$(timed 30 cli submit --workers=2 "${JOB[@]}" "${CK[@]}" --follow --json)
echo "rolled-back K=2 job: submit to SUCCEEDED in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "K=2 rollback job: $out"
[ "$(json "[r['worker_id'] for r in d['ranks']]" <<<"$out")" = "['w-1', 'w-2']" ] || fail "K=2 rollback job ran on: $out"
python3 -c "
import json,sys; d=json.loads(sys.argv[1])
assert int(d['repairs']) == 1, d
assert d['last_divergence'] == 'step 3: ranks 0 and 1 differ, no majority (first differing block W0)', d
assert not d['out_of_sync'] and all(r['in_sync'] for r in d['ranks']), d" "$out" || fail "K=2 rollback figures: $out"
id=$(json "d['job_id']" <<<"$out")
sy=$(cli sync "$id" --json --max_entries=0)
python3 -c "
import json,sys; d=json.loads(sys.argv[1]); c = {int(x['step']): x for x in d['checks']}
assert c[3].get('no_majority') and c[3]['differing_ranks'] == [0, 1], c[3]
assert c[3]['note'] == 'divergence: ranks 0 and 1 differ, no majority (first differing block W0); resolving from the last checkpoint', c[3]
assert c[4].get('all_match') and c[4]['note'] == 'rolled back in the combine of step 4: no majority, every rank reloaded the checkpoint of step 2 and computed steps 2 to 3 again', c[4]
assert all(c[t].get('all_match') for t in list(range(0, 3)) + list(range(4, 20))), d
assert int(d['mismatched_steps']) == 1 and int(d['checked_steps']) == 20, d" "$sy" || fail "K=2 rollback history: $sy"
cli sync "$id" | sed -n '1p;5,6p'
for w in w1 w2; do
  grep -q "divergence without a majority: rolled back to a checkpoint" "$T/$w.log" || fail "$w did not log the rollback"
done
rolled_back_hash=$(json "d['final_hash']" <<<"$out")
wait_idle

echo "== K=3 without the fault (w-2 stopped): the same final weights as the repaired job"
kill "$w2pid"
for _ in $(seq 200); do [ "$(cli workers | grep -c IDLE)" = 4 ] && [ "$(cli workers | grep -c 'w-2 ')" = 0 ] && break; sleep 0.05; done
out=$(timed 30 cli submit --workers=3 "${JOB[@]}" --follow --json)
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "fault-free job: $out"
[ "$(json "[r['worker_id'] for r in d['ranks']]" <<<"$out")" = "['w-1', 'w-3', 'w-4']" ] || fail "fault-free job ran on: $out"
[ "$(json "d['final_hash']" <<<"$out")" = "$repaired_hash" ] \
  || fail "repaired job's final hash $repaired_hash differs from the fault-free run's: $out"
[ "$(json "int(d['mismatched_steps'])" <<<"$out")" = 0 ] || fail "fault-free job: $out"
wait_idle 4

echo "== K=3 ps without the fault: the same final weights as the repaired ps job"
out=$(timed 30 cli submit --workers=3 "${JOB[@]}" "${PS[@]}" --follow --json)
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "fault-free ps job: $out"
[ "$(json "[r['worker_id'] for r in d['ranks']]" <<<"$out")" = "['w-1', 'w-3', 'w-4']" ] || fail "fault-free ps job ran on: $out"
[ "$(json "d['final_hash']" <<<"$out")" = "$ps_repaired_hash" ] \
  || fail "repaired ps job's final hash $ps_repaired_hash differs from the fault-free ps run's: $out"
wait_idle 4

echo "== K=2 without the fault: the same final weights as the rolled-back job"
t0=$(date +%s%N)
out=$(timed 30 cli submit --workers=2 "${JOB[@]}" --checkpoint_dir="$T/ck2" --checkpoint_every_steps=2 --follow --json)
echo "fault-free K=2 job: submit to SUCCEEDED in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "fault-free K=2 job: $out"
[ "$(json "[r['worker_id'] for r in d['ranks']]" <<<"$out")" = "['w-1', 'w-3']" ] || fail "fault-free K=2 job ran on: $out"
[ "$(json "d['final_hash']" <<<"$out")" = "$rolled_back_hash" ] \
  || fail "rolled-back job's final hash $rolled_back_hash differs from the fault-free run's: $out"
[ "$(json "int(d['mismatched_steps'])" <<<"$out")" = 0 ] || fail "fault-free K=2 job: $out"
wait_idle 4

echo "== K=4, one host's training set is stale"
out=$(timed 30 cli submit --workers=4 "${JOB[@]}" --follow --json)
[ "$(json "d['state']" <<<"$out")" = FAILED ] || fail "stale job: $out"
reason=$(json "d['reason']" <<<"$out")
echo "$reason" | grep -Eq "rank 3 \(127\.0\.0\.1:[0-9]+\) has a different training set: hash [0-9a-f]{32} vs [0-9a-f]{32}" \
  || fail "stale reason: $reason"
echo "PASS"
