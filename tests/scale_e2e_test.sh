#!/usr/bin/env bash
# `lockstep scale` end to end on 127.0.0.1 (OS-chosen ports): a coordinator
# and two worker daemons; --workers_list=1,2,4 runs K = 1 and 2 (30 steps
# each, a small MLP on a small CSV) and reports K = 4 skipped; checks the
# CSV's columns and rows, the model CSV, that the SVG parses as XML, a
# strong-scaling run with --json (one JSON object on stdout), and bad flags
# named with exit 2.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
T="${TEST_TMPDIR:-$(mktemp -d)}"
source "$(dirname "$0")/e2e_lib.sh"

python3 - "$T" <<'PY'
import random, sys
t = sys.argv[1]
r = random.Random(3)
with open(f"{t}/train.csv", "w") as f:
    for _ in range(400):
        c = r.randrange(3)
        xs = [(2.0 if j == c else 0.0) + r.random() - 0.5 for j in range(6)]
        f.write(f"{c}," + ",".join(f"{x:.4f}" for x in xs) + "\n")
PY

"$COORD" --insecure --listen=127.0.0.1:0 --port_file="$T/coord.port" 2>"$T/coord.log" & pids+=($!)
wait_file "$T/coord.port"
C="127.0.0.1:$(cat "$T/coord.port")"
for i in 1 2; do
  "$WORKER" --insecure --coordinator="$C" --data_dir="$T" --port_file="$T/w$i.port" 2>"$T/w$i.log" & pids+=($!)
  wait_file "$T/w$i.port"
done
idle=0
for _ in $(seq 200); do
  idle=$("$CLI" --insecure --coordinator="$C" workers | grep -c IDLE); [ "$idle" = 2 ] && break; sleep 0.05
done
[ "$idle" = 2 ] || fail "workers not idle: $idle"
cli() { "$CLI" --insecure --coordinator="$C" "$@"; }
JOB=(--model=mlp:16 --dataset=csv:train.csv --batch=20 --lr=0.1 --steps=30)

echo "== weak scaling, K = 1,2,4 with two workers"
out=$(cli scale "${JOB[@]}" --workers_list=1,2,4 --out="$T/weak" --job_timeout_s=60 2>"$T/weak.err") \
  || fail "scale exit $?: $out $(cat "$T/weak.err")"
echo "$out"
grep -q "skipped K=4" <<<"$out" || fail "K=4 not reported skipped"
# The alpha probe (--alpha_probe_model=auto: softmax for an mlp) ran at K=2
# and is the fit's second sample: two gradient sizes at one K.
grep -Eq "alpha probe softmax K=2 run 1/1: job [0-9]+" "$T/weak.err" || fail "no alpha probe run"
grep -Eq "alpha probe: softmax \(21 parameters, 0.1 KB\) at K=2: [0-9.]+ ms transfer per step .*, in the fit" \
  <<<"$out" || fail "alpha probe not in the fit"
grep -Eq "efficiency (falls below 0.80 at K=2|stays at or above 0.80)" <<<"$out" || fail "no threshold line"
python3 - "$T/weak" <<'PY' || fail "weak outputs"
import csv, sys, xml.etree.ElementTree as ET
p = sys.argv[1]
rows = list(csv.DictReader(open(p + ".csv")))
cols = ["k", "global_batch", "examples_per_s", "ideal_examples_per_s", "efficiency", "speedup",
        "step_ms", "compute_ms", "communication_ms", "exposed_ms", "peer_wait_ms", "timing",
        "workers_per_host", "median_step_ms"]
assert list(rows[0].keys()) == cols, rows[0].keys()
assert [r["k"] for r in rows] == ["1", "2"], rows
assert [r["global_batch"] for r in rows] == ["20", "40"], rows
assert [r["workers_per_host"] for r in rows] == ["1", "2"], rows
for r in rows:
    assert float(r["examples_per_s"]) > 0, r
    assert r["timing"] in ("reported", "none"), r
    # examples/s = ideal x efficiency; speedup = efficiency x K (base K = 1)
    assert abs(float(r["efficiency"]) * float(r["ideal_examples_per_s"]) - float(r["examples_per_s"])) \
        <= 1e-3 * float(r["examples_per_s"]) + 0.1, r
    assert abs(float(r["speedup"]) - float(r["efficiency"]) * int(r["k"])) < 1e-3, r
assert float(rows[0]["efficiency"]) == 1.0, rows[0]
model = list(csv.DictReader(open(p + ".model.csv")))
assert [m["k"] for m in model] == ["16", "32", "64", "128", "256", "512", "1024"], model
assert all(m["pick"] == "ring" or m["pick"].startswith("ps S=") for m in model), model
root = ET.parse(p + ".svg").getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
text = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
assert "skipped K=4" in text, text
assert "Throughput vs ideal" in text and "Wall time per step" in text, text
print("weak outputs ok:", [(r["k"], r["examples_per_s"], r["efficiency"]) for r in rows])
PY

echo "== strong scaling keeps the global batch (right after the last job: workers still BUSY"
echo "   with an ended job count as idle)"
echo "   and --json prints the report as one JSON object instead of the table)"
out=$(cli scale "${JOB[@]}" --workers_list=2 --scaling=strong --out="$T/strong" --job_timeout_s=60 --json) \
  || fail "strong scale exit $?: $out"
python3 - "$T/strong" "$out" <<'PY' || fail "strong csv / json: $out"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1] + ".csv")))
assert [(r["k"], r["global_batch"]) for r in rows] == [("2", "20")], rows
d = json.loads(sys.argv[2])
assert d["scaling"] == "strong", d
assert [(r["k"], r["global_batch"]) for r in d["rows"]] == [(2, 20)], d["rows"]
assert abs(d["rows"][0]["examples_per_s"] - float(rows[0]["examples_per_s"])) < 0.1, (d, rows)
# A single K leaves the model unfitted.
assert d["model"]["fitted"] is False and d["model"]["note"], d["model"]
assert d["files"] == [sys.argv[1] + ".csv", sys.argv[1] + ".svg", sys.argv[1] + ".model.csv"], d
PY

echo "== bad flags are named"
err=$(cli scale "${JOB[@]}" --scaling=sideways 2>&1); rc=$?
[ "$rc" = 2 ] && grep -q -- "--scaling" <<<"$err" || fail "--scaling: rc $rc: $err"
err=$(cli scale --model=mlp:16 --dataset=csv:train.csv --workers_list=1 2>&1); rc=$?
[ "$rc" = 2 ] && grep -q -- "--steps" <<<"$err" || fail "--steps: rc $rc: $err"
err=$(cli scale "${JOB[@]}" --workers_list=3,4 2>&1); rc=$?
[ "$rc" = 2 ] && grep -q "2 idle worker(s)" <<<"$err" || fail "no K fits: rc $rc: $err"
echo PASS
