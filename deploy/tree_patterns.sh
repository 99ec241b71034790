# Sourced by deploy/test.sh and tests/tsan/run_tsan.sh.
# tree_patterns: prints the target patterns of this source tree, one per
# line: //:all and //DIR/... for each top-level directory holding a BUILD
# file, skipping bazel-* (Bazel's convenience symlinks), every other
# symlink and what .bazelignore lists. Used instead of //...: in a checkout
# not named in .bazelignore, `bazel-<checkout>` may point into another
# output base (the fuzz or TSan Bazel's, whichever ran last), and //...
# then walks into it and loads bazel_tools' packages as ours ("'tools/jdk'
# is not a package"; the CI check of 0dee23f, 2026-12-07).
tree_patterns() {
  local d
  echo //:all
  for d in */; do
    d=${d%/}
    case "$d" in bazel-*) continue ;; esac
    [ -L "$d" ] && continue
    grep -qxF "$d" .bazelignore 2>/dev/null && continue
    [ -n "$(find "$d" \( -name BUILD -o -name BUILD.bazel \) -print -quit)" ] || continue
    echo "//$d/..."
  done
}
