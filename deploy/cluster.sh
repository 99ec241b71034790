#!/usr/bin/env bash
# Starts a local lockstep cluster on 127.0.0.1 (a coordinator and N worker
# daemons, OS-chosen ports), submits one job with --follow, prints the
# final test accuracy and the sync summary, and stops every process it
# started (also on Ctrl-C or failure).
#
#   bash deploy/cluster.sh [--workers_to_start=N] [--ps_servers=S] [job flags for `lockstep submit`]
#   bash deploy/cluster.sh --scale [flags for `lockstep scale`]   # instead of one job,
#       the scaling-efficiency curve, e.g. --scale --steps=1500 --workers_list=1,2,4 --out=/tmp/s
#
# Job flags default to the main job (MLP 784-256-10 on Fashion-MNIST, ring
# mode, 4 workers). Examples:
#   bash deploy/cluster.sh --peer_transport=tcp       # ring over the workers' raw-TCP data ports
#   bash deploy/cluster.sh --peer_transport=shm       # ring over shared memory (every worker is local)
#   bash deploy/cluster.sh --sync=ps                  # parameter-server mode (coordinator hosts the shard)
#   bash deploy/cluster.sh --ps_servers=2 --sync=ps --ps_shards=2
#   bash deploy/cluster.sh --model=softmax --epochs=3
# Every gRPC channel uses mutual TLS: deploy/certs.sh makes a CA, per-role
# certificates and a bearer token in the cluster's temp folder ($dir/pki) and
# every process gets --tls_cert/--tls_key/--tls_ca (the coordinator and the
# client also --token_file), every daemon --http_token_file (its /metrics
# and the status page ask for $dir/pki/http_token). --insecure runs
# everything in plain text, with open HTTP pages, instead.
# Needs the binaries built: bazel build -c opt //server:lockstep-coordinator
#   //worker:lockstep-worker //client:lockstep //server/ps:lockstep-server
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${LOCKSTEP_BIN:-bazel-out/k8-opt/bin}
n=4
ps_servers=0
args=()
scale=0
insecure=0
for a in "$@"; do
  case "$a" in
    --workers_to_start=*) n="${a#*=}" ;;
    --ps_servers=*) ps_servers="${a#*=}" ;;
    --scale) scale=1 ;;
    --insecure) insecure=1 ;;
    *) args+=("$a") ;;
  esac
done
dir=$(mktemp -d /tmp/lockstep-cluster.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  echo "cluster: stopped ${#pids[@]} processes (logs in $dir)" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_file() {  # wait up to 20 s for a port file
  for _ in $(seq 200); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "cluster: $2 did not start (see $dir)" >&2; return 1
}

# tls ROLE: the flags of a process with ROLE's certificate ("--insecure"
# without TLS).
if [ "$insecure" = 1 ]; then
  tls() { echo --insecure; }
  token=()
  http=()
else
  bash deploy/certs.sh --out="$dir/pki" || { echo "cluster: deploy/certs.sh failed" >&2; exit 1; }
  tls() { echo "--tls_cert=$dir/pki/$1.pem --tls_key=$dir/pki/$1.key --tls_ca=$dir/pki/ca.pem"; }
  token=(--token_file="$dir/pki/token")
  http=(--http_token_file="$dir/pki/http_token")
fi

ps_addrs=""
for s in $(seq 1 "$ps_servers"); do
  "$BIN/server/ps/lockstep-server" --role=ps --listen=127.0.0.1:0 --port_file="$dir/ps$s.port" \
    $(tls server) "${http[@]}" 2>"$dir/ps$s.log" & pids+=($!)
  wait_file "$dir/ps$s.port" "ps server $s" || exit 1
  ps_addrs="${ps_addrs:+$ps_addrs,}127.0.0.1:$(cat "$dir/ps$s.port")"
done
"$BIN/server/lockstep-coordinator" --listen=127.0.0.1:0 --port_file="$dir/coordinator.port" \
  ${ps_addrs:+--ps_addresses=$ps_addrs} $(tls coordinator) "${token[@]}" "${http[@]}" \
  --metrics_port_file="$dir/coordinator.mport" 2>"$dir/coordinator.log" & pids+=($!)
wait_file "$dir/coordinator.port" coordinator || exit 1
coord="127.0.0.1:$(cat "$dir/coordinator.port")"
for i in $(seq 1 "$n"); do
  "$BIN/worker/lockstep-worker" --coordinator="$coord" --listen=127.0.0.1:0 \
    --port_file="$dir/worker$i.port" $(tls worker) "${http[@]}" 2>"$dir/worker$i.log" & pids+=($!)
done
for i in $(seq 1 "$n"); do wait_file "$dir/worker$i.port" "worker $i" || exit 1; done
echo "cluster: coordinator $coord, $n workers${ps_addrs:+, ps $ps_addrs} (logs in $dir)," \
  "$([ "$insecure" = 1 ] && echo "plain text (--insecure)" || echo "mutual TLS (certificates in $dir/pki)")" >&2
wait_file "$dir/coordinator.mport" "the coordinator's HTTP server" || exit 1
echo "cluster: status page http://127.0.0.1:$(cat "$dir/coordinator.mport")/" \
  "$([ "$insecure" = 1 ] && echo "(open)" || echo "(any user name, password: the token in $dir/pki/http_token)")" >&2
run=(submit --workers="$n" --follow); [ "$scale" = 1 ] && run=(scale)
cli=("$BIN/client/lockstep" --coordinator="$coord" $(tls client) "${token[@]}")
"${cli[@]}" "${run[@]}" "${args[@]}"
rc=$?
"${cli[@]}" workers >&2
exit $rc
