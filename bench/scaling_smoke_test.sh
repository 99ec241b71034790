#!/usr/bin/env bash
# Smoke test of //bench:scaling in a tiny configuration: 20 steps, one
# repeat, no PyTorch, K = 1 and 2, ring over raw TCP and ps with two
# lockstep-server shards over the ps raw-TCP data plane. It checks that
# every run succeeds (real coordinator, workers and ps processes, jobs
# submitted with the lockstep client), that the table and the target lines
# are printed, and that the K=1 cluster job ends with the same weights hash
# as lockstep-train. It checks no timing: the figures of a 20-step run
# mean nothing.
#   scaling_smoke_test.sh <path of //bench:scaling>
set -uo pipefail
bench=$1
out=${TEST_TMPDIR:-/tmp}/scaling_smoke.out
fail() { echo "FAIL: $*"; echo "---- output"; cat "$out"; exit 1; }

timeout 300 "$bench" --steps=20 --repeats=1 --skip_torch --worlds=2 --modes=tcp,shm,ps2t \
  --job_timeout_s=120 >"$out" 2>&1
rc=$?
[ "$rc" = 0 ] || fail "bench exited $rc"
for want in \
  "How each figure is measured" \
  "lockstep-train, batch 128 " \
  "lockstep-train, batch 256 " \
  "cluster K=1 ring tcp " \
  "cluster K=2 weak ring tcp " \
  "cluster K=2 weak ring shm " \
  "cluster K=2 strong ring tcp (same job as weak)" \
  "cluster K=2 weak ps S=2 tcp " \
  "K=1 cluster final weights hash equals lockstep-train's" \
  "Targets (ratio to lockstep-train" \
  "of 8 targets missed" \
  "2 lockstep-train at once (ceiling)" \
  "ceiling: 2 lockstep-train processes at once"; do
  grep -qF -- "$want" "$out" || fail "no line with '$want'"
done
grep -q "FAILED" "$out" && fail "a run FAILED"
# Each measured row shows a positive examples/s figure and its ratio
# (2 lockstep-train rows, 9 cluster rows: K=1 tcp, shm, ps2t; K=2 weak and strong of each).
rows=$(grep -cE '^(lockstep-train|cluster K=).* [1-9][0-9]* +[0-9]+\.[0-9]+x ' "$out")
[ "$rows" = 11 ] || fail "expected 11 rows with examples/s > 0, got $rows"
# --skip_torch: no torch rows.
grep -qE '^2 lockstep-train at once \(ceiling\) +2 +128 +256 +[1-9][0-9]* +[0-9]+\.[0-9]+x ' "$out" \
  || fail "the ceiling row has no examples/s"
grep -q "^torch" "$out" && fail "torch rows despite --skip_torch"
cat "$out"
echo PASS
