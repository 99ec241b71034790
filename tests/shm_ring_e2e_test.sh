#!/usr/bin/env bash
# --peer_transport=shm end to end (issue 9: "a shared-memory transport for
# workers on one host is not built"): real processes on 127.0.0.1 (one
# host, OS-chosen ports), a coordinator and three worker daemons.
#   * the ring over shared memory gives the bits of the ring over raw TCP
#     and over gRPC, for each forced all-reduce algorithm (ring, direct),
#     at K = 2 and K = 3, and with bf16 on the wire; every job SUCCEEDED
#     with every replica identical at every step; its spec says SHM;
#   * a lost worker: SIGKILL of one rank of a K = 2 shm job (the links
#     see no end-of-stream) fails the job within 5 s naming the worker,
#     and the survivor is IDLE again within the same bound;
#   * shrink: SIGKILL of one rank of a K = 3 shm job with
#     --on_worker_lost=shrink: the two survivors regroup over fresh
#     segments and the job SUCCEEDS in sync;
#   * no segment made during the test is left in /dev/shm.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=8
source "$(dirname "$0")/e2e_lib.sh"

write_blobs "$T" 5 300 60
DATA="csv:train.csv;test.csv"
S="$T/state"
# Segments of this test's workers (a segment's header holds its writer's
# and reader's pids; other tests running beside this one have their own).
new_segments() {
  python3 - "${wpid[@]}" <<'PY'
import glob, struct, sys
ours = set(int(p) for p in sys.argv[1:])
for f in sorted(glob.glob("/dev/shm/lockstep-*")):
    try:
        with open(f, "rb") as s:
            h = s.read(144)
    except OSError:
        continue
    if len(h) == 144 and ({struct.unpack_from("<I", h, 76)[0], struct.unpack_from("<I", h, 140)[0]} & ours):
        print(f)
PY
}
none_new() { [ -z "$(new_segments)" ]; }
start_coordinator
for i in 1 2 3; do start_worker; done
JOB=(--model=mlp:16 --dataset="$DATA" --batch=30 --steps=20 --lr=0.1 --momentum=0.9)

run() {  # run NAME K FLAGS...: a SUCCEEDED job in sync at every step; prints its hash
  local name=$1 k=$2; shift 2
  in_sync_hash "$name" 20 --workers="$k" "${JOB[@]}" "$@"
}
n=0
for k in 2 3; do
  for alg in ring direct; do
    echo "== K=$k $alg: shm, tcp and grpc"
    shm=$(run "shm-k$k-$alg" "$k" --peer_transport=shm --ring_algorithm="$alg") || exit 1
    tcp=$(run "tcp-k$k-$alg" "$k" --peer_transport=tcp --ring_algorithm="$alg") || exit 1
    grpc=$(run "grpc-k$k-$alg" "$k" --peer_transport=grpc --ring_algorithm="$alg") || exit 1
    [ "$shm" = "$tcp" ] || fail "K=$k $alg: shm ($shm) != tcp ($tcp)"
    [ "$shm" = "$grpc" ] || fail "K=$k $alg: shm ($shm) != grpc ($grpc)"
    n=$((n + 3))
    got=$(cli status "$((n - 2))" --json | json "d['spec'].get('peer_transport', 'GRPC')")
    [ "$got" = SHM ] || fail "job $((n - 2)): spec says peer_transport $got, expected SHM"
  done
done
echo "== K=2 bf16 on the wire: shm = tcp"
shm=$(run shm-bf16 2 --peer_transport=shm --compression=bf16) || exit 1
tcp=$(run tcp-bf16 2 --peer_transport=tcp --compression=bf16) || exit 1
[ "$shm" = "$tcp" ] || fail "bf16: shm ($shm) != tcp ($tcp)"

is_failed() { cli status "$1" --json | grep -q '"state":"FAILED"'; }
echo "== SIGKILL of rank 1 of a K=2 shm job: FAILED within 5 s, the survivor IDLE"
job=$(cli submit --workers=2 --peer_transport=shm --model=mlp:8 --dataset="$DATA" --batch=24 \
  --steps=1000000 --lr=0.1) || fail "submit: $job"
wait_until $(( $(now_ms) + 30000 )) stepped "$job" 20 || fail "job $job made no progress: $(cli status "$job")"
victim=$(cli status "$job" --json | json "[r['worker_id'] for r in d['ranks'] if int(r.get('rank', 0)) == 1][0]")
survivor=$(cli status "$job" --json | json "[r['worker_id'] for r in d['ranks'] if int(r.get('rank', 0)) == 0][0]")
kill_worker "${victim#w-}"
t0=$(now_ms)
wait_until $(( t0 + 5000 )) is_failed "$job" || fail "job $job not FAILED within 5 s: $(cli status "$job")"
wait_until $(( t0 + 5000 )) idle "$survivor" || fail "survivor $survivor not IDLE within 5 s: $(cli workers)"
reason=$(cli status "$job" --json | json "d['reason']")
case "$reason" in *"worker $victim (rank 1"*"lost"*) ;; *) fail "reason does not name $victim: $reason" ;; esac
echo "job $job FAILED and $survivor IDLE $(( $(now_ms) - t0 )) ms after the kill: $reason"

echo "== SIGKILL of one rank of a K=3 shrink job: the survivors regroup over shm"
start_worker  # w-4, so that three are idle again
job=$(cli submit --workers=3 --peer_transport=shm --on_worker_lost=shrink --model=mlp:8 \
  --dataset="$DATA" --batch=24 --steps=6000 --lr=0.1) || fail "submit: $job"
wait_until $(( $(now_ms) + 30000 )) stepped "$job" 20 || fail "job $job made no progress: $(cli status "$job")"
victim=$(cli status "$job" --json | json "[r['worker_id'] for r in d['ranks'] if int(r.get('rank', 0)) == 2][0]")
kill_worker "${victim#w-}"
wait_until $(( $(now_ms) + 120000 )) finished "$job" || fail "job $job not finished"
out=$(cli status "$job" --json)
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "shrink: expected SUCCEEDED: $out"
[ "$(json "int(d['world'])" <<<"$out")" = 2 ] || fail "shrink: expected world 2: $out"
[ "$(json "int(d.get('mismatched_steps', 0))" <<<"$out")" = 0 ] || fail "shrink: replicas differ: $out"
echo "job $job SUCCEEDED with 2 ranks after losing $victim"

# Every link's name is removed once both ends attached; the killed
# workers' links had both ends too.
wait_until $(( $(now_ms) + 10000 )) none_new || fail "segments left in /dev/shm: $(new_segments)"
echo PASS
