#!/usr/bin/env bash
# Non-finite gradients end to end (issue 10), real processes on 127.0.0.1:
# a coordinator and three worker daemons, the third started with
# --fault_nan_step=5 (a NaN in its local gradient at step 5 of every job).
#   skip (ring over tcp, and ps over the raw-TCP ps data plane): the job
#     SUCCEEDS with exactly one skipped step, step 5, on rank 2; status shows
#     it; every step's hashes agree (nothing drifted); within 60 s;
#   fail (the default): the job ends FAILED with "non-finite gradient on
#     rank 2 at step 5" within 15 s of its submission, and every worker is
#     idle again;
#   a bad --on_nonfinite is refused naming the flag;
#   an overflowing sum: the three workers stopped (SIGTERM), two fresh ones
#     started with --fault_nan_step=7 --fault_nan_value=3e38 (finite on each
#     rank, 6e38 > FLT_MAX summed): under skip (ring over tcp) the job
#     SUCCEEDS with step 7 skipped and no rank named ("sum overflowed");
#     under fail (ps over tcp) it ends FAILED with "non-finite sum at step
#     7 ... the sum overflowed".
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=6
source "$(dirname "$0")/e2e_lib.sh"

python3 - "$T" <<'PY'
import random, sys
t = sys.argv[1]
r = random.Random(11)
with open(f"{t}/train.csv", "w") as f:
    for _ in range(300):
        c = r.randrange(3)
        xs = [(2.0 if j == c else 0.0) + r.random() - 0.5 for j in range(4)]
        f.write(f"{c}," + ",".join(f"{x:.4f}" for x in xs) + "\n")
PY
DATA="csv:$T/train.csv"

"$COORD" --insecure --listen=127.0.0.1:0 --port_file="$T/coord.port" 2>"$T/coord.log" & pids+=($!)
wait_file "$T/coord.port"
C="127.0.0.1:$(cat "$T/coord.port")"
cli() { "$CLI" --insecure --coordinator="$C" "$@"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
for i in 1 2 3; do
  fault=(); [ "$i" = 3 ] && fault=(--fault_nan_step=5)
  "$WORKER" --insecure --coordinator="$C" --port_file="$T/w$i.port" "${fault[@]}" 2>"$T/w$i.log" & pids+=($!)
  wait_file "$T/w$i.port"   # registration order = worker ids = ranks 0, 1, 2
  for _ in $(seq 100); do [ "$(cli workers | grep -c IDLE)" = "$i" ] && break; sleep 0.05; done
done
[ "$(cli workers | grep -c IDLE)" = 3 ] || fail "3 idle workers expected: $(cli workers)"
JOB=(--workers=3 --model=mlp:8 --dataset="$DATA" --batch=30 --steps=20 --lr=0.1)

echo "== bad --on_nonfinite"
err=$(cli submit "${JOB[@]}" --on_nonfinite=ignore 2>&1); rc=$?
[ "$rc" = 2 ] || fail "bad policy: exit $rc: $err"
grep -q -- '--on_nonfinite: expected fail or skip, got "ignore"' <<<"$err" || fail "bad policy message: $err"

for mode in "ring/tcp:--sync=ring --peer_transport=tcp" "ps/tcp:--sync=ps --ps_transport=tcp"; do
  name=${mode%%:*}; flags=${mode#*:}
  echo "== skip, $name"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  out=$(cli submit "${JOB[@]}" $flags --on_nonfinite=skip --follow --json) || fail "skip $name: exit $?: $out"
  t1=$(date +%s.%N)
  python3 - "$out" "$t0" "$t1" <<'PY' || fail "skip $name: $out"
import json, sys
d = json.loads(sys.argv[1]); secs = float(sys.argv[3]) - float(sys.argv[2])
assert d["state"] == "SUCCEEDED", d["state"]
assert d["spec"]["on_nonfinite"] == "skip", d["spec"]
assert int(d.get("skipped_steps", 0)) == 1, d.get("skipped_steps")
assert int(d.get("last_skipped_step", -1)) == 5, d.get("last_skipped_step")
assert d.get("last_nonfinite_ranks") == [2], d.get("last_nonfinite_ranks")
assert int(d["step"]) == 20 and int(d["checked_steps"]) == 20 and int(d["mismatched_steps"]) == 0, d
assert not d["out_of_sync"], d
assert secs < 60, f"took {secs:.1f} s"
print(f"  SUCCEEDED in {secs:.1f} s: 1 skipped step (5, rank 2), 20 steps checked, 0 mismatched")
PY
  id=$(json "d['job_id']" <<<"$out")
  cli status "$id" | grep -q 'non-finite gradients: 1 step(s) skipped, the last at step 5 (rank(s) 2)' \
    || fail "status $id: $(cli status "$id")"
  grep -q "update skipped: non-finite gradient job=$id rank=0 .*step=5 ranks=\"rank 2\"" "$T/w1.log" \
    || fail "worker 1 did not log the skip of job $id"
done

echo "== fail (the default), ring/grpc"
t0=$(date +%s.%N)
out=$(cli submit "${JOB[@]}" --follow --json); rc=$?
t1=$(date +%s.%N)
[ "$rc" = 3 ] || fail "fail: exit $rc (expected 3, followed job FAILED): $out"
python3 - "$out" "$t0" "$t1" <<'PY' || fail "fail: $out"
import json, sys
d = json.loads(sys.argv[1]); secs = float(sys.argv[3]) - float(sys.argv[2])
assert d["state"] == "FAILED", d["state"]
assert "non-finite gradient on rank 2 at step 5" in d["reason"], d["reason"]
assert int(d["step"]) <= 5, d["step"]
assert secs < 15, f"took {secs:.1f} s"
print(f"  FAILED in {secs:.1f} s: {d['reason']}")
PY
for _ in $(seq 100); do [ "$(cli workers | grep -c IDLE)" = 3 ] && break; sleep 0.1; done
[ "$(cli workers | grep -c IDLE)" = 3 ] || fail "workers not idle 10 s after the failed job: $(cli workers)"

echo "== an overflowing sum: two workers put 3e38 at step 7"
for p in "${pids[@]:1}"; do kill -TERM "$p"; done
for p in "${pids[@]:1}"; do wait "$p" 2>/dev/null; done
for _ in $(seq 100); do [ "$(cli workers | grep -c IDLE)" = 0 ] && break; sleep 0.1; done
[ "$(cli workers | grep -c IDLE)" = 0 ] || fail "stopped workers still IDLE: $(cli workers)"
for i in 4 5; do
  "$WORKER" --insecure --coordinator="$C" --port_file="$T/w$i.port" --fault_nan_step=7 \
    --fault_nan_value=3e38 2>"$T/w$i.log" & pids+=($!)
  wait_file "$T/w$i.port"
done
for _ in $(seq 100); do [ "$(cli workers | grep -c IDLE)" = 2 ] && break; sleep 0.05; done
[ "$(cli workers | grep -c IDLE)" = 2 ] || fail "2 idle workers expected: $(cli workers)"
OVF=(--workers=2 --model=mlp:8 --dataset="$DATA" --batch=30 --steps=20 --lr=0.1)
out=$(cli submit "${OVF[@]}" --peer_transport=tcp --on_nonfinite=skip --follow --json) \
  || fail "overflow skip: exit $?: $out"
python3 - "$out" <<'PY' || fail "overflow skip: $out"
import json, sys
d = json.loads(sys.argv[1])
assert d["state"] == "SUCCEEDED", d["state"]
assert int(d.get("skipped_steps", 0)) == 1, d.get("skipped_steps")
assert int(d.get("last_skipped_step", -1)) == 7, d.get("last_skipped_step")
assert not d.get("last_nonfinite_ranks"), d.get("last_nonfinite_ranks")
assert int(d["checked_steps"]) == 20 and int(d["mismatched_steps"]) == 0, d
print("  skip: SUCCEEDED, step 7 skipped, no rank named, 20 steps checked, 0 mismatched")
PY
id=$(json "d['job_id']" <<<"$out")
cli status "$id" | grep -q 'non-finite gradients: 1 step(s) skipped, the last at step 7 (sum overflowed)' \
  || fail "overflow status $id: $(cli status "$id")"
out=$(cli submit "${OVF[@]}" --sync=ps --ps_transport=tcp --follow --json); rc=$?
[ "$rc" = 3 ] || fail "overflow fail: exit $rc (expected 3, followed job FAILED): $out"
python3 - "$out" <<'PY' || fail "overflow fail: $out"
import json, sys
d = json.loads(sys.argv[1])
assert d["state"] == "FAILED", d["state"]
want = ("non-finite sum at step 7: every rank's gradient and loss were finite, "
        "the sum overflowed (spec.on_nonfinite: fail)")
assert want in d["reason"], d["reason"]
print(f"  fail: FAILED: {d['reason']}")
PY
echo PASS
