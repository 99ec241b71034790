#!/usr/bin/env bash
# JobSpec.compression in ps mode end to end (issue 9: "Compression in ps
# mode (rejected naming spec.compression)"), real processes on 127.0.0.1
# (OS-chosen ports): a coordinator hosting the ps shard and two worker
# daemons, K = 2 ps jobs of a small MLP:
#   * bf16 over the gRPC data plane (Push/Pull) and over the raw-TCP one
#     end with the same final hash (the values rounded once by each
#     worker, summed in float32 by the shard, the sum rounded once), and
#     that hash differs from float32's and from fp16's (the option is not
#     ignored); every job SUCCEEDED with every replica identical at every
#     step;
#   * the same with overlap on (--bucket_bytes: one bucket per shard);
#   * the job's spec keeps the compression (status --json).
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=6
source "$(dirname "$0")/e2e_lib.sh"

write_blobs "$T" 5 300 60
DATA="csv:train.csv;test.csv"
S="$T/state"
start_coordinator
for i in 1 2; do start_worker; done
JOB=(--workers=2 --sync=ps --model=mlp:16 --dataset="$DATA" --batch=30 --steps=20 --lr=0.1
     --momentum=0.9)

# A failing run exits its $(...) subshell (fail); "|| exit 1" ends the test.
run() {  # run NAME FLAGS...: a SUCCEEDED job in sync at every step; prints its hash
  local name=$1; shift
  in_sync_hash "$name" 20 "${JOB[@]}" "$@"
}
echo "== K=2 ps: none, bf16 and fp16 over grpc and tcp"
none=$(run none --ps_transport=tcp) || exit 1
bf16_grpc=$(run bf16-grpc --ps_transport=grpc --compression=bf16) || exit 1
bf16_tcp=$(run bf16-tcp --ps_transport=tcp --compression=bf16) || exit 1
fp16_tcp=$(run fp16-tcp --ps_transport=tcp --compression=fp16) || exit 1
fp16_grpc=$(run fp16-grpc --ps_transport=grpc --compression=fp16) || exit 1
[ "$bf16_grpc" = "$bf16_tcp" ] || fail "bf16: grpc ($bf16_grpc) != tcp ($bf16_tcp)"
[ "$fp16_grpc" = "$fp16_tcp" ] || fail "fp16: grpc ($fp16_grpc) != tcp ($fp16_tcp)"
[ "$bf16_tcp" != "$none" ] || fail "bf16 gave float32's hash $none: is the option ignored?"
[ "$fp16_tcp" != "$none" ] || fail "fp16 gave float32's hash $none: is the option ignored?"
[ "$fp16_tcp" != "$bf16_tcp" ] || fail "fp16 and bf16 gave the same hash $fp16_tcp"
# The jobs' specs keep what was asked (jobs 1-5 in the order above).
for j in "1|none|TCP" "2|bf16|GRPC" "3|bf16|TCP" "4|fp16|TCP" "5|fp16|GRPC"; do
  IFS='|' read -r id want transport <<<"$j"
  got=$(cli status "$id" --json | json "d['spec'].get('compression') or 'none'")
  got_t=$(cli status "$id" --json | json "d['spec'].get('ps_transport', 'GRPC')")
  [ "$got/$got_t" = "$want/$transport" ] || fail "job $id: spec has $got/$got_t, expected $want/$transport"
done
echo "== overlap on (one bucket per shard): the same bits"
bf16_overlap=$(run bf16-tcp-overlap --ps_transport=tcp --compression=bf16 --bucket_bytes=256) || exit 1
[ "$bf16_overlap" = "$bf16_tcp" ] || fail "bf16 with overlap ($bf16_overlap) != without ($bf16_tcp)"
echo PASS
