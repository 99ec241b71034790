#!/bin/sh
# C/C++ compiler of the fuzz build (run_fuzzers.sh passes it as CC): clang-14
# minus the GCC-only flags some BUILD files set (-fvect-cost-model=...,
# which clang rejects). Everything else is passed through unchanged.
for a; do
  shift
  case "$a" in
    -fvect-cost-model=*) ;;
    *) set -- "$@" "$a" ;;
  esac
done
exec clang-14 "$@"
