#!/usr/bin/env bash
# Runs client_test.py with Debian's /usr/bin/python3 (where python3-grpcio,
# python3-protobuf and python3-numpy live; a pyenv python may be first on
# PATH) and the package as Bazel built it (generated stubs included).
#   client_test.sh COORDINATOR WORKER CLI
set -euo pipefail
here="$PWD/client/python"   # the runfiles tree: sources and generated stubs together
[ -f "$here/lockstep/_gen/proto/coordinator_pb2.py" ] || { echo "FAIL: stubs not in $here"; exit 1; }
export PYTHONPATH="$here" PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1
unset PYTHONHOME
# -P: no script directory on sys.path (Python resolves the runfiles symlink
# to the source tree, whose lockstep/ has no generated stubs).
exec /usr/bin/python3 -P "$here/client_test.py" "$@"
