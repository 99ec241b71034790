#!/usr/bin/env bash
# Issue 10, "the sync history stays bounded in memory and --follow never
# fetches an unbounded history": the reported case, real processes on
# 127.0.0.1 (OS-chosen ports), 4 worker daemons:
#   lockstep submit --workers=4 --model=softmax --batch=8 --steps=26000 --follow
# must exit 0 (it printed SUCCEEDED and then exited 2 with RESOURCE_EXHAUSTED
# when its final sync fetch asked for the whole history). Then
# `lockstep sync JOB --all` pages through everything:
#   * coordinator WITH --state_dir: every one of the 26000 steps, once, in
#     order (steps older than memory's window from the database);
#   * coordinator WITHOUT --state_dir (second phase, a shorter job of
#     STEPS2 steps to keep the test short): the steps older than the window
#     summarised (the summary line and runs), then the window's steps in
#     order (a finished job keeps its newest 128 checks); runs + kept checks
#     add up to every step.
# The coordinator's VmRSS is printed before and after each job. With
# --max_finished_jobs_in_memory=1 a second job evicts the first: with
# --state_dir, `lockstep jobs` still lists it (from the database), `follow`
# ends with its SUCCEEDED and `export` writes its weights; without, `jobs`
# says one was dropped and `status` names it evicted.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=15
STEPS=${STEPS:-26000}
STEPS2=${STEPS2:-3000}
WINDOW=128  # a finished job's window (server/job_store.h)
source "$(dirname "$0")/e2e_lib.sh"

write_blobs "$T" 5 400 100
DATA='csv:train.csv;test.csv'
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

run_phase() {  # run_phase NAME STEPS [coordinator flags...]
  local name=$1 steps=$2; shift 2
  rm -f "$T/coord.port"
  "$COORD" --insecure --listen=127.0.0.1:0 --metrics_port=-1 --port_file="$T/coord.port" "$@" \
    2>"$T/$name-coord.log" & pids+=($!)
  local cpid=$!
  wait_file "$T/coord.port"
  C="127.0.0.1:$(cat "$T/coord.port")"
  cli() { "$CLI" --insecure --coordinator="$C" "$@"; }
  local wpids=()
  for i in 1 2 3 4; do
    rm -f "$T/w$i.port"
    "$WORKER" --insecure --coordinator="$C" --data_dir="$T" --port_file="$T/w$i.port" --metrics_port=-1 \
      2>"$T/$name-w$i.log" & pids+=($!); wpids+=($!)
    wait_file "$T/w$i.port"
  done
  for _ in $(seq 200); do [ "$(cli workers | grep -c IDLE)" = 4 ] && break; sleep 0.05; done
  [ "$(cli workers | grep -c IDLE)" = 4 ] || fail "$name: 4 idle workers expected: $(cli workers)"
  echo "== $name: coordinator VmRSS before the job: $(rss_kb $cpid) kB"
  local t0=$(date +%s.%N)
  cli submit --workers=4 --model=softmax --batch=8 --steps="$steps" --dataset="$DATA" --follow \
    > "$T/$name-follow.out" 2>&1
  local rc=$?
  local t1=$(date +%s.%N)
  tail -4 "$T/$name-follow.out"
  [ "$rc" = 0 ] || fail "$name: submit --follow exited $rc: $(tail -3 "$T/$name-follow.out")"
  grep -q SUCCEEDED "$T/$name-follow.out" || fail "$name: no SUCCEEDED in the follow output"
  echo "== $name: $steps steps at K=4 in $(python3 -c "print(round($t1 - $t0, 1))") s;" \
    "coordinator VmRSS after: $(rss_kb $cpid) kB"
  JOB=$(cli jobs | awk 'NR > 1 && $1 ~ /^[0-9]+$/ {j = $1} END {print j}')
  cli sync "$JOB" --all > "$T/$name-sync.out" 2>&1 || fail "$name: sync --all: $(tail -3 "$T/$name-sync.out")"
  cli sync "$JOB" > "$T/$name-sync-last.out" 2>&1 || fail "$name: sync: $(tail -3 "$T/$name-sync-last.out")"
  head -3 "$T/$name-sync.out"
  if [ "$name" = no_db ]; then
    # --max_finished_jobs_in_memory=1: a second job evicts the first (once
    # its workers are idle, at a Tick): `jobs` says so, `status` names it.
    cli submit --workers=4 --model=softmax --batch=8 --steps=20 --dataset="$DATA" --follow \
      > "$T/$name-second.out" 2>&1 || fail "$name: second job: $(tail -3 "$T/$name-second.out")"
    for _ in $(seq 200); do cli jobs | grep -q "older finished job" && break; sleep 0.05; done
    cli jobs | tee "$T/$name-jobs.out" | tail -2
    grep -q "(1 older finished job(s) not listed: the coordinator keeps the newest 1 in memory;" \
      "$T/$name-jobs.out" || fail "$name: jobs does not say a job was evicted"
    cli status "$JOB" > "$T/$name-evicted.out" 2>&1 && fail "$name: status of an evicted job succeeded"
    grep -q "job $JOB was evicted from memory" "$T/$name-evicted.out" ||
      fail "$name: status of the evicted job: $(cat "$T/$name-evicted.out")"
    cat "$T/$name-evicted.out"
  fi
  if [ "$name" = with_db ]; then
    # --max_finished_jobs_in_memory=1 and --state_dir: the database answers
    # for the evicted job.
    cli submit --workers=4 --model=softmax --batch=8 --steps=20 --dataset="$DATA" --follow \
      > "$T/$name-second.out" 2>&1 || fail "$name: second job: $(tail -3 "$T/$name-second.out")"
    evicted() { [ "$(cli jobs --json | json "int(d.get('evicted_jobs', 0))")" = 1 ]; }
    wait_until $(( $(now_ms) + 10000 )) evicted || fail "$name: job $JOB not evicted: $(cli jobs)"
    cli jobs --json | json "int(d.get('evicted_listed', 0)) == 1 and [int(j['job_id']) for j in d['jobs']] == [$JOB, $JOB + 1] and d['jobs'][0]['state'] == 'SUCCEEDED'" \
      | grep -q True || fail "$name: jobs does not list the evicted job: $(cli jobs --json)"
    cli jobs | tee "$T/$name-jobs.out" | grep -q "older finished job" && fail "$name: jobs says a job is not listed"
    cli follow "$JOB" > "$T/$name-evicted-follow.out" 2>&1 ||
      fail "$name: follow of the evicted job: $(tail -3 "$T/$name-evicted-follow.out")"
    grep -q "job $JOB SUCCEEDED" "$T/$name-evicted-follow.out" ||
      fail "$name: follow of the evicted job: $(cat "$T/$name-evicted-follow.out")"
    cli export "$JOB" --out="$T/evicted.npy" > "$T/$name-export.out" 2>&1 ||
      fail "$name: export of the evicted job: $(cat "$T/$name-export.out")"
    echo "== $name: job $JOB evicted from memory; jobs lists it, follow and export answer from the database"
    # A third job: two evicted, one page of one (--max_listed_evicted_jobs=1):
    # `jobs` lists the newer, says the other is left and how to list it;
    # `jobs --all` pages through both.
    cli submit --workers=4 --model=softmax --batch=8 --steps=20 --dataset="$DATA" --follow \
      > "$T/$name-third.out" 2>&1 || fail "$name: third job: $(tail -3 "$T/$name-third.out")"
    evicted2() { [ "$(cli jobs --json | json "int(d.get('evicted_jobs', 0))")" = 2 ]; }
    wait_until $(( $(now_ms) + 10000 )) evicted2 || fail "$name: two jobs not evicted: $(cli jobs)"
    cli jobs | tee "$T/$name-jobs3.out" | grep -q "(1 older finished job(s) not listed: .*\`lockstep jobs --all\` lists them" \
      || fail "$name: jobs does not point at --all: $(cat "$T/$name-jobs3.out")"
    cli jobs --all --json | json "int(d['evicted_listed']) == 2 and [int(j['job_id']) for j in d['jobs']] == [$JOB, $JOB + 1, $JOB + 2]" \
      | grep -q True || fail "$name: jobs --all: $(cli jobs --all --json)"
    cli jobs --all | grep -q "older finished job" && fail "$name: jobs --all left a job out"
    echo "== $name: two evicted jobs, a page of one: jobs --all lists all three"
  fi
  for p in "${wpids[@]}" "$cpid"; do kill "$p" 2>/dev/null; done
  for p in "${wpids[@]}" "$cpid"; do wait "$p" 2>/dev/null; done
}

# Checks the `sync --all` output of a job of $2 steps. $3 = "full": every
# step printed once, in order; "summarised": runs + steps add up, the
# window's steps printed in order.
check_sync() {
  python3 - "$1" "$2" "$3" "$WINDOW" <<'PY' || fail "sync --all output ($3): see above"
import re, sys
path, steps, mode, window = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
text = open(path).read()
head = re.search(r"(\d+) steps checked, (\d+) mismatched", text)
assert head, text[:500]
checked = int(head.group(1))
assert steps - 10 <= checked <= steps, (checked, steps)
shown = [int(m) for m in re.findall(r"^  step +(\d+) ", text, re.M)]
runs = [(int(a), int(b), int(n)) for a, b, n in
        re.findall(r"^  steps (\d+)-(\d+)  all ranks matched in (\d+) checked", text, re.M)]
if mode == "full":
    assert not runs, runs[:3]
    assert shown == sorted(set(shown)), "steps out of order or repeated"
    assert len(shown) == checked, (len(shown), checked)
else:
    assert "per-step checks are not kept" in text, text[:500]
    assert "no --state_dir database" in text
    assert runs, "no runs"
    assert len(shown) >= window and shown[-window:] == sorted(set(shown[-window:]))
    assert sum(n for _, _, n in runs) + len(shown) == checked, (runs, len(shown), checked)
print(f"sync --all ({mode}): {checked} checked, {len(shown)} step lines, {len(runs)} run(s)")
PY
}

run_phase with_db "$STEPS" --state_dir="$T/state" --max_finished_jobs_in_memory=1 \
  --max_listed_evicted_jobs=1
check_sync "$T/with_db-sync.out" "$STEPS" full
run_phase no_db "$STEPS2" --max_finished_jobs_in_memory=1
check_sync "$T/no_db-sync.out" "$STEPS2" summarised
grep -q "all ranks matched" "$T/no_db-sync-last.out" || fail "sync (newest) printed no runs"
echo PASS
