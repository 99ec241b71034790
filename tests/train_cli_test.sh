#!/usr/bin/env bash
# lockstep-train end to end: a small CSV dataset, two runs with the same
# flags print the same weights_hash, --json has the promised fields, bad
# input names the file and line and exits non-zero.
set -euo pipefail
TRAIN="$1"
dir="${TEST_TMPDIR:-$(mktemp -d)}"
python3 - "$dir" <<'PY'
import random, sys
d = sys.argv[1]
r = random.Random(4)
for name, n in (("train.csv", 300), ("test.csv", 100)):
    with open(f"{d}/{name}", "w") as f:
        f.write("label,a,b,c\n")
        for _ in range(n):
            c = r.randrange(3)
            xs = [(2.0 if j == c else 0.0) + r.random() - 0.5 for j in range(3)]
            f.write(f"{c}," + ",".join(f"{x:.5f}" for x in xs) + "\n")
with open(f"{d}/bad.csv", "w") as f:
    f.write("1,0.5,0.25\n0,0.1,abc\n")
PY
flags=(--model=mlp:8 --dataset="csv:$dir/train.csv;$dir/test.csv" --epochs=5 --batch=16 --json)
a=$("$TRAIN" "${flags[@]}" 2>/dev/null)
b=$("$TRAIN" "${flags[@]}" 2>/dev/null)
echo "run 1: $a"
echo "run 2: $b"
python3 - "$a" "$b" <<'PY'
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:3])
for k in ("test_accuracy", "final_loss", "steps", "examples_per_second", "weights_hash"):
    assert k in a, f"missing {k}"
assert a["weights_hash"] == b["weights_hash"], (a["weights_hash"], b["weights_hash"])
assert len(a["weights_hash"]) == 32
assert a["steps"] == 5 * 19, a["steps"]          # ceil(300/16) = 19 steps per epoch
assert a["test_accuracy"] >= 0.9, a["test_accuracy"]
PY
# --eval_each_epoch=false: the epoch lines (stderr under --json) carry no
# test figures but the last one's; the same training, hash and accuracy.
e=$("$TRAIN" "${flags[@]}" --eval_each_epoch=false 2>"$dir/noeval.err")
[ "$(grep -c '^epoch ' "$dir/noeval.err")" = 5 ] || { cat "$dir/noeval.err"; echo "expected 5 epoch lines"; exit 1; }
[ "$(grep -c 'test_accuracy' "$dir/noeval.err")" = 1 ] && tail -1 "$dir/noeval.err" | grep -q '^epoch 5 .*test_accuracy' \
  || { cat "$dir/noeval.err"; echo "--eval_each_epoch=false: expected test figures on epoch 5 only"; exit 1; }
python3 -c 'import json,sys; e, a = (json.loads(x) for x in sys.argv[1:3]); assert (e["weights_hash"], e["test_accuracy"]) == (a["weights_hash"], a["test_accuracy"]), (e, a)' "$e" "$a"
# A different seed gives different weights.
c=$("$TRAIN" "${flags[@]}" --seed=2 2>/dev/null)
python3 -c 'import json,sys; assert json.loads(sys.argv[1])["weights_hash"] != json.loads(sys.argv[2])["weights_hash"]' "$a" "$c"
# --on_nonfinite: a learning rate of 1e30 blows the weights up, so some
# step's gradient is not finite. fail (the default) exits 1 naming the step;
# skip finishes and counts the skipped steps (JSON skipped_steps; a clean
# run has 0).
python3 -c 'import json,sys; assert json.loads(sys.argv[1])["skipped_steps"] == 0' "$a"
if err=$("$TRAIN" "${flags[@]}" --lr=1e30 2>&1 >/dev/null); then
  echo "expected --lr=1e30 to fail under --on_nonfinite=fail"; exit 1
fi
echo "lr 1e30, fail: $err"
grep -Eq 'non-finite (gradient|loss) at step [0-9]+ \(--on_nonfinite: fail\)' <<<"$err"
s=$("$TRAIN" "${flags[@]}" --lr=1e30 --on_nonfinite=skip 2>/dev/null)
echo "lr 1e30, skip: $s"
python3 -c 'import json,sys; d = json.loads(sys.argv[1]); assert d["steps"] == 95 and 0 < d["skipped_steps"] <= 95, d' "$s"
if err=$("$TRAIN" "${flags[@]}" --on_nonfinite=ignore 2>&1); then
  echo "expected --on_nonfinite=ignore to be refused"; exit 1
fi
grep -q 'on_nonfinite' <<<"$err"
# Bad input: the error names the file, the line and the field.
if err=$("$TRAIN" --model=softmax --dataset="csv:$dir/bad.csv" 2>&1); then
  echo "expected failure on bad.csv"; exit 1
fi
echo "bad input: $err"
grep -q "bad.csv" <<<"$err"
grep -q "line 2" <<<"$err"
# A bad flag value names the field.
if err=$("$TRAIN" --model=resnet --dataset="csv:$dir/train.csv" 2>&1); then
  echo "expected failure on --model=resnet"; exit 1
fi
grep -q 'unknown model "resnet"' <<<"$err"
echo "PASS"
