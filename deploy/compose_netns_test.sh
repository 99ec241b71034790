#!/usr/bin/env bash
# Runs deploy/compose_netns_test.py (see its docstring) with Debian's python3,
# which deploy/setup.sh gives python3-yaml.
set -uo pipefail
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
here="$(dirname "$0")"
exec "$PY" "$here/compose_netns_test.py" "$@"
