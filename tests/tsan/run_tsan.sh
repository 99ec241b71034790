#!/usr/bin/env bash
# Runs the lockstep suite under ThreadSanitizer (`--config=tsan`).
#
# Usage: bash tests/tsan/run_tsan.sh [bazel test flags] [targets]
#   targets default: the tsan set (below); prints "tests: N passed, N failed".
#        bash tests/tsan/run_tsan.sh --ci          # the CI subset (ci_set.txt)
#        bash tests/tsan/run_tsan.sh --absl_only   # only build abseil
#        bash tests/tsan/run_tsan.sh --sh          # the shell tests (end to end,
#                                                  # TSan-built daemons) but
#                                                  # those in sh_excluded.txt
#
# Why abseil is rebuilt: Debian's libabsl is not built with TSan, so
# absl::Mutex's Lock/Unlock (in libabsl_synchronization.so) synchronise with
# atomics and futexes TSan never sees, and every ABSL_GUARDED_BY field is
# reported as a race (all 5 tests tried failed that way). This script
# downloads Debian's own abseil source package (the exact version of the
# installed libabsl, Debian's patches applied), builds libabsl_synchronization
# and the libraries it needs with -fsanitize=thread, same sonames and ABI,
# into $TSAN_ABSL_PREFIX/<version>/lib (default ~/.cache/lockstep-tsan-absl;
# kept, so later runs skip the ~3.5 min build), and links every tsan binary
# with an RPATH to that folder. gRPC's own mutexes are absl::Mutex too, so
# they become visible through the same libraries. Only the apt source index
# is fetched (into a temporary folder; the system's apt configuration is not
# touched), from deb.debian.org.
# //tests/tsan:absl_mutex_visible_test fails if the uninstrumented library
# is the one loaded.
#
# Own Bazel output base ($TSAN_OUTPUT_BASE, default ~/.cache/bazel-tsan) so
# the gcc build's cache is untouched; its server is shut down on exit.
# Suppressions: tests/tsan/tsan.supp (none for lockstep's code).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT_BASE=${TSAN_OUTPUT_BASE:-$HOME/.cache/bazel-tsan}
BAZEL=(bazel --output_base="$OUT_BASE")

for tool in cmake dpkg-source g++ apt-get; do
  command -v "$tool" >/dev/null || { echo "tsan: $tool missing (run deploy/setup.sh)" >&2; exit 1; }
done
# The runtime's version, e.g. 20220623.1-1+deb12u2 (a binNMU suffix +bN is
# not part of the source version).
BIN_VERSION=$(dpkg-query -W -f='${Version}' libabsl20220623 2>/dev/null) ||
  { echo "tsan: libabsl20220623 is not installed (run deploy/setup.sh)" >&2; exit 1; }
SRC_VERSION=${BIN_VERSION%+b[0-9]*}
PREFIX=${TSAN_ABSL_PREFIX:-$HOME/.cache/lockstep-tsan-absl}/$SRC_VERSION
LIB=$PREFIX/lib
# Every abseil library, not only synchronization: absl::Status's payload is
# reference-counted inside libabsl_status, and absl::call_once's template
# code is resolved to whichever library's copy loads first (an uninstrumented
# libabsl_random_* copy made LowLevelAlloc's arena look racy). Changing the
# flags rebuilds (the recipe is stamped).
ABSL_TARGETS=(all)
ABSL_FLAGS="-fsanitize=thread -O1 -g -fno-omit-frame-pointer"
RECIPE="abseil $SRC_VERSION targets ${ABSL_TARGETS[*]} flags $ABSL_FLAGS"

build_absl() {
  local work
  work=$(mktemp -d /tmp/lockstep-tsan-absl.XXXXXX)
  echo "tsan: building abseil $SRC_VERSION with -fsanitize=thread in $work" >&2
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/src"
  cat >"$work/sources.list" <<'EOF'
deb-src http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian bookworm-updates main
deb-src http://deb.debian.org/debian-security bookworm-security main
EOF
  local apt=(apt-get -q -o Dir::Etc::SourceList="$work/sources.list"
             -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$work/lists"
             -o Dir::Cache="$work/cache" -o APT::Sandbox::User=root)
  "${apt[@]}" update >"$work/apt.log" 2>&1 &&
    (cd "$work/src" && "${apt[@]}" source --download-only "abseil=$SRC_VERSION" >>"$work/apt.log" 2>&1) &&
    (cd "$work/src" && dpkg-source -x ./*.dsc absl >>"$work/apt.log" 2>&1) ||
    { tail -20 "$work/apt.log" >&2; echo "tsan: could not fetch abseil $SRC_VERSION source" >&2; return 1; }
  # Debian's configuration (debian/rules: C++17, shared) plus TSan flags.
  local flags=$ABSL_FLAGS
  cmake -S "$work/src/absl" -B "$work/build" -DCMAKE_BUILD_TYPE=None \
      -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON \
      -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
      -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >"$work/cmake.log" 2>&1 &&
    cmake --build "$work/build" --target "${ABSL_TARGETS[@]}" -j"$(nproc)" >>"$work/cmake.log" 2>&1 ||
    { tail -30 "$work/cmake.log" >&2; echo "tsan: abseil build failed ($work)" >&2; return 1; }
  # A fresh folder renamed into place: binaries still running keep theirs.
  rm -rf "$LIB.new" && mkdir -p "$LIB.new" &&
    find "$work/build" -name 'libabsl_*.so.*' -exec cp -a {} "$LIB.new/" \; || return 1
  # Same soname as the system library, and really instrumented.
  readelf -d "$LIB.new/libabsl_synchronization.so.20220623" | grep -q 'SONAME.*libabsl_synchronization.so.20220623' &&
    nm -D "$LIB.new/libabsl_synchronization.so.20220623" | grep -q '__tsan_mutex_pre_lock' &&
    nm -D "$LIB.new/libabsl_status.so.20220623" | grep -q '__tsan_' ||
    { echo "tsan: $LIB.new has no TSan build of absl_synchronization/absl_status" >&2; return 1; }
  echo "$RECIPE" >"$LIB.new/.complete"
  rm -rf "$LIB.old"; [ ! -d "$LIB" ] || mv "$LIB" "$LIB.old"
  mv "$LIB.new" "$LIB" && rm -rf "$LIB.old"
  rm -rf "$work"
}

if [ "$(cat "$LIB/.complete" 2>/dev/null)" != "$RECIPE" ]; then
  start=$(date +%s)
  build_absl || exit 1
  echo "tsan: abseil built in $(( $(date +%s) - start )) s" >&2
fi
if [ "${1:-}" = --absl_only ]; then echo "tsan: instrumented abseil in $LIB" >&2; exit 0; fi

# The tree as target patterns, //... without the top-level bazel-*
# convenience symlinks: this script's Bazel (its own output base) does not
# skip a symlink into another output base, and bazel-<workspace> from the
# normal phases (not in .bazelignore unless the checkout is named main or
# lockstep) would load bazel_tools' packages as ours and fail.
source "$ROOT/deploy/tree_patterns.sh"
mapfile -t TREE < <(tree_patterns)

TARGETS=()
FLAGS=()
SUPP_EXTRA=""
for a in "$@"; do
  case "$a" in
    --ci)
      mapfile -t -O "${#TARGETS[@]}" TARGETS < <(grep -o '^//[^[:space:]]*' tests/tsan/ci_set.txt)
      [ ${#TARGETS[@]} -gt 0 ] || { echo "tsan: no targets in tests/tsan/ci_set.txt" >&2; exit 1; }
      ;;
    --sh)
      # Every sh_test but the excluded (sh_excluded.txt: the reason beside each).
      mapfile -t excluded < <(grep -o '^//[^[:space:]]*' tests/tsan/sh_excluded.txt)
      tree_expr=$(printf ' + %s' "${TREE[@]}"); tree_expr=${tree_expr# + }
      mapfile -t -O "${#TARGETS[@]}" TARGETS < <("${BAZEL[@]}" query "kind(sh_test, $tree_expr)" 2>/dev/null |
        grep -vxF -f <(printf '%s\n' "${excluded[@]}"))
      [ ${#TARGETS[@]} -gt 0 ] || { echo "tsan: bazel query found no shell tests" >&2; exit 1; }
      SUPP_EXTRA=tests/tsan/tsan_sh.supp
      ;;
    -*) FLAGS+=("$a") ;;
    *) TARGETS+=("$a") ;;
  esac
done
# The tsan set (CI runs the subset in ci_set.txt first, then the rest):
# every C++ test (cc_test) in the tree, i.e. the unit and in-process tests
# of common/, worker/, server/, client/, the in-process transports and
# collectives, the ps registry, membership and the coordinator, plus
# //tests/tsan:absl_mutex_visible_test (tagged manual: it only means
# something here). Only C++ tests are built (--build_tests_only), not the
# daemons. Not in the set: the shell tests (sh_test: the end-to-end tests
# start the daemons; `--sh` runs them, CI's third part).
# (Until 2026-12-05 the 21 tests that start no thread were left out too;
# they are cheap, so the set is every C++ test now.)
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=("${TREE[@]}" //tests/tsan:absl_mutex_visible_test)
  FLAGS=(--build_tests_only --test_lang_filters=cc "${FLAGS[@]}")
fi

log=$(mktemp /tmp/lockstep-tsan-log.XXXXXX)
# The suppressions: tsan.supp, plus tsan_sh.supp for the shell tests.
SUPP=$ROOT/tests/tsan/tsan.supp
if [ -n "$SUPP_EXTRA" ]; then
  SUPP=$(mktemp /tmp/lockstep-tsan-supp.XXXXXX)
  cat "$ROOT/tests/tsan/tsan.supp" "$ROOT/$SUPP_EXTRA" >"$SUPP"
fi
trap 'rm -f "$log"; [ -z "$SUPP_EXTRA" ] || rm -f "$SUPP"; "${BAZEL[@]}" shutdown >/dev/null 2>&1 || true' EXIT
# DT_RPATH (not RUNPATH) so libraries loaded by libgrpc also resolve there.
# TSan runs our code 5-15x slower: timeouts per size are raised (small 120 s,
# medium 900 s, large 1800 s); a flag given to this script overrides them.
# history_size=7 (the most): a race's earlier access keeps its stack even
# in the long-running daemons of the shell tests, so the gRPC suppressions,
# which match frames of that stack, can tell gRPC's hand-offs from ours
# (with the default a report may say "failed to restore the stack").
COMMON=(--config=tsan -k
    --linkopt=-Wl,--disable-new-dtags --linkopt=-Wl,-rpath,"$LIB"
    --test_timeout=120,900,1800,3600
    --test_env=TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=7:suppressions=$SUPP"
    "${FLAGS[@]}")
# Build first, then test, so the log says how long each took.
start=$(date +%s)
"${BAZEL[@]}" build "${COMMON[@]}" -- "${TARGETS[@]}" 2>&1 | tee "$log"
build_rc=${PIPESTATUS[0]}
echo "tsan: build took $(( $(date +%s) - start )) s (exit $build_rc)" >&2
start=$(date +%s)
"${BAZEL[@]}" test "${COMMON[@]}" -- "${TARGETS[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo "tsan: tests took $(( $(date +%s) - start )) s (exit $rc)" >&2
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|FAILED TO BUILD|NO STATUS|INCOMPLETE)' "$log")
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo "tests: $passed passed, $failed failed"
exit "$rc"
