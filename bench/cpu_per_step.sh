#!/usr/bin/env bash
# CPU time per training step of every process of a local cluster: the
# figure to compare when a change is meant to cut lockstep's own per-step
# costs, steadier than examples/s on a shared host (a noisy neighbour
# slows the wall clock more than the CPU a step takes).
#
#   bazel run -c opt //bench:cpu_per_step -- [--workers=K] [--repeats=N] [job flags]
#
# Starts a coordinator and K worker daemons (plain text, 127.0.0.1,
# OS-chosen ports), runs one 50-step warm-up job (dataset load, connections),
# then N times the job (default: the main job's model on Fashion-MNIST,
# ring over tcp, batch 128 per worker, 3000 steps), reading utime + stime
# of every process (/proc/PID/stat) before and after each. Prints, per
# repeat and as the median over repeats: microseconds of CPU per step of the
# coordinator, of each worker and in total, the wall time per step and the
# coordinator's examples/s. Start-up and the final evaluation are inside
# the window (the same in every run being compared); use enough steps.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${LOCKSTEP_BIN:-}
if [ -z "$BIN" ]; then
  for d in "${RUNFILES_DIR:-$0.runfiles}/lockstep" "$here/cpu_per_step.runfiles/lockstep"; do
    [ -x "$d/server/lockstep-coordinator" ] && BIN=$d && break
  done
fi
[ -x "$BIN/server/lockstep-coordinator" ] || { echo "cpu_per_step: binaries not found (set LOCKSTEP_BIN)" >&2; exit 2; }
k=2; repeats=3; job=()
for a in "$@"; do
  case "$a" in
    --workers=*) k=${a#*=} ;;
    --repeats=*) repeats=${a#*=} ;;
    *) job+=("$a") ;;
  esac
done
steps=3000 have_steps=0 have_batch=0
for a in "${job[@]}"; do
  case "$a" in
    --steps=*) steps=${a#*=} have_steps=1 ;;
    --batch=*) have_batch=1 ;;
  esac
done
number() { [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge 1 ] || { echo "cpu_per_step: --$1: expected an integer >= 1, got \"$2\"" >&2; exit 2; }; }
number workers "$k"; number repeats "$repeats"; number steps "$steps"
defaults=(--model=mlp:256 --sync=ring --peer_transport=tcp --lr=0.05 --momentum=0.9 --eval_each_epoch=false)
[ "$have_batch" = 1 ] || defaults+=(--batch=$((128 * k)))
[ "$have_steps" = 1 ] || defaults+=(--steps="$steps")
dir=$(mktemp -d /tmp/lockstep-cpu.XXXXXX); pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$dir"' EXIT
wait_file() { for _ in $(seq 300); do [ -s "$1" ] && return 0; sleep 0.1; done; echo "cpu_per_step: no $1" >&2; exit 1; }
"$BIN/server/lockstep-coordinator" --insecure --listen=127.0.0.1:0 --port_file="$dir/c.port" \
  --metrics_port=-1 2>"$dir/c.log" & pids+=($!)
wait_file "$dir/c.port"
coord=127.0.0.1:$(cat "$dir/c.port")
for i in $(seq "$k"); do
  "$BIN/worker/lockstep-worker" --insecure --coordinator="$coord" --listen=127.0.0.1:0 \
    --port_file="$dir/w$i.port" --metrics_port=-1 2>"$dir/w$i.log" & pids+=($!)
done
for i in $(seq "$k"); do wait_file "$dir/w$i.port"; done
cli() { "$BIN/client/lockstep" --insecure --coordinator="$coord" "$@" 2>/dev/null; }
ticks() { local p=$1; set -- $(cut -d' ' -f14,15 "/proc/$p/stat"); echo $(($1 + $2)); }
hz=$(getconf CLK_TCK)
echo "cpu_per_step: K=$k, $steps steps, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores," \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, job: ${defaults[*]} ${job[*]}"
if ! cli submit --workers="$k" --follow "${defaults[@]}" "${job[@]}" --steps=50 >/dev/null; then
  echo "cpu_per_step: the warm-up job failed (logs kept in $dir)" >&2
  trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null' EXIT
  exit 1
fi
results=()
for r in $(seq "$repeats"); do
  before=(); for p in "${pids[@]}"; do before+=("$(ticks "$p")"); done
  t0=$(date +%s%N)
  out=$(cli submit --workers="$k" --follow --json "${defaults[@]}" "${job[@]}") \
    || { echo "cpu_per_step: job failed: $out" >&2; exit 1; }
  [ "$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['state'])" "$out")" = SUCCEEDED ] \
    || { echo "cpu_per_step: job did not succeed: $out" >&2; exit 1; }
  t1=$(date +%s%N)
  line="" total=0
  for i in "${!pids[@]}"; do
    us=$(( ($(ticks "${pids[$i]}") - before[i]) * 1000000 / hz / steps ))
    total=$((total + us))
    line+=" $us"
  done
  eps=$(python3 -c "import json,sys; print(round(json.loads(sys.argv[1])['examples_per_second']))" "$out")
  wall=$(( (t1 - t0) / 1000 / steps ))
  results+=("$total$line $wall $eps")
  echo "repeat $r: cpu us/step total $total (coordinator, workers:$line), wall us/step $wall, $eps ex/s"
done
python3 - "$k" "${results[@]}" <<'PY'
import statistics, sys
k = int(sys.argv[1])
rows = [list(map(int, r.split())) for r in sys.argv[2:]]
med = [statistics.median(c) for c in zip(*rows)]
workers = " ".join(f"{v:.0f}" for v in med[2:2 + k])
print(f"median over {len(rows)}: cpu us/step total {med[0]:.0f} (coordinator {med[1]:.0f}, "
      f"workers {workers}), wall us/step {med[2 + k]:.0f}, {med[3 + k]:.0f} ex/s")
PY
