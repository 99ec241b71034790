#!/usr/bin/env bash
# Runs tls_role_test.py with Debian's /usr/bin/python3 and the package as
# Bazel built it (see client_test.sh).   tls_role_test.sh CERTS_SH
set -euo pipefail
here="$PWD/client/python"
[ -f "$here/lockstep/_gen/proto/coordinator_pb2.py" ] || { echo "FAIL: stubs not in $here"; exit 1; }
export PYTHONPATH="$here" PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1
unset PYTHONHOME
exec /usr/bin/python3 -P "$here/tls_role_test.py" "$PWD/$1"
