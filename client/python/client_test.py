"""The lockstep Python client against a real cluster of processes on 127.0.0.1.

    client_test.py COORDINATOR_BINARY WORKER_BINARY CLI_BINARY

Starts a coordinator and two worker daemons (OS-chosen ports, --port_file),
runs the README's example on a short Fashion-MNIST MLP job over the raw-TCP
ring, and checks that a NumPy forward pass with the fetched weights on the
test split classifies exactly as many examples right as the coordinator's
reported test accuracy says; then status/sync/jobs/workers/cancel, the error
paths, and that submit() builds the same JobSpec as `lockstep submit` for
the same flags (jobs left PENDING on purpose, then cancelled).
"""

import dataclasses
import gzip
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import grpc
import numpy as np

import lockstep
from lockstep import views as lt

COORD, WORKER, CLI = (os.path.abspath(p) for p in sys.argv[1:4])
del sys.argv[1:4]
FASHION = "/usr/share/datasets/fashion-mnist"
STEPS = 300           # 300 x 128 examples: about 0.64 epochs
HIDDEN = 64
TMP = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
PROCS = []
ADDR = None


def wait_for(what, predicate, timeout=30.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def start(name, argv):
    log = open(os.path.join(TMP, name + ".log"), "w")
    PROCS.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)))


def port_of(path, name):
    def read():
        for n, p in PROCS:
            if n == name and p.poll() is not None:
                raise AssertionError(f"{name} exited with {p.returncode}")
        try:
            with open(path) as f:
                text = f.read().strip()
            return int(text) if text else None
        except FileNotFoundError:
            return None
    return wait_for(f"{name}'s port file {path}", read)


def setUpModule():
    global ADDR
    port_file = os.path.join(TMP, "coord.port")
    start("coordinator", [COORD, "--insecure", "--listen=127.0.0.1:0", f"--port_file={port_file}"])
    ADDR = f"127.0.0.1:{port_of(port_file, 'coordinator')}"
    for i in (1, 2):
        pf = os.path.join(TMP, f"w{i}.port")
        start(f"worker{i}", [WORKER, "--insecure", f"--coordinator={ADDR}", f"--port_file={pf}"])
        port_of(pf, f"worker{i}")
    with lockstep.Client(ADDR, insecure=True) as c:
        wait_for("2 idle workers", lambda: sum(w.state == "IDLE" for w in c.workers()) == 2)


def tearDownModule():
    # Workers first, so they can still tell the coordinator they leave.
    for name, p in reversed(PROCS):
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    for name, p in PROCS:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        with open(os.path.join(TMP, name + ".log")) as f:
            tail = f.readlines()[-3:]
        print(f"== {name} (exit {p.returncode}), last lines:\n" + "".join(tail), end="")


def read_idx_gz(path):
    """A gzipped IDX file of unsigned bytes -> uint8 array of its dims."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: expected an IDX file of unsigned bytes, magic {data[:4]!r}")
    ndim = data[3]
    dims = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def cli(*args):
    r = subprocess.run([CLI, "--insecure", f"--coordinator={ADDR}", *args], capture_output=True,
                       text=True, timeout=60)
    # Without --insecure's warning line (tests/tls_e2e_test checks it), so
    # error messages compare exactly.
    r.stderr = "".join(line for line in r.stderr.splitlines(True)
                       if not line.startswith("lockstep: warning: --insecure"))
    return r


class TrainAndForwardPass(unittest.TestCase):
    """The README's example on a real job; the weights reproduce its accuracy."""

    def test_readme_example_and_numpy_forward_pass(self):
        # -- the README's five lines (with a short job) -------------------------
        c = lockstep.Client(ADDR, insecure=True)
        job = c.submit(model=f"mlp:{HIDDEN}", workers=2, sync="ring", peer_transport="tcp",
                       steps=STEPS)
        events = [ev for ev in c.follow(job, timeout=240)]
        w = c.weights(job)
        accuracy = c.status(job).test_accuracy
        # -----------------------------------------------------------------------
        self.assertIsInstance(job, int)
        steps = [ev.step for ev in events]
        print(f"job {job}: {len(events)} events, steps {steps[:3]} ... {steps[-3:]}, "
              f"states {sorted(set(ev.state for ev in events))}")
        self.assertEqual(events[-1].state, "SUCCEEDED", events[-1])
        self.assertTrue(all(not ev.done for ev in events[:-1]), [ev.state for ev in events])
        self.assertEqual(steps, sorted(steps), "steps went backwards")
        self.assertEqual(steps[-1], STEPS)
        self.assertGreaterEqual(len(set(steps)), 3, f"too few progress events: {steps}")
        self.assertTrue(all(ev.total_steps == STEPS for ev in events if ev.state == "RUNNING"))
        self.assertTrue(all(math.isfinite(ev.loss) for ev in events))
        last = events[-1]
        self.assertEqual(last.mode, "ring/tcp")
        self.assertEqual(last.spec.model, f"mlp:{HIDDEN}")
        self.assertFalse(last.out_of_sync)
        self.assertEqual(last.checked_steps, STEPS)

        # Weights: the model's layout, W_l (fan_in, fan_out).
        self.assertEqual(list(w), ["W0", "b0", "W1", "b1"])
        self.assertEqual({k: v.shape for k, v in w.items()},
                         {"W0": (784, HIDDEN), "b0": (HIDDEN,), "W1": (HIDDEN, 10), "b1": (10,)})
        self.assertTrue(all(v.dtype == np.float32 for v in w.values()))
        flat = c.weights(job, flat=True)
        self.assertEqual(flat.shape, (784 * HIDDEN + HIDDEN + HIDDEN * 10 + 10,))
        np.testing.assert_array_equal(flat, np.concatenate([v.ravel() for v in w.values()]))

        # The test split as the workers load it: t10k, scale255 = x / 255 in
        # float32 (common/data/dataset.cc), labels are the class indices.
        x = read_idx_gz(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz"))
        y = read_idx_gz(os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz"))
        self.assertEqual(x.shape, (10000, 28, 28))
        x = x.reshape(len(x), -1).astype(np.float32) / np.float32(255)
        h = np.maximum(x @ w["W0"] + w["b0"], np.float32(0))
        z = h @ w["W1"] + w["b1"]
        self.assertEqual(z.dtype, np.float32)
        pred = np.argmax(z, axis=1)  # first maximum, as the model's argmax
        correct = int(np.sum(pred == y))
        top2 = np.sort(z, axis=1)[:, -2:]
        near_ties = int(np.sum(top2[:, 1] - top2[:, 0] < 1e-4))
        print(f"coordinator test_accuracy {accuracy!r}; NumPy forward pass {correct}/{len(y)} "
              f"= {correct / len(y)!r} ({near_ties} examples within 1e-4 of a tie)")
        self.assertGreater(accuracy, 0.5)
        self.assertEqual(correct, round(accuracy * len(y)),
                         f"NumPy: {correct} right; coordinator: {accuracy} "
                         f"({near_ties} near ties)")
        self.assertAlmostEqual(correct / len(y), accuracy, delta=1e-6)

        # Status, sync history, listings.
        st = c.status(job)
        self.assertEqual((st.state, st.step, st.total_steps), ("SUCCEEDED", STEPS, STEPS))
        self.assertTrue(st.has_weights)
        self.assertEqual(len(st.final_hash), 32)
        self.assertEqual(len(st.ranks), 2)
        self.assertTrue(all(r.in_sync and r.step == STEPS for r in st.ranks), st.ranks)
        self.assertTrue(all(r.data_address.startswith("127.0.0.1:") for r in st.ranks))
        self.assertEqual(st.proto.job_id, job)
        sy = c.sync(job)
        self.assertEqual((sy.job_id, sy.checked_steps, sy.mismatched_steps,
                          sy.first_mismatch_step), (job, STEPS, 0, -1))
        # A finished job keeps its newest 128 checks in memory; the older
        # (matching) steps come back as one SyncRun (no --state_dir here).
        self.assertEqual([ch.step for ch in sy.checks], list(range(STEPS - 128, STEPS)))
        self.assertEqual([(r.first_step, r.last_step, r.checks) for r in sy.runs],
                         [(0, STEPS - 129, STEPS - 128)])
        # Paged (as `lockstep sync --all`): the summary first, then the window.
        pages = list(c.sync_pages(job, per_page=50))
        self.assertEqual(pages[0].summarised_to_step, STEPS - 128)
        self.assertIn("per-step checks are not kept", pages[0].summary)
        self.assertEqual([ch.step for p in pages for ch in p.checks],
                         list(range(STEPS - 128, STEPS)))
        self.assertTrue(all(len(p.checks) <= 50 for p in pages))
        self.assertTrue(all(ch.all_match and len(ch.rank_hashes) == 2 and not ch.differing_ranks
                            for ch in sy.checks))
        self.assertEqual(sy.checks[-1].majority_hash, st.final_hash)
        self.assertEqual([ch.step for ch in c.sync(job, max_entries=5).checks],
                         list(range(STEPS - 5, STEPS)))
        self.assertIn(job, [j.job_id for j in c.jobs()])
        # No --state_dir here: nothing evicted, no later page.
        jl = c.job_list()
        self.assertEqual((jl.evicted_jobs, jl.evicted_next_before), (0, 0))
        self.assertEqual(c.job_list(evicted_before=job).jobs, ())
        with self.assertRaisesRegex(ValueError, "evicted_before: expected a job id >= 0, got -1"):
            c.job_list(evicted_before=-1)
        ws = wait_for("both workers idle after the job",
                      lambda: [w for w in c.workers() if w.state == "IDLE"] or None)
        self.assertTrue(all(w.data_address for w in ws))
        self.assertEqual(c.status(st).job_id, job)  # a JobStatus is accepted as the job

        # The CLI's export of the same job holds the same arrays.
        out = os.path.join(TMP, "w.npz")
        r = cli("export", str(job), f"--out={out}")
        self.assertEqual(r.returncode, 0, r.stderr)
        with np.load(out) as npz:
            self.assertEqual(list(npz.keys()), list(w))
            for k in w:
                np.testing.assert_array_equal(npz[k], w[k])


class Errors(unittest.TestCase):
    """Bad calls fail with the flag, field or job named."""

    @classmethod
    def setUpClass(cls):
        cls.c = lockstep.Client(ADDR, timeout=10, insecure=True)

    def assertRpcError(self, code, text, fn, *args, **kwargs):
        with self.assertRaises(lockstep.LockstepError) as cm:
            fn(*args, **kwargs)
        e = cm.exception
        self.assertEqual(e.code, code, str(e))
        self.assertIn(text, e.message)
        self.assertEqual(e.code_name, code.name)
        return e

    def test_unknown_keyword(self):
        with self.assertRaisesRegex(TypeError, r"submit\(\).*'worker'.*did you mean 'workers'"):
            self.c.submit(worker=2)
        with self.assertRaisesRegex(TypeError, "'bogus'"):
            lockstep.job_spec_from_flags(bogus=1)

    def test_bad_values_name_the_flag(self):
        with self.assertRaisesRegex(ValueError, '^--sync: expected ring or ps, got "mesh"$'):
            self.c.submit(sync="mesh")
        with self.assertRaisesRegex(ValueError, r"^--workers: expected a 32-bit integer"):
            self.c.submit(workers=2**31)
        with self.assertRaisesRegex(ValueError, r"^--seed: expected an unsigned"):
            self.c.submit(seed=-1)
        with self.assertRaisesRegex(ValueError, r"^--lr: .* out of range"):
            self.c.submit(lr=1e39)
        with self.assertRaisesRegex(TypeError, r"^--workers: expected an int, got str '2'"):
            self.c.submit(workers="2")
        with self.assertRaisesRegex(TypeError, r"^--nesterov: expected a bool"):
            self.c.submit(nesterov=1)
        with self.assertRaisesRegex(TypeError, r"^--model: expected a str"):
            self.c.submit(model=64)
        # The same words as the CLI.
        with self.assertRaises(ValueError) as cm:
            self.c.submit(peer_transport="quic")
        r = cli("submit", "--peer_transport=quic")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.strip(),
                         f"lockstep submit: INVALID_ARGUMENT: {cm.exception}")
        # Checked by the coordinator: LockstepError naming the field.
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, "spec.model",
                            self.c.submit, model="resnet", workers=2)
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, "base_lr",
                            self.c.submit, lr=0.0, workers=2)
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "idle",
                            self.c.submit, workers=5, no_wait=True)

    def test_job_files(self):
        with self.assertRaisesRegex(FileNotFoundError, "job file /nonexistent/j.txt: cannot open"):
            self.c.submit(job_file="/nonexistent/j.txt")
        bad = os.path.join(TMP, "bad_job.txt")
        with open(bad, "w") as f:
            f.write('model: "softmax"\nbogus: 3\n')
        with self.assertRaisesRegex(ValueError, f"job file {bad}: line 2 col 1: .*bogus"):
            self.c.submit(job_file=bad)

    def test_unknown_jobs_and_bad_ids(self):
        for fn in (self.c.status, self.c.cancel, self.c.sync, self.c.weights):
            e = self.assertRpcError(grpc.StatusCode.NOT_FOUND, "job 999", fn, 999)
            self.assertTrue(str(e).startswith(e.rpc + ": NOT_FOUND: "), str(e))
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, "job 999",
                            lambda: next(iter(self.c.follow(999))))
        with self.assertRaisesRegex(ValueError, "positive job id, got 0"):
            self.c.status(0)
        with self.assertRaisesRegex(TypeError, "job id"):
            self.c.status("1")

    def test_no_coordinator(self):
        with socket.socket() as s:  # bound, never listening: connections are refused
            s.bind(("127.0.0.1", 0))
            c = lockstep.Client(f"127.0.0.1:{s.getsockname()[1]}", timeout=5, insecure=True)
            self.assertRpcError(grpc.StatusCode.UNAVAILABLE, "", c.jobs)
            c.close()

    def test_follow_deadline_cancel_and_missing_weights(self):
        job = self.c.submit(workers=3, model="softmax")  # 2 workers: stays PENDING
        try:
            seen = []
            with self.assertRaises(lockstep.LockstepError) as cm:
                for ev in self.c.follow(job, timeout=3):
                    seen.append(ev.state)
            self.assertEqual(cm.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
            self.assertIn(f"job {job} did not end within 3 s, last seen PENDING",
                          cm.exception.message)
            self.assertEqual(seen, ["PENDING"])
        finally:
            st = self.c.cancel(job)
        self.assertEqual(st.state, "CANCELLED")
        self.assertEqual([ev.state for ev in self.c.follow(job, timeout=10)], ["CANCELLED"])
        self.assertRpcError(grpc.StatusCode.FAILED_PRECONDITION, "no final weights",
                            self.c.weights, job)


class SameSpecAsCli(unittest.TestCase):
    """submit(**flags) sends the JobSpec `lockstep submit --flags` sends."""

    @classmethod
    def setUpClass(cls):
        cls.c = lockstep.Client(ADDR, insecure=True)
        cls.job_file = os.path.join(TMP, "job.txt")
        with open(cls.job_file, "w") as f:
            f.write('model: "softmax"\nsync_mode: RING\nepochs: 3\nnum_workers: 2\nglobal_batch: 64\n'
                    'optimizer { kind: "adam" beta1: 0.8 }\nlr { base_lr: 0.002 decay: "step" step_size: 50 }\n')

    @staticmethod
    def cli_args(flags):
        out = []
        for k, v in flags.items():
            v = ("true" if v else "false") if isinstance(v, bool) else str(v)
            out.append(f"--{k}={v}")
        return out

    def check_same(self, flags):
        # Every case asks for more workers than are idle (K >= 3 of 2), so
        # the jobs wait PENDING and are cancelled after the comparison.
        r = cli("submit", *self.cli_args(flags))
        self.assertEqual(r.returncode, 0, f"{flags}: {r.stderr}")
        cli_job = int(r.stdout.strip())
        py_job = self.c.submit(**flags)
        try:
            cli_spec = self.c.status(cli_job).spec
            py_spec = self.c.status(py_job).spec
            self.assertEqual(py_spec, cli_spec, f"{flags}\npython:\n{py_spec}\ncli:\n{cli_spec}")
            self.assertEqual(py_spec, lockstep.job_spec_from_flags(**flags))
        finally:
            self.assertEqual(self.c.cancel(cli_job).state, "CANCELLED")
            self.assertEqual(self.c.cancel(py_job).state, "CANCELLED")

    def test_defaults(self):
        self.check_same({})  # K = 4 by default
        # Both data planes default to raw TCP, as in `lockstep submit`.
        spec = lockstep.job_spec_from_flags()
        self.assertEqual((spec.peer_transport, spec.ps_transport),
                         (lockstep.job_pb2.TCP, lockstep.job_pb2.TCP))
        self.check_same(dict(workers=3, sync="ps", peer_transport="grpc", ps_transport="grpc"))

    def test_many_flags(self):
        self.check_same(dict(name="py", model="mlp:32,16", workers=3, batch=96, steps=7,
                             seed=7, sync="ring", peer_transport="tcp", momentum=0.5,
                             nesterov=True, weight_decay=0.0001, lr=0.3, linear_scaling=True,
                             reference_batch=64, warmup_steps=10, warmup_start_factor=0.25,
                             decay="step", step_size=100, gamma=0.5, eval_each_epoch=False,
                             normalize="minmax"))
        self.check_same(dict(workers=3, sync="ps", optimizer="adamw", beta1=0.85,
                             beta2=0.99, eps=1e-7, min_lr=0.001, epochs=2))
        # The issue 9/10 flags: overlap, compression, ps data plane, failure
        # policies, checkpoints and resume.
        self.check_same(dict(workers=3, steps=20, bucket_bytes=65536, compression="bf16",
                             ring_algorithm="direct",
                             on_divergence="halt", on_nonfinite="skip",
                             on_worker_lost="shrink", checkpoint_dir="/tmp/ck",
                             checkpoint_every_steps=5, checkpoint_every_seconds=60,
                             checkpoint_keep=2, resume_from="/tmp/ck/job-3/step-7.ckpt"))
        self.check_same(dict(workers=3, sync="ps", ps_transport="tcp", steps=20,
                             resume_from="/tmp/ck/job-4/"))
        self.check_same(dict(workers=3, steps=20, on_worker_lost="wait",
                             wait_timeout_ms=2500, stall_timeout_ms=12000))

    def test_job_file_overridden_by_given_flags(self):
        self.check_same(dict(job_file=self.job_file, workers=3, lr=0.01))
        spec = lockstep.job_spec_from_flags(job_file=self.job_file, workers=3, lr=0.01)
        self.assertEqual((spec.model, spec.epochs, spec.optimizer.kind, spec.lr.decay,
                          spec.num_workers, spec.global_batch, spec.optimizer.momentum),
                         ("softmax", 3, "adam", "step", 3, 64, 0.0))
        self.assertAlmostEqual(spec.lr.base_lr, 0.01, places=6)
        self.assertAlmostEqual(spec.optimizer.beta1, 0.8, places=6)

    def test_momentum_given_with_adam_is_rejected_by_both(self):
        r = cli("submit", "--workers=3", "--optimizer=adam", "--momentum=0.5")
        self.assertEqual(r.returncode, 2, r.stderr)
        with self.assertRaises(lockstep.LockstepError) as cm:
            self.c.submit(workers=3, optimizer="adam", momentum=0.5)
        self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("momentum", cm.exception.message)
        self.assertEqual(r.stderr.strip(), f"lockstep submit: INVALID_ARGUMENT: "
                                           f"{cm.exception.message}")


class Views(unittest.TestCase):
    def test_dataclasses_mirror_every_proto_field(self):
        for cls, message in lt.MESSAGES.items():
            proto_fields = [f.name for f in
                            lockstep.coordinator_pb2.DESCRIPTOR.message_types_by_name[message]
                            .fields]
            mine = [f.name for f in dataclasses.fields(cls) if f.name != "proto"]
            self.assertEqual(mine, proto_fields, cls.__name__)


if __name__ == "__main__":
    assert sys.executable == "/usr/bin/python3" or os.path.realpath(sys.executable).startswith(
        "/usr/bin/python3"), sys.executable
    unittest.main(verbosity=2)
