"""A bounded flood of malformed messages at lockstep daemons (issue 11).

  python3 flood.py --rounds=N --seed=S --out=FILE [--until=F --progress=P]
                   [--tls_dir=PKI --tls_role=ROLE] TARGET...
  TARGET = KIND@HOST:PORT
    coordinator  lockstep.v1.Coordinator and ParameterServer (its shard)
    worker       lockstep.v1.PeerService and ReplicaState
    ps           lockstep.v1.ParameterServer (lockstep-server)
    tcp          a raw-TCP data port (worker hub, ps data plane)
  Every gRPC KIND is also flooded at the TCP level (random bytes, a cut
  HTTP/2 preface, a silent connection), and the coordinator's and ps
  server's raw-TCP ps data port (learnt with DataAddress) as a tcp target.

Per round and gRPC method: bytes that are no proto (field number 0), a
length-delimited field cut short, random bytes behind an invalid tag, and a
well-formed request naming another job, worker or step (job 987654,
worker "w-987654", absurd sizes, other groups); per target two messages over
the server's limit (17 MiB for the coordinator's control RPCs, 20 MiB for a
worker's peer service). Per round and TCP port: random bytes, a hello cut
short, a hello-shaped header naming another group with a random mac, a frame
header announcing 2^40 bytes, 1 MiB of random bytes, a silent connection.
With --until, every target is flooded round after round (at most --rounds)
until file F exists; P then holds the number of rounds every target has
completed (rewritten after each). No request names the running job's id or group: the flood must be refused,
never obeyed. Every call has a 2 s deadline; every socket a 2 s timeout.

With --tls_dir every gRPC call goes over mutual TLS with PKI/ROLE.pem and
.key (deploy/certs.sh's files): an insider holding a valid certificate of
that role (e.g. worker), but no worker token and no bearer token. The
raw-TCP targets get the same plain bytes (under --data_plane_tls the
daemons expect a TLS handshake there).

Writes FILE as JSON: {target: {outcome: count}} (outcome = a gRPC status
code name, or for TCP "closed"/"timeout"/"refused"), and prints one line per
target. Exits 1 only when a call that must be refused returned OK.
"""
import argparse
import json
import os
import random
import socket
import struct
import sys
import threading
import time

import grpc

JOB = 987654
WORKER = "w-987654"
TIMEOUT = 2.0
# (ca, key, cert) PEM bytes for mutual TLS (--tls_dir); None = plain text.
TLS = None


def channel(address, options=()):
    if TLS is None:
        return grpc.insecure_channel(address, options=list(options))
    ca, key, cert = TLS
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(ca, key, cert),
                               options=list(options))


def varint(n):
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def fv(field, value):  # varint field
    return varint(field << 3) + varint(value)


def fb(field, data):  # length-delimited field
    if isinstance(data, str):
        data = data.encode()
    return varint((field << 3) | 2) + varint(len(data)) + data


def malformed(rng):
    """Byte strings that are no valid message of any type."""
    return [
        b"\x00" + rng.randbytes(rng.randrange(0, 64)),       # field number 0
        b"\x0a\xff\xff\x03" + rng.randbytes(10),             # length past the end
        b"\x08" + b"\xff" * 11,                              # varint too long
        b"\x07" + rng.randbytes(rng.randrange(0, 64)),       # wire type 7
    ]


# Well-formed requests that name another job / worker / step, or absurd
# sizes: each must be refused (never OK).
def coordinator_semantic():
    spec_bad = fb(2, "mlp:8") + fv(5, 0)  # num_workers 0
    return {
        "RegisterWorker": [b""],  # no address
        "Heartbeat": [fb(1, WORKER) + fv(2, JOB) + fv(3, 5)],
        "ReportStep": [fb(1, WORKER) + fv(2, JOB) + fv(3, 0) + fv(4, 5)],
        "ReportEval": [fb(1, WORKER) + fv(2, JOB) + fv(3, 0) + fv(4, 5)],
        "ReportDone": [fb(1, WORKER) + fv(2, JOB) + fv(3, 0) + fv(4, 1)],
        "DeregisterWorker": [fb(1, WORKER)],
        "SubmitJob": [fb(1, spec_bad)],
        "GetJob": [fv(1, JOB)],
        "CancelJob": [fv(1, JOB)],
        "GetSyncHistory": [fv(1, JOB)],
        "WatchJob": [fv(1, JOB)],
        "GetWeights": [fv(1, JOB)],
        "UploadWeights": [fb(1, WORKER) + fv(2, JOB) + fv(3, 0) + fv(4, 4) + fb(5, b"\0" * 16)],
    }


def ps_semantic():
    push = lambda **k: (fv(1, k.get("job", JOB)) + fv(2, k.get("step", 3)) + fv(3, 0) +
                        fv(4, k.get("rank", 0)) + fv(5, k.get("k", 2)) + fv(6, 1) +
                        fb(7, b"\0" * k.get("bytes", 40)) + fv(8, k.get("len", 10)))
    pull = lambda **k: (fv(1, k.get("job", JOB)) + fv(2, 3) + fv(3, 0) + fv(4, 0) +
                        fv(5, k.get("k", 2)) + fv(6, k.get("len", 10)) + fv(7, 1000))
    return {
        "Push": [push(len=-1), push(k=0), push(bytes=36), push(len=1 << 40, bytes=0),
                 push(rank=5), push(k=1 << 30)],
        "Pull": [pull(len=1 << 40), pull(k=0), pull(len=-3)],
    }


# Answered OK by design, changing nothing (the test checks the workers and
# jobs are unchanged): a heartbeat from an unknown worker is told to
# re-register; deregistering an unknown worker is a no-op.
HARMLESS_OK = {"Heartbeat", "DeregisterWorker"}


def peer_message(group, from_rank=0, data=b"x" * 8, seq=0):
    return (fv(1, group) + fv(2, 5) + fv(5, from_rank) + fb(6, data) + fv(7, group) +
            fv(8, seq) + fv(9, 1))


METHODS = {
    "coordinator": {
        "/lockstep.v1.Coordinator/" + m: kind for m, kind in [
            ("RegisterWorker", "uu"), ("Heartbeat", "uu"), ("ReportStep", "uu"),
            ("ReportEval", "uu"), ("ReportDone", "uu"), ("UploadWeights", "su"),
            ("DeregisterWorker", "uu"), ("SubmitJob", "uu"), ("GetJob", "uu"),
            ("ListJobs", "uu"), ("ListWorkers", "uu"), ("CancelJob", "uu"),
            ("GetSyncHistory", "uu"), ("WatchJob", "us"), ("GetWeights", "us")]
    },
    "ps": {"/lockstep.v1.ParameterServer/" + m: "uu" for m in ["Push", "Pull", "DataAddress"]},
    "worker": {"/lockstep.v1.PeerService/Stream": "su",
               "/lockstep.v1.ReplicaState/FetchState": "us"},
}
METHODS["coordinator"].update(METHODS["ps"])
for kind in METHODS.values():
    kind["/grpc.health.v1.Health/Check"] = "uu"


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.obeyed = []

    def add(self, target, outcome):
        with self.lock:
            t = self.counts.setdefault(target, {})
            t[outcome] = t.get(outcome, 0) + 1

    def must_refuse(self, target, what, code):
        if code == "OK":
            with self.lock:
                self.obeyed.append(f"{target}: {what} returned OK")


def call(ch, method, kind, payloads, timeout=TIMEOUT):
    ident = lambda b: b
    try:
        if kind == "uu":
            ch.unary_unary(method, request_serializer=ident, response_deserializer=ident)(
                payloads[0], timeout=timeout)
        elif kind == "su":
            ch.stream_unary(method, request_serializer=ident, response_deserializer=ident)(
                iter(payloads), timeout=timeout)
        else:
            for _ in ch.unary_stream(method, request_serializer=ident,
                                     response_deserializer=ident)(payloads[0], timeout=timeout):
                pass
        return "OK"
    except grpc.RpcError as e:
        return e.code().name


def flood_grpc(kind, address, rounds, rng, tally):
    target = f"{kind}@{address}"
    opts = [("grpc.max_send_message_length", 64 << 20),
            ("grpc.max_receive_message_length", 64 << 20)]
    ch = channel(address, opts)
    semantic = {}
    if kind == "coordinator":
        semantic = {"/lockstep.v1.Coordinator/" + m: v for m, v in coordinator_semantic().items()}
    if kind in ("coordinator", "ps"):
        semantic.update({"/lockstep.v1.ParameterServer/" + m: v for m, v in ps_semantic().items()})
    if kind == "worker":
        semantic = {
            "/lockstep.v1.PeerService/Stream": [
                peer_message(JOB), peer_message(JOB + 1, from_rank=-1),
                peer_message(JOB + 2, from_rank=1 << 20)],
            "/lockstep.v1.ReplicaState/FetchState": [fv(1, JOB) + fv(2, 5) + fb(3, "flood")],
        }
    for _ in range(rounds):
        for method, mkind in METHODS[kind].items():
            for bad in malformed(rng):
                code = call(ch, method, mkind, [bad])
                tally.add(target, code)
                # Health and the two lists are reads: parsing garbage is their
                # only refusal. Everything else must not be OK.
                tally.must_refuse(target, f"{method} with malformed bytes {bad[:8]!r}", code)
            for req in semantic.get(method, []):
                # A peer stream for a group not attached is parked until the
                # caller gives up: 0.3 s.
                code = call(ch, method, mkind, [req],
                            0.3 if "PeerService" in method else TIMEOUT)
                short = method.rsplit("/", 1)[1]
                if short in HARMLESS_OK and code == "OK":
                    tally.add(target, "OK-no-effect")
                    continue
                tally.add(target, code)
                tally.must_refuse(target, f"{method} naming another job/worker/size", code)
    # Oversized messages, twice per target.
    big = {"coordinator": ("/lockstep.v1.Coordinator/SubmitJob", "uu",
                           fb(1, fb(1, "x" * (17 << 20)) + fb(2, "mlp:8"))),
           "worker": ("/lockstep.v1.PeerService/Stream", "su",
                      peer_message(JOB, data=rng.randbytes(1024) * (20 << 10))),
           "ps": ("/lockstep.v1.ParameterServer/Push", "uu",
                  fv(1, JOB) + fv(5, 2) + fb(7, b"\0" * (20 << 20)) + fv(8, 1 << 20))}[kind]
    for _ in range(2):
        code = call(ch, big[0], big[1], [big[2]])
        tally.add(target, "oversized:" + code)
        tally.must_refuse(target, f"oversized {big[0]}", code)
    ch.close()


def tcp_one(host, port, send, read_challenge=False, hold=0.0):
    s = socket.create_connection((host, port), timeout=2.0)
    try:
        s.settimeout(0.1 if read_challenge else 2.0)
        if read_challenge:
            try:
                s.recv(40)
            except socket.timeout:
                pass
        s.settimeout(2.0)
        if send:
            s.sendall(send)
        if hold:
            time.sleep(hold)
        try:
            s.settimeout(0.2)
            data = s.recv(4096)
            return "closed" if not data else "answered"
        except socket.timeout:
            return "timeout"
        except ConnectionResetError:
            return "reset"
    finally:
        s.close()


def flood_tcp(label, address, rounds, rng, tally, data_plane):
    host, port = address.rsplit(":", 1)
    port = int(port)
    target = f"{label}@{address}"
    for _ in range(rounds):
        cases = [(rng.randbytes(rng.randrange(1, 4096)), False, 0.0),
                 (b"PRI * HTTP/2.0\r\n", False, 0.0),
                 (b"", False, 0.2)]
        if data_plane:
            # Ring hello version 3: fields, connector nonce, a random mac.
            hello = (struct.pack("<IIQIIIIQ", 0x48534B4C, 3, JOB, 0, 1, 2, 0, 0) +
                     rng.randbytes(64))
            ps_hello = (struct.pack("<IIQIIIIQ", 0x48504B4C, 3, JOB, 0, 0, 2, 10, 0) +
                        rng.randbytes(64))
            frame = struct.pack("<IIQqiiq", 0x46534B4C, 0, JOB, 5, 0, 0, 1 << 40)
            cases += [(hello[:10], True, 0.0), (hello, True, 0.0), (ps_hello, True, 0.0),
                      (frame, True, 0.0), (rng.randbytes(1 << 20), True, 0.0),
                      (hello + frame + rng.randbytes(64), True, 0.0)]
        for send, challenge, hold in cases:
            try:
                outcome = tcp_one(host, port, send, challenge, hold)
            except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError) as e:
                outcome = type(e).__name__
            except socket.timeout:
                outcome = "timeout"
            tally.add(target, outcome)


def data_port(address):
    ch = channel(address)
    try:
        reply = ch.unary_unary("/lockstep.v1.ParameterServer/DataAddress",
                               request_serializer=lambda b: b,
                               response_deserializer=lambda b: b)(b"", timeout=TIMEOUT)
    finally:
        ch.close()
    # DataAddressReply: port = field 1 (varint).
    port, i, shift = 0, 1, 0
    if not reply or reply[0] != 0x08:
        return 0
    while True:
        b = reply[i]
        port |= (b & 0x7F) << shift
        shift += 7
        i += 1
        if not b & 0x80:
            return port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", required=True)
    ap.add_argument("--until", default="")
    ap.add_argument("--progress", default="")
    ap.add_argument("--tls_dir", default="")
    ap.add_argument("--tls_role", default="worker")
    ap.add_argument("targets", nargs="+")
    args = ap.parse_args()
    if args.tls_dir:
        global TLS
        read = lambda name: open(os.path.join(args.tls_dir, name), "rb").read()
        TLS = (read("ca.pem"), read(args.tls_role + ".key"), read(args.tls_role + ".pem"))
    tally = Tally()
    threads = []
    done = []  # rounds completed per flooding thread
    progress_lock = threading.Lock()
    for i, t in enumerate(args.targets):
        kind, address = t.split("@", 1)
        rng = random.Random(args.seed * 1000 + i)
        jobs = []
        if kind == "tcp":
            jobs.append((flood_tcp, ("tcp", address, args.rounds, rng, tally, True)))
        else:
            jobs.append((flood_grpc, (kind, address, args.rounds, rng, tally)))
            jobs.append((flood_tcp, (f"{kind}-tcp", address, args.rounds,
                                     random.Random(args.seed * 1000 + i + 500), tally, False)))
            if kind in ("coordinator", "ps"):
                p = data_port(address)
                if p:
                    host = address.rsplit(":", 1)[0]
                    jobs.append((flood_tcp, (f"{kind}-data", f"{host}:{p}", args.rounds,
                                             random.Random(args.seed * 1000 + i + 700), tally,
                                             True)))
        for fn, a in jobs:
            def timed(fn=fn, a=a, slot=len(done)):
                t0 = time.monotonic()
                if not args.until:
                    fn(*a)
                else:  # one round at a time until the stop file appears
                    a = list(a)
                    a[2] = 1
                    while done[slot] < args.rounds and not os.path.exists(args.until):
                        fn(*a)
                        with progress_lock:
                            done[slot] += 1
                            if args.progress:
                                with open(args.progress + ".tmp", "w") as f:
                                    f.write(str(min(done)))
                                os.replace(args.progress + ".tmp", args.progress)
                        time.sleep(0.5)  # a bounded flood, not a denial of service
                tally.add(f"{a[0]}@{a[1]}", f"seconds={time.monotonic() - t0:.1f}")
            done.append(0)
            th = threading.Thread(target=timed, daemon=True)
            th.start()
            threads.append(th)
    for th in threads:
        th.join()
    with open(args.out, "w") as f:
        json.dump(tally.counts, f, indent=1, sort_keys=True)
    for target, counts in sorted(tally.counts.items()):
        print(f"flood {target}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if tally.obeyed:
        print("FLOOD OBEYED:\n  " + "\n  ".join(tally.obeyed[:20]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
