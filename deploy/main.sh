#!/usr/bin/env bash
# The main job. For now: the single-process reference trainer on
# Fashion-MNIST (MLP 784-256-10, 10 epochs). Extra args go to lockstep-train.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
bazel build -c opt //worker:lockstep-train
exec bazel-bin/worker/lockstep-train --model=mlp:256 --epochs=10 --batch=128 \
  --lr=0.05 --momentum=0.9 "$@"
