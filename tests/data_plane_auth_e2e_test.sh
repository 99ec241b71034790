#!/usr/bin/env bash
# Issue 11, real processes: "a stranger's connection to a worker's data
# port" cannot inject frames. On 127.0.0.1 with OS-chosen ports, in plain
# text (--insecure): a lockstep-server ps shard (TCP data port), a
# coordinator (--ps_addresses = that shard) and two workers.
#   1  a K=2 ring job over raw TCP without a stranger: its final hash H1;
#   2  the same job again; once it has stepped, tests/data_plane_stranger.py,
#      which knows the job's group key (from the workers' "job started" log)
#      but not its data-plane secret, connects to both workers' data ports:
#      a hello with a forged mac then frames, a version-1 hello then frames,
#      a hello cut short. Every attempt is refused (closed unread); the job
#      SUCCEEDS with H1 and each worker logged "data plane connection
#      refused" naming the stranger's 127.0.0.1 address and the wrong mac;
#   3  the same for a K=2 ps job over --ps_transport=tcp at the ps server's
#      data port (refused with a hello reply naming the wrong mac, logged by
#      the ps server): SUCCEEDED with its hash without the stranger.
# The secret is in no status reply.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"; PS="$4"; STRANGER="$5"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=25
source "$(dirname "$0")/e2e_lib.sh"
write_blobs "$T" 11 2000 200 16
DATA='csv:train.csv;test.csv'
t_start=$(now_ms)

"$PS" --insecure --listen=127.0.0.1:0 --port_file="$T/ps.port" --metrics_port=-1 \
  2>"$T/ps.log" & pids+=($!)
wait_file "$T/ps.port"
P="127.0.0.1:$(cat "$T/ps.port")"
"$COORD" --insecure --listen=127.0.0.1:0 --port_file="$T/coord.port" --metrics_port=-1 \
  --ps_addresses="$P" 2>"$T/coord.log" & pids+=($!)
wait_file "$T/coord.port"
C="127.0.0.1:$(cat "$T/coord.port")"
for i in 1 2; do
  "$WORKER" --insecure --coordinator="$C" --data_dir="$T" --port_file="$T/w$i.port" \
    --metrics_port=-1 2>"$T/w$i.log" & pids+=($!)
  wait_file "$T/w$i.port"
  wait_until $(( $(now_ms) + 10000 )) idle "w-$i" || fail "w-$i not IDLE: $(cli workers)"
done
peers=()
declare -A peer_of  # worker id (w-1: logs to w1.log) -> its data port target
while read -r id addr data _; do peers+=("peer@$data"); peer_of[$id]="peer@$data"; done \
  < <(cli workers | grep -E '^w-[12] ')
[ "${#peers[@]}" = 2 ] || fail "expected 2 workers with data addresses: $(cli workers)"
ps_data=$(grep -o 'data_port=[0-9]*' "$T/ps.log" | head -1 | cut -d= -f2)
[ -n "$ps_data" ] && [ "$ps_data" -gt 0 ] || fail "no data_port in ps.log"

# run_job NAME STRANGER_TARGETS SUBMIT_ARGS...: submits; with targets, runs
# the stranger against them once the job has stepped; waits for the end;
# writes the final hash to $T/NAME.hash.
run_job() {
  local name=$1 targets=$2; shift 2
  local id t0 group
  id=$(cli submit "$@") || fail "$name: submit: $id"
  t0=$(now_ms)
  wait_until $(( $(now_ms) + 30000 )) stepped "$id" 3 || fail "$name: job $id never stepped"
  if [ -n "$targets" ]; then
    group=$(grep "job started" "$T/w1.log" | grep "job=$id " | grep -o 'group=[0-9]*' | tail -1 | cut -d= -f2)
    [ -n "$group" ] || fail "$name: no group key for job $id in w1.log"
    # shellcheck disable=SC2086
    /usr/bin/python3 "$STRANGER" --group="$group" $targets >"$T/$name.stranger.out" 2>&1 \
      || { cat "$T/$name.stranger.out"; fail "$name: the stranger was not refused"; }
    sed 's/^/  /' "$T/$name.stranger.out"
    [ "$(state_of "$id")" = RUNNING ] || fail "$name: the job ended before the stranger did"
  fi
  finish_job "$name" "$id" "$t0"
  grep -qi secret "$T/$name.status.json" \
    && fail "$name: a status reply mentions a secret: $(cat "$T/$name.status.json")"
}

RING=(--workers=2 --peer_transport=tcp --model=mlp:256,256 --dataset="$DATA" --batch=64
      --steps=2000 --seed=5)
PSJOB=(--workers=2 --sync=ps --ps_transport=tcp --model=mlp:256,256 --dataset="$DATA"
       --batch=64 --steps=1500 --seed=6)
same_hash_with_and_without ring-tcp run_job "" "${peers[*]}" "${RING[@]}"
same_hash_with_and_without ps-tcp run_job "" "ps@127.0.0.1:$ps_data" "${PSJOB[@]}"

# Each forged attempt is logged by its target naming the stranger's own
# address (its source port, printed by the stranger), not just any port.
targets=("${peer_of[w-1]}" "${peer_of[w-2]}" "ps@127.0.0.1:$ps_data")
logs=(w1 w2 ps)
for i in 0 1 2; do
  f=${logs[$i]}
  froms=$(cat "$T"/*.stranger.out | grep -F "${targets[$i]} forged from " \
          | sed -E 's/.* forged from ([0-9.]+:[0-9]+): .*/\1/')
  [ -n "$froms" ] || fail "no forged attempt at ${targets[$i]} in the stranger's output"
  for from in $froms; do
    grep -F "connection from $from: " "$T/$f.log" | grep -q 'connection refused.*wrong mac' \
      || fail "$f.log has no refusal naming the stranger's address $from and the wrong mac"
  done
  echo "$f.log: the forged hellos from $(echo $froms) refused and logged with their address; e.g.:"
  grep -F "connection from $(echo "$froms" | head -1): " "$T/$f.log" | head -1 | cut -c1-260
done
echo "total $(( $(now_ms) - t_start )) ms"
echo PASS
