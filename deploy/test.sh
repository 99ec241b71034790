#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and runs every lockstep test.
#   bash deploy/test.sh            # the whole suite
#   bash deploy/test.sh --config=asan   # the same under ASan + UBSan
# Extra arguments go to `bazel test`. Prints "N passed, N failed" last.
set -uo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh || exit 1
# The tree's top-level packages rather than //... (deploy/tree_patterns.sh).
source deploy/tree_patterns.sh
mapfile -t TREE < <(tree_patterns)
log=$(mktemp)
bazel test "$@" "${TREE[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|FAILED TO BUILD|NO STATUS|INCOMPLETE)' "$log")
rm -f "$log"
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo "tests: $passed passed, $failed failed"
exit "$rc"
