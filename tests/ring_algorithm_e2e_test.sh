#!/usr/bin/env bash
# spec.ring_algorithm end to end (issue 9: "no job option picks the ring
# algorithm"), real processes on 127.0.0.1 (OS-chosen ports): a coordinator
# and three worker daemons, K = 3 ring jobs of a small MLP:
#   * --ring_algorithm=direct over tcp gives the same final hash as auto
#     (the gradient is small: auto picks direct) and ring gives another (the
#     ring sums each chunk starting at another rank: other float rounding at
#     K = 3), each SUCCEEDED with every replica identical at every step; the
#     ring job over grpc ends with the ring job's hash over tcp;
#   * a bad value is refused naming the flag (exit 2), a ps job with ring
#     is refused naming spec.ring_algorithm (INVALID_ARGUMENT);
#   * direct for a gradient too large for one direct message fails naming
#     spec.ring_algorithm, the size and the limit, and the workers are idle
#     again: over grpc 1.4 M floats (5.6 MB with the step's 33 loss, count
#     and flag slots; over the grpc message's 4 MiB and the direct
#     algorithm's 2 MiB), over tcp 0.7 M floats (2.8 MB: over 2 MiB).
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=6
source "$(dirname "$0")/e2e_lib.sh"

write_blobs "$T" 5 300 60
DATA="csv:train.csv;test.csv"
S="$T/state"
start_coordinator
for i in 1 2 3; do start_worker; done
JOB=(--workers=3 --model=mlp:8 --dataset="$DATA" --batch=30 --steps=20 --lr=0.1 --momentum=0.9)

# A failing run exits its $(...) subshell (fail); "|| exit 1" ends the test.
run() {  # run NAME FLAGS...: a SUCCEEDED job in sync at every step; prints its hash
  local name=$1; shift
  in_sync_hash "$name" 20 "${JOB[@]}" "$@"
}
echo "== K=3 over tcp: auto, direct, ring"
auto=$(run auto --peer_transport=tcp) || exit 1
direct=$(run direct --peer_transport=tcp --ring_algorithm=direct) || exit 1
ring=$(run ring --peer_transport=tcp --ring_algorithm=ring) || exit 1
[ "$auto" = "$direct" ] || fail "auto ($auto) should pick direct ($direct) for a small gradient"
[ "$ring" != "$direct" ] || fail "ring and direct gave the same hash $ring: is the option ignored?"
echo "== K=3 ring over grpc"
ring_grpc=$(run ring-grpc --peer_transport=grpc --ring_algorithm=ring) || exit 1
[ "$ring_grpc" = "$ring" ] || fail "ring over grpc ($ring_grpc) != ring over tcp ($ring)"

echo "== bad values"
err=$(cli submit "${JOB[@]}" --ring_algorithm=tree 2>&1); rc=$?
[ "$rc" = 2 ] && grep -q -- '--ring_algorithm: expected auto, ring or direct, got "tree"' <<<"$err" \
  || fail "bad flag: exit $rc: $err"
err=$(cli submit "${JOB[@]}" --sync=ps --ring_algorithm=ring 2>&1); rc=$?
[ "$rc" != 0 ] && grep -q "INVALID_ARGUMENT" <<<"$err" && grep -q "spec.ring_algorithm: ring is for ring jobs only" <<<"$err" \
  || fail "ps with ring: exit $rc: $err"

big_direct() {  # big_direct TRANSPORT HIDDEN BYTES
  local out
  out=$(cli submit --workers=2 --model=mlp:"$2" --dataset="$DATA" --batch=4 --steps=2 \
    --peer_transport="$1" --ring_algorithm=direct --follow --json)
  python3 - "$out" "$3" <<'PY' || fail "big direct over $1: $out"
import json, sys
d = json.loads(sys.argv[1])
assert d["state"] == "FAILED", d["state"]
r = d["reason"]
assert f"spec.ring_algorithm: direct sends each gradient buffer in one message of {sys.argv[2]} bytes" in r, r
assert "more than the 2097152 bytes one direct message may hold on this transport" in r, r
print("big direct:", r)
PY
  wait_until $(( $(now_ms) + 10000 )) idle w-1 w-2 w-3 || fail "workers not idle: $(cli workers)"
}
echo "== direct, a gradient over one direct message (grpc 5.6 MB, tcp 2.8 MB)"
big_direct grpc 200000 5600152
big_direct tcp 100000 2800152
echo PASS
