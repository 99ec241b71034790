#!/usr/bin/env bash
# The main job: sets up the machine, builds, starts a coordinator and 4
# worker daemons on 127.0.0.1, trains MLP 784-256-10 on Fashion-MNIST in
# ring mode (peers over shared memory: every worker is on this host) with a live progress bar,
# prints the final test accuracy and the sync summary, and stops every
# process it started.
# Extra arguments go to deploy/cluster.sh (e.g. --sync=ps for ps mode,
# --peer_transport=tcp or grpc for the ring over the raw-TCP data plane or the workers' gRPC servers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
bazel build -c opt //server:lockstep-coordinator //worker:lockstep-worker //client:lockstep \
  //server/ps:lockstep-server //worker:lockstep-train
exec bash deploy/cluster.sh --model=mlp:256 --sync=ring --peer_transport=shm --batch=128 \
  --epochs=10 "$@"
