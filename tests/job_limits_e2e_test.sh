#!/usr/bin/env bash
# Issue 11, every input bounded, with real processes on 127.0.0.1
# (OS-chosen ports): a coordinator and two worker daemons.
#   0  a job whose model cannot fit (--model=mlp:1000000000, K=1) is refused
#      at submit (exit 1, RESOURCE_EXHAUSTED naming the need and the
#      coordinator's --max_job_memory_bytes, here 4 GB); mlp:20000000 (about
#      2.6 GB counted with 1 feature and 2 classes) fits that but not the
#      1 GB the workers advertise at registration: refused naming the
#      workers' limit. Nothing is created (lockstep jobs stays empty);
#   1  mlp:7000000 passes the coordinator's lower bound (about 0.9 GB with 1
#      feature, 2 classes) but needs 1.2 GB with the data's 3 features and 3
#      classes: refused by the worker before anything is allocated: FAILED
#      with a reason naming RESOURCE_EXHAUSTED-style need and limit ("job
#      needs N bytes ... but the limit is L bytes"), the worker stays alive
#      and IDLE (it used to die of std::bad_alloc and the job failed 3 s
#      later as "lost: no heartbeat");
#   2  then a normal ring job runs on the same workers: SUCCEEDED;
#   3  a ps job whose shard is over gRPC's default 4 MiB (mlp:1100,1000 on 3
#      features: 1,108,403 parameters + the loss slot = 4.4 MB per Push and
#      Pull over gRPC, S = 1 on the coordinator's shard): SUCCEEDED (it failed
#      with "Received message larger than max" before the limits were set
#      deliberately, common/grpcutil/message_limits.h);
#   4  a coordinator with the default --max_job_memory_bytes (0: no limit of
#      its own) accepts that 128 GB job while no worker is registered (it
#      waits PENDING; workers' limits still apply when they register).
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=20
source "$(dirname "$0")/e2e_lib.sh"
write_blobs "$T" 11 200 40
DATA='csv:train.csv;test.csv'

"$COORD" --insecure --listen=127.0.0.1:0 --port_file="$T/coord.port" \
  --max_job_memory_bytes=4000000000 2>"$T/coord.log" & pids+=($!)
wait_file "$T/coord.port"
C="127.0.0.1:$(cat "$T/coord.port")"
declare -A wpid
for i in 1 2; do
  "$WORKER" --insecure --coordinator="$C" --data_dir="$T" --port_file="$T/w$i.port" \
    --max_job_memory_bytes=1000000000 2>"$T/w$i.log" & pids+=($!)
  wpid[$i]=$!
  wait_file "$T/w$i.port"
  wait_until $(( $(now_ms) + 10000 )) idle "w-$i" || fail "w-$i not IDLE: $(cli workers)"
done

# 0: refused at submit, by the coordinator's limit and by the workers'.
t0=$(now_ms)
out=$(cli submit --workers=1 --model=mlp:1000000000 --dataset="$DATA" --batch=8 --steps=5 2>&1) \
  && fail "the huge job was accepted: $out"
echo "mlp:1000000000 refused at submit in $(( $(now_ms) - t0 )) ms: $out"
grep -q "RESOURCE_EXHAUSTED: SubmitJob: job needs at least [0-9]* bytes of memory per worker" \
  <<<"$out" || fail "submit refusal names no need: $out"
grep -q "but the limit is 4000000000 bytes (4.0 GB, the coordinator's --max_job_memory_bytes)" \
  <<<"$out" || fail "submit refusal names no limit: $out"
out=$(cli submit --workers=1 --model=mlp:20000000 --dataset="$DATA" --batch=8 --steps=5 2>&1) \
  && fail "mlp:20000000 was accepted: $out"
echo "mlp:20000000 refused at submit: $out"
grep -q "RESOURCE_EXHAUSTED: SubmitJob: job needs at least .* but only 0 of the 2 live workers can hold it and 1 are needed; the largest worker limit is 1000000000 bytes (1.0 GB, its --max_job_memory_bytes)" \
  <<<"$out" || fail "submit refusal names no worker limit: $out"
[ "$(cli jobs --json | json "len(d.get('jobs', []))")" = 0 ] || fail "a refused job was created: $(cli jobs)"

# 1: a model the coordinator's lower bound lets through, refused by the worker.
t0=$(now_ms)
huge=$(cli submit --workers=1 --model=mlp:7000000 --dataset="$DATA" --batch=8 --steps=5) \
  || fail "submit of the huge job: $huge"
wait_until $(( $(now_ms) + 20000 )) finished "$huge" || fail "huge job not finished: $(cli status "$huge")"
[ "$(state_of "$huge")" = FAILED ] || fail "huge job: expected FAILED, got $(cli status "$huge")"
reason=$(cli status "$huge" --json | json "d.get('reason', '')")
echo "huge job FAILED after $(( $(now_ms) - t0 )) ms: $reason"
grep -q "job needs [0-9]* bytes of memory per worker" <<<"$reason" || fail "reason names no need: $reason"
grep -q "but the limit is 1000000000 bytes (1.0 GB, its --max_job_memory_bytes)" <<<"$reason" \
  || fail "reason names no limit: $reason"
grep -q "no heartbeat" <<<"$reason" && fail "the worker was lost: $reason"
for i in 1 2; do kill -0 "${wpid[$i]}" || fail "worker w-$i died"; done
wait_until $(( $(now_ms) + 5000 )) idle w-1 w-2 || fail "workers not IDLE after the refusal: $(cli workers)"

# 2: a normal job on the same workers.
ok=$(cli submit --workers=2 --model=mlp:8 --dataset="$DATA" --batch=16 --steps=30) || fail "submit: $ok"
wait_until $(( $(now_ms) + 60000 )) finished "$ok" || fail "normal job not finished: $(cli status "$ok")"
[ "$(state_of "$ok")" = SUCCEEDED ] || fail "normal job: expected SUCCEEDED, got $(cli status "$ok")"
echo "normal job after the refusal: SUCCEEDED"

# 3: a ps shard over 4 MiB over gRPC.
t0=$(now_ms)
big=$(cli submit --workers=2 --sync=ps --model=mlp:1100,1000 --dataset="$DATA" --batch=16 \
  --steps=4 --ps_transport=grpc) || fail "submit of the big-shard ps job: $big"
wait_until $(( $(now_ms) + 90000 )) finished "$big" || fail "ps job not finished: $(cli status "$big")"
[ "$(state_of "$big")" = SUCCEEDED ] \
  || fail "ps job with a 4.4 MB shard: expected SUCCEEDED, got $(cli status "$big")"
echo "ps job with a 4.4 MB shard over gRPC: SUCCEEDED in $(( $(now_ms) - t0 )) ms"

# 4: a coordinator started without --max_job_memory_bytes has no limit of its
# own (default 0): its host's memory says nothing about the workers'. With no
# worker registered, the 128 GB job is accepted and waits PENDING (before,
# the default was 3/4 of the coordinator host's memory and it was refused).
"$COORD" --insecure --listen=127.0.0.1:0 --port_file="$T/coord2.port" 2>"$T/coord2.log" \
  & pids+=($!)
wait_file "$T/coord2.port"
C2="127.0.0.1:$(cat "$T/coord2.port")"
cli2() { "$CLI" --insecure --coordinator="$C2" "$@"; }
pending=$(cli2 submit --workers=1 --model=mlp:1000000000 --dataset="$DATA" --batch=8 --steps=5 \
  2>"$T/submit2.err") || fail "a coordinator with the default --max_job_memory_bytes refused the \
job: $(cat "$T/submit2.err")"
[ "$(cli2 status "$pending" --json | json "d['state']")" = PENDING ] \
  || fail "expected PENDING: $(cli2 status "$pending")"
cli2 cancel "$pending" >/dev/null || fail "cancel of the pending job"
echo "default coordinator: mlp:1000000000 accepted (PENDING, no coordinator-side limit)"
echo PASS
