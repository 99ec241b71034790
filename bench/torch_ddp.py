"""PyTorch anchor of `bazel run -c opt //bench:scaling`: the same job as the
lockstep cluster (MLP 784-256-10, SGD momentum 0.9, lr 0.05 with cosine
decay over the run, cross-entropy) on the same data (Fashion-MNIST's
training set from the IDX files of Debian's dataset-fashion-mnist, scaled
to [0, 1] like lockstep's default scale255) and the same per-process batch.

Started once per rank by the bench (not torchrun):

  /usr/bin/python3 torch_ddp.py --rank=R --world=W --store=FILE --batch=128 \
      --steps=1500 [--no_ddp]

--world >= 1 wraps the model in DistributedDataParallel over the gloo
backend (file:// rendezvous at --store); --no_ddp (world 1 only) trains the
plain module. Each step rank r takes its contiguous slice of a global batch
of batch x W examples drawn from a per-epoch shuffled permutation, as
lockstep's sampler does. One intra-op and one inter-op thread per process.

Timing: the data load, model and process-group set-up and the first
--warmup steps (default 1) are not timed; rank 0 prints

  RESULT examples_per_second=<global examples of steps W..N-1 / seconds
  from the end of step W-1 to the end of step N-1> steps=N seconds=S loss=L

Needs python3-torch and python3-numpy (bench/setup_torch.sh).
"""

import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F


def load_idx(data_dir):
    """Training images (n, 784) float32 in [0, 1] and labels (n,) int64."""
    images = os.path.join(data_dir, "train-images-idx3-ubyte.gz")
    labels = os.path.join(data_dir, "train-labels-idx1-ubyte.gz")
    with gzip.open(images, "rb") as f:
        raw = f.read()
    magic, n, rows, cols = np.frombuffer(raw[:16], dtype=">u4")
    if magic != 2051:
        sys.exit(f"{images}: magic {magic}, expected 2051 (IDX3 images)")
    x = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, rows * cols)
    with gzip.open(labels, "rb") as f:
        raw = f.read()
    magic, m = np.frombuffer(raw[:8], dtype=">u4")
    if magic != 2049 or m != n:
        sys.exit(f"{labels}: magic {magic} count {m}, expected 2049 and {n}")
    y = np.frombuffer(raw, dtype=np.uint8, offset=8)
    return x.astype(np.float32) / 255.0, y.astype(np.int64)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--store", default="")
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batch", type=int, default=128, help="per-process batch")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1, help="untimed steps")
    p.add_argument("--no_ddp", action="store_true")
    a = p.parse_args()
    if a.no_ddp and a.world != 1:
        sys.exit("--no_ddp needs --world=1")
    if not 1 <= a.warmup < a.steps:
        sys.exit("need 1 <= --warmup < --steps")

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.manual_seed(a.seed)

    x, y = load_idx(a.data_dir)  # numpy; batches are gathered with numpy
    n = x.shape[0]

    model = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], a.hidden), torch.nn.ReLU(),
        torch.nn.Linear(a.hidden, int(y.max()) + 1))
    if not a.no_ddp:
        dist.init_process_group("gloo", init_method="file://" + a.store,
                                rank=a.rank, world_size=a.world)
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.steps)

    global_batch = a.batch * a.world
    steps_per_epoch = (n + global_batch - 1) // global_batch
    rng = np.random.RandomState(a.seed)
    perm = None

    def step(t):
        nonlocal perm
        if t % steps_per_epoch == 0:
            perm = rng.permutation(n)
        b = t % steps_per_epoch
        g = perm[b * global_batch:(b + 1) * global_batch]
        size, extra = divmod(len(g), a.world)
        lo = a.rank * size + min(a.rank, extra)
        idx = g[lo:lo + size + (1 if a.rank < extra else 0)]
        # numpy's fancy indexing gathers rows about 2x faster than
        # torch.index_select here (110 vs 230 us per batch of 128).
        xb = torch.from_numpy(x[idx])
        yb = torch.from_numpy(y[idx])
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        return loss, len(g)

    if not a.no_ddp:
        dist.barrier()
    for t in range(a.warmup):
        step(t)
    t0 = time.perf_counter()
    examples = 0
    loss = None
    for t in range(a.warmup, a.steps):
        loss, g = step(t)
        examples += g
    seconds = time.perf_counter() - t0
    if a.rank == 0:
        print(f"RESULT examples_per_second={examples / seconds:.1f} steps={a.steps} "
              f"seconds={seconds:.3f} loss={float(loss):.4f} torch={torch.__version__}",
              flush=True)
    if not a.no_ddp:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
