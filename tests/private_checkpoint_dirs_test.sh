#!/usr/bin/env bash
# Checkpoints on hosts that share no directory: a coordinator and workers in
# their own network namespaces (10.x addresses on a bridge), each worker
# also in its own mount namespace with a private, empty tmpfs mounted at the
# job's --checkpoint_dir path, so what one worker writes there no other
# process sees (as on separate hosts without a shared filesystem).
#   A  a K=2 ring/tcp job run uninterrupted: its final hash is the reference;
#   B  the same job writing a checkpoint every 200 steps, cancelled
#      mid-run: only rank 0's worker (w-1) holds job-B/ (3 files); w-2's
#      directory and the host's stay empty;
#   C  `lockstep resume B --follow`: w-1 is rank 0 again (it wrote the
#      checkpoints), reads one, and w-2 copies its restored state from w-1:
#      SUCCEEDED with A's hash;
#   D  a rollback: w-2 is replaced by w-3, whose worker flips one bit of its
#      weights after step 3 (K = 2: no majority); the job writes a
#      checkpoint every 2 steps and rolls back to step 2's, which w-3 copies
#      from w-1: SUCCEEDED with the hash of the same job run without the
#      fault (R, run on w-1 and w-2 before);
#   E  `lockstep resume B` while w-1, the writer, is busy with another job:
#      the resumed job runs on two new workers (w-4, w-5) whose
#      directories are empty; rank 0 fetches B's checkpoint from w-1
#      (Assignment.checkpoint_source, ReplicaState.FetchCheckpoint), stores
#      it in its own directory and resumes: SUCCEEDED with A's hash, while
#      w-1's job keeps running.
# Needs root (ip netns, unshare, mount); says SKIPPED loudly otherwise.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
  echo "SKIPPED: private_checkpoint_dirs_test needs root, iproute2 and unshare"
  exit 0
fi
T="${TEST_TMPDIR:-$(mktemp -d)}"
NET="10.79.$(( $$ % 250 + 1 ))"
TAG="lsp$$"
# e2e_lib for fail, json and write_blobs; netns_lib's EXIT trap replaces
# e2e_lib's (every daemon runs in a namespace it cleans up).
source "$(dirname "$0")/e2e_lib.sh"
source "$(dirname "$0")/netns_lib.sh"
netns_up "$NET" "$TAG" 4
C="$NET.1:7070"
cli() { on 1 "$CLI" --insecure --coordinator="$C" "$@"; }
idle_count() { cli workers 2>/dev/null | grep -c ' IDLE '; }
wait_idle() {
  for _ in $(seq 200); do [ "$(idle_count)" = "$1" ] && return 0; sleep 0.05; done
  fail "expected $1 idle workers: $(cli workers 2>&1)"
}

write_blobs "$T" 11 300 60 4
CK="$T/ck"
mkdir -p "$CK"

on 1 "$COORD" --insecure --listen=0.0.0.0:7070 2>"$T/coord.log" &
for _ in $(seq 200); do cli workers >/dev/null 2>&1 && break; sleep 0.05; done
declare -A wpid
# start_worker I NS [FLAGS...]: worker w-I in namespace NS, in its own mount
# namespace with a private tmpfs at $CK.
start_worker() {
  local i=$1 ns=$2; shift 2
  rm -f "$T/w$i.pid"
  on "$ns" unshare -m --propagation private sh -c \
    'mount -t tmpfs lockstep-private "$1" || exit 9; echo $$ > "$2"; shift 2; exec "$@"' \
    sh "$CK" "$T/w$i.pid" \
    "$WORKER" --insecure --coordinator="$C" --listen=0.0.0.0:7071 --data_port=7072 \
    --data_dir="$T" --metrics_port=-1 "$@" 2>"$T/w$i.log" &
  for _ in $(seq 200); do [ -s "$T/w$i.pid" ] && break; sleep 0.05; done
  wpid[$i]=$(cat "$T/w$i.pid") || fail "w-$i did not start"
}
# in_worker I CMD...: CMD in worker w-I's mount namespace (sees its $CK).
in_worker() { local i=$1; shift; nsenter -t "${wpid[$i]}" -m "$@"; }

start_worker 1 2; wait_idle 1   # registration order = worker ids
start_worker 2 3; wait_idle 2
mountpoint -q "$CK" && fail "the host sees a mount at $CK"

# (12000: B is cancelled a status call or two after step 900, which on a
# fast machine is thousands of steps.)
STEPS=12000
JOB=(--workers=2 --peer_transport=tcp --model=mlp:16 --dataset='csv:train.csv;test.csv'
     --batch=30 --steps=$STEPS --lr=0.05 --optimizer=sgd --momentum=0.9 --decay=cosine
     --seed=9 --eval_each_epoch=false)

echo "== A: uninterrupted"
want=$(succeeded_hash "${JOB[@]}") || fail "A: $want"
echo "A final hash $want"
wait_idle 2

echo "== B: checkpoints every 200 steps, cancelled mid-run"
B=$(cancelled_at 900 "${JOB[@]}" --checkpoint_dir="$CK" --checkpoint_every_steps=200) || fail "B: $B"
wait_idle 2
n1=$(in_worker 1 ls "$CK/job-$B" 2>/dev/null | grep -c '^step-.*\.ckpt$')
[ "$n1" = 3 ] || fail "w-1 (rank 0) holds $n1 checkpoints of job $B, expected 3"
in_worker 2 ls "$CK" | grep -q . && fail "w-2's private $CK is not empty: $(in_worker 2 ls "$CK")"
ls "$CK" | grep -q . && fail "the host's $CK is not empty"
echo "job $B: w-1 holds $(in_worker 1 ls "$CK/job-$B" | tr '\n' ' '); w-2 and the host hold none"

echo "== C: lockstep resume $B"
out=$(cli resume "$B" --follow --json) || fail "C exit $?: $out"
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "C: $out"
Cid=$(json "d['job_id']" <<<"$out")
[ "$(json "d['final_hash']" <<<"$out")" = "$want" ] || fail "C's hash differs from A's ($want): $out"
grep -q "resumed from checkpoint job=$Cid rank=0 " "$T/w1.log" || fail "w-1 did not resume job $Cid as rank 0"
grep -q "copied rank 0's restored checkpoint state job=$Cid rank=1 " "$T/w2.log" \
  || fail "w-2 did not copy rank 0's restored state for job $Cid"
wait_idle 2

echo "== D: rollback with the checkpoints on rank 0's host only"
RJOB=(--workers=2 --peer_transport=tcp --model=mlp:8 --dataset='csv:train.csv;test.csv'
      --batch=20 --steps=20 --lr=0.1 --momentum=0.9 --seed=4 --eval_each_epoch=false
      --checkpoint_dir="$CK" --checkpoint_every_steps=2)
out=$(cli submit "${RJOB[@]}" --follow --json) || fail "R exit $?: $out"
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "R (no fault): $out"
want2=$(json "d['final_hash']" <<<"$out")
kill "${wpid[2]}"
for _ in $(seq 200); do kill -0 "${wpid[2]}" 2>/dev/null || break; sleep 0.05; done
start_worker 3 4 --fault_flip_step=3 --fault_flip_target=weights --fault_flip_index=1
for _ in $(seq 200); do cli workers 2>/dev/null | grep -Eq '^w-3 .* IDLE ' && break; sleep 0.05; done
cli workers | grep -Eq '^w-3 .* IDLE ' || fail "w-3 not IDLE: $(cli workers)"
out=$(cli submit "${RJOB[@]}" --follow --json) || fail "D exit $?: $out"
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "D: $out"
Did=$(json "d['job_id']" <<<"$out")
[ "$(json "d['final_hash']" <<<"$out")" = "$want2" ] || fail "D's hash differs from the fault-free run's ($want2): $out"
cli sync "$Did" | grep -q "rolled back in the combine of step 4" || fail "D has no rollback: $(cli sync "$Did")"
grep -q "copied rank 0's restored checkpoint state job=$Did rank=1 " "$T/w3.log" \
  || fail "w-3 did not copy rank 0's restored checkpoint state for job $Did"
in_worker 3 ls "$CK" | grep -q . && fail "w-3's private $CK is not empty"

echo "== E: lockstep resume $B while its writer (w-1) is busy"
kill "${wpid[3]}"
for _ in $(seq 200); do kill -0 "${wpid[3]}" 2>/dev/null || break; sleep 0.05; done
wait_idle 1
out=$(cli submit --workers=1 --model=mlp:16 --dataset='csv:train.csv;test.csv' --batch=30 \
      --steps=100000000 --eval_each_epoch=false --json) || fail "E: busy job: $out"
busy=$(json "d['job_id']" <<<"$out")
wait_idle 0
cli workers | grep -Eq '^w-1 .* BUSY ' || fail "E: w-1 is not BUSY: $(cli workers)"
start_worker 4 3; wait_idle 1   # registration order = worker ids
start_worker 5 4; wait_idle 2
out=$(cli resume "$B" --follow --json) || fail "E exit $?: $out"
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "E: $out"
Eid=$(json "d['job_id']" <<<"$out")
[ "$(json "d['final_hash']" <<<"$out")" = "$want" ] || fail "E's hash differs from A's ($want): $out"
grep -q "fetched checkpoint job=$Eid rank=0 " "$T/w4.log" \
  || fail "w-4 (rank 0) did not fetch the checkpoint for job $Eid: $(grep -i checkpoint "$T/w4.log")"
grep -q "serving checkpoint" "$T/w1.log" || fail "w-1 did not serve the checkpoint"
grep -q "resumed from checkpoint job=$Eid rank=0 " "$T/w4.log" || fail "w-4 did not resume job $Eid"
n4=$(in_worker 4 ls "$CK/job-$B" 2>/dev/null | grep -c '^step-.*\.ckpt$')
[ "$n4" = 1 ] || fail "w-4 holds $n4 checkpoints of job $B, expected the 1 it fetched"
[ "$(json "d['state']" <<<"$(cli status "$busy" --json)")" = RUNNING ] || fail "E: w-1's job is not running"
cli cancel "$busy" >/dev/null || fail "E: cancel $busy"
echo "job $Eid: w-4 fetched $(in_worker 4 ls "$CK/job-$B") from w-1 while w-1 ran job $busy"
echo PASS
