"""A stranger at lockstep's raw-TCP data planes (issue 11).

  python3 data_plane_stranger.py --group=G KIND@HOST:PORT...
  KIND = peer (a worker's data port: the TCP ring's hub) or ps (a ps
  server's TCP data plane).

Knows everything about the job but its data-plane secret: the group key G
(the job's wire key), the ranks and the shard's shape. Per target it tries,
each on a fresh connection, after reading the acceptor's 40-byte challenge
(a replayed hello is covered by the unit tests, which can record a real
one):
  forged    a hello naming group G (peer: rank 0 -> rank 1 of 2; ps: job G,
            shard 0, K = 2) with a random mac, then frames for step 5 of G;
  v1        a version-1 hello (the challenge not answered, no mac), then frames;
  cut       the first 40 bytes of a hello, then end of stream.
Each must end with the acceptor closing the connection (peer) or answering
a hello reply with a non-zero code and closing (ps): never reading a frame.
Prints one line per attempt; exits 1 if one was not refused.
"""
import argparse
import os
import socket
import struct
import sys

TIMEOUT = 10.0


def challenge(s, magic, want_version):
    buf = b""
    while len(buf) < 40:
        got = s.recv(40 - len(buf))
        if not got:
            raise RuntimeError("closed before the challenge")
        buf += got
    m, version = struct.unpack("<II", buf[:8])
    if m != magic or version != want_version:
        raise RuntimeError(f"unexpected challenge magic 0x{m:08x} version {version}")
    return buf[8:]


def refused(s, ps):
    """True when the acceptor ends the connection without taking frames."""
    s.settimeout(TIMEOUT)
    data = b""
    try:
        while True:
            got = s.recv(65536)
            if not got:
                break
            data += got
    except ConnectionResetError:
        pass
    except socket.timeout:
        return False, "still open after %.0f s" % TIMEOUT
    if ps:
        if len(data) < 48:
            return True, "closed (%d bytes)" % len(data)
        magic, code, n = struct.unpack("<IiQ", data[:16])
        text = data[48:48 + n].decode(errors="replace")
        return magic == 0x52504B4C and code != 0, f"hello reply code {code}: {text}"
    return len(data) == 0, "closed"


def attempt(kind, host, port, group, how):
    ps = kind == "ps"
    s = socket.create_connection((host, port), timeout=TIMEOUT)
    me = "%s:%d" % s.getsockname()[:2]  # printed: the logs must name this port
    try:
        if ps:
            # ps hello version 3: the fields, then the client's nonce.
            fields = struct.pack("<IIQiiqQ", 0x48504B4C, 3, group, 0, 2, 10, 0) + os.urandom(32)
            frame = struct.pack("<IIQqiiqqq", 0x46504B4C, 3, group, 5, 0, 0, 1, 40, 0) + b"\0" * 40
        else:
            # Ring hello version 3: the fields, then the connector's nonce.
            fields = (struct.pack("<IIQIIIIQ", 0x48534B4C, 3, group, 0, 1, 2, 0, 0) +
                      os.urandom(32))
            frame = struct.pack("<IIQqiiq", 0x46534B4C, 0, group, 5, 0, 0, 16) + b"\x7f" * 16
        # The nonce is no use without the secret (version 3 on both planes).
        challenge(s, 0x43504B4C if ps else 0x43534B4C, 3)
        if how == "v1":
            old = bytearray(fields)
            old[4:8] = struct.pack("<I", 1)
            s.sendall(bytes(old) + frame * 4)
        else:
            if how == "forged":
                s.sendall(fields + os.urandom(32) + frame * 4)
            elif how == "cut":
                s.sendall(fields[:40])
                s.shutdown(socket.SHUT_WR)
        ok, what = refused(s, ps)
        return ok, what, me
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--group", type=int, required=True)
    ap.add_argument("targets", nargs="+")
    a = ap.parse_args()
    bad = 0
    for t in a.targets:
        kind, addr = t.split("@", 1)
        host, port = addr.rsplit(":", 1)
        for how in ("forged", "v1", "cut"):
            ok, what, me = attempt(kind, host, int(port), a.group, how)
            print(f"{t} {how} from {me}: {'refused' if ok else 'NOT REFUSED'} ({what})")
            bad += 0 if ok else 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
