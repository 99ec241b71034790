#!/usr/bin/env bash
# Builds every libFuzzer target in tests/fuzz/ with clang-14 (ASan + UBSan,
# `--config=fuzz`) and runs each for a bounded time on its seed corpus
# (tests/fuzz/corpus/<target>/). Fails on the first crash, leak, timeout,
# out-of-memory or sanitizer report; the reproducer is left in $ARTIFACTS
# (default /tmp/lockstep-fuzz-artifacts) and named in the message.
#
# Usage: bash tests/fuzz/run_fuzzers.sh [seconds per target] [target ...]
#   seconds  default $FUZZ_SECONDS or 20 (7 targets x 20 s, plus the build)
#   target   default: all of them
#
# The fuzz build uses its own Bazel output base ($FUZZ_OUTPUT_BASE, default
# ~/.cache/lockstep-fuzz-bazel) so the gcc build's cache is never
# invalidated, and shuts that server down on exit. New corpus entries
# libFuzzer finds go to a scratch directory, not into the repo.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER=${1:-${FUZZ_SECONDS:-20}}
shift || true
ALL=(data_readers_fuzz job_spec_fuzz ps_wire_fuzz tcp_wire_fuzz peer_wire_fuzz
     coordinator_fuzz ps_service_fuzz)
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL[@]}")
OUT_BASE=${FUZZ_OUTPUT_BASE:-$HOME/.cache/lockstep-fuzz-bazel}
ARTIFACTS=${ARTIFACTS:-/tmp/lockstep-fuzz-artifacts}
BAZEL=(bazel --output_base="$OUT_BASE")

command -v clang-14 >/dev/null || { echo "fuzz: clang-14 missing (run deploy/setup.sh)" >&2; exit 1; }
LOG_DIR=$(mktemp -d /tmp/lockstep-fuzz-logs.XXXXXX)
trap 'rm -rf "$LOG_DIR"; "${BAZEL[@]}" shutdown >/dev/null 2>&1 || true' EXIT
labels=()
for t in "${TARGETS[@]}"; do labels+=("//tests/fuzz:$t"); done
echo "== fuzz: building ${TARGETS[*]} (clang-14, --config=fuzz)" >&2
FUZZ_FLAGS=(--config=fuzz --repo_env=CC="$PWD/tests/fuzz/clang_cc.sh")
# ld.gold warns once per ASan symbol ("Cannot export local symbol"): noise.
if ! "${BAZEL[@]}" build "${FUZZ_FLAGS[@]}" "${labels[@]}" 2>"$LOG_DIR/build.log"; then
  grep -v "Cannot export local symbol" "$LOG_DIR/build.log" | tail -40 >&2
  echo "fuzz: build failed" >&2
  exit 1
fi
BIN=$("${BAZEL[@]}" info "${FUZZ_FLAGS[@]}" bazel-bin 2>/dev/null)/tests/fuzz

mkdir -p "$ARTIFACTS"
SCRATCH=$(mktemp -d /tmp/lockstep-fuzz-corpus.XXXXXX)
trap 'rm -rf "$SCRATCH" "$LOG_DIR"; "${BAZEL[@]}" shutdown >/dev/null 2>&1 || true' EXIT
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=()
for t in "${TARGETS[@]}"; do
  seeds=tests/fuzz/corpus/$t
  [ -d "$seeds" ] || { echo "fuzz: no seed corpus $seeds" >&2; exit 1; }
  mkdir -p "$SCRATCH/$t"
  echo "== fuzz: $t for ${SECONDS_PER}s (seeds: $(ls "$seeds" | wc -l))" >&2
  # New inputs go to $SCRATCH/$t (first corpus dir); the seeds (including
  # committed regression inputs) are read, never written.
  if ! "$BIN/$t" -max_total_time="$SECONDS_PER" -timeout=10 -rss_limit_mb=3072 -malloc_limit_mb=2048 \
      -max_len=4096 -print_final_stats=1 -artifact_prefix="$ARTIFACTS/$t-" \
      "$SCRATCH/$t" "$seeds" 2>"$SCRATCH/$t.log"; then
    tail -n 60 "$SCRATCH/$t.log" >&2
    echo "fuzz: $t FAILED; reproducer: $(ls -t "$ARTIFACTS/$t-"* 2>/dev/null | head -1)" >&2
    failed+=("$t")
    continue
  fi
  grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$SCRATCH/$t.log" | tail -2 >&2 || true
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: all ${#TARGETS[@]} targets ran ${SECONDS_PER}s each without a finding" >&2
