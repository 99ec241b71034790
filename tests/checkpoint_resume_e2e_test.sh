#!/usr/bin/env bash
# Checkpoints and resume end to end, real processes on 127.0.0.1 (OS-chosen
# ports): a coordinator and two workers that share a checkpoint directory.
#   A  the job run uninterrupted: its final weights hash is the reference;
#   B  the same job with --checkpoint_every_steps, cancelled mid-run;
#   C  `lockstep resume B --follow`: ends SUCCEEDED with A's hash;
#   D  C's two newest checkpoints corrupted (one truncated, one bit flipped),
#      `lockstep resume C`: the third newest is used, the workers warn naming
#      both files, and D ends with A's hash;
#   E  `lockstep submit --resume_from=DIR/job-B/step-N.ckpt` with the same
#      job flags: A's hash; with another seed: FAILED naming spec.seed.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=6
source "$(dirname "$0")/e2e_lib.sh"

mkdir -p "$T/data"
write_blobs "$T/data" 11 300 60 4
CK="$T/ck"

"$COORD" --insecure --listen=127.0.0.1:0 --port_file="$T/coord.port" 2>"$T/coord.log" & pids+=($!)
wait_file "$T/coord.port"
C="127.0.0.1:$(cat "$T/coord.port")"
cli() { "$CLI" --insecure --coordinator="$C" "$@"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
for i in 1 2; do
  "$WORKER" --insecure --coordinator="$C" --data_dir="$T/data" --port_file="$T/w$i.port" 2>"$T/w$i.log" & pids+=($!)
  wait_file "$T/w$i.port"
done
idle() { for _ in $(seq 200); do [ "$(cli workers | grep -c IDLE)" = 2 ] && return 0; sleep 0.05; done; fail "workers not idle"; }
idle

# (12000: B is cancelled a status call or two after step 900, which on a
# fast machine is thousands of steps.)
STEPS=12000
JOB=(--workers=2 --peer_transport=tcp --model=mlp:16 --dataset='csv:train.csv;test.csv'
     --batch=30 --steps=$STEPS --lr=0.05 --optimizer=sgd --momentum=0.9 --decay=cosine
     --seed=9 --eval_each_epoch=false)

echo "== A: uninterrupted"
want=$(succeeded_hash "${JOB[@]}") || fail "A: $want"
echo "A final hash $want"
idle

echo "== B: checkpoints every 200 steps, cancelled mid-run"
B=$(cancelled_at 900 "${JOB[@]}" --checkpoint_dir="$CK" --checkpoint_every_steps=200) || fail "B: $B"
idle
ls "$CK/job-$B"
n=$(ls "$CK/job-$B" | grep -c '^step-.*\.ckpt$')
[ "$n" = 3 ] || fail "job $B keeps $n checkpoints, expected 3 (the default keep)"
last=$(ls "$CK/job-$B" | tail -1 | sed 's/step-0*\([0-9]*\)\.ckpt/\1/')
[ "$last" -ge 800 ] && [ "$last" -lt "$STEPS" ] || fail "B's newest checkpoint is step $last"
ls "$CK/job-$B" | grep -q tmp && fail "a temporary file was left"

echo "== C: lockstep resume $B --follow"
out=$(cli resume "$B" --follow --json) || fail "C exit $?: $out"
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "C: $out"
Cid=$(json "d['job_id']" <<<"$out")
[ "$(json "d['final_hash']" <<<"$out")" = "$want" ] || fail "C's hash differs from A's ($want): $out"
[ "$(json "int(d['spec']['resume_from']['job_id'])" <<<"$out")" = "$B" ] || fail "C's spec: $out"
grep -q "resumed from checkpoint job=$Cid rank=0 .*checkpoint=$CK/job-$B/step-0*$last.ckpt next_step=$last" "$T/w1.log" "$T/w2.log" \
  || fail "no 'resumed from checkpoint' line for step $last"
idle

echo "== D: C's two newest checkpoints corrupted; resume C uses the third"
files=($(ls "$CK/job-$Cid" | grep '^step-.*\.ckpt$'))
[ "${#files[@]}" = 3 ] || fail "job $Cid has ${#files[@]} checkpoints"
newest="$CK/job-$Cid/${files[2]}"; middle="$CK/job-$Cid/${files[1]}"; oldest="$CK/job-$Cid/${files[0]}"
truncate -s 1000 "$newest"
python3 - "$middle" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[300] ^= 0x20; open(p, "wb").write(b)
PY
out=$(cli resume "$Cid" --follow --json) || fail "D exit $?: $out"
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "D: $out"
Did=$(json "d['job_id']" <<<"$out")
[ "$(json "d['final_hash']" <<<"$out")" = "$want" ] || fail "D's hash differs from A's ($want): $out"
grep -q "WARN  worker: checkpoint skipped.*job=$Did rank=0.*$newest: truncated" "$T/w1.log" "$T/w2.log" \
  || fail "no warning naming the truncated $newest"
grep -q "WARN  worker: checkpoint skipped.*job=$Did rank=0.*$middle: checksum" "$T/w1.log" "$T/w2.log" \
  || fail "no warning naming the corrupt $middle"
grep -q "resumed from checkpoint job=$Did rank=0 .*checkpoint=$oldest" "$T/w1.log" "$T/w2.log" \
  || fail "D did not resume from $oldest"
idle

echo "== E: submit --resume_from with the same flags, and with another seed"
first="$CK/job-$B/$(ls "$CK/job-$B" | head -1)"
out=$(cli submit "${JOB[@]}" --resume_from="$first" --follow --json) || fail "E exit $?: $out"
[ "$(json "d['final_hash']" <<<"$out")" = "$want" ] || fail "E's hash differs from A's: $out"
idle
out=$(cli submit "${JOB[@]}" --seed=10 --resume_from="$CK/job-$B" --follow --json)
[ "$(json "d['state']" <<<"$out")" = FAILED ] || fail "another seed: $out"
json "d['reason']" <<<"$out" | grep -q "spec.seed: the checkpoint's run used 9, this job 10" \
  || fail "another seed's reason: $out"
idle

echo "== bad input"
err=$(cli resume 999 2>&1); [ $? = 2 ] || fail "resume 999: $err"
err=$(cli resume 1 2>&1); [ $? = 2 ] && grep -q "job 1 wrote no checkpoints" <<<"$err" || fail "resume 1: $err"
err=$(cli submit "${JOB[@]}" --resume_from="$CK/$B" 2>&1); [ $? = 2 ] && grep -q -- "--resume_from: expected DIR/job-<id>" <<<"$err" \
  || fail "bad --resume_from: $err"
echo PASS
