"""Calls one gRPC method per case and checks the status code it ends with.

  python3 tls_probe.py CASE...
  CASE = ADDRESS|METHOD|KIND|CREDS|TOKEN|EXPECTED
    KIND      unary, stream_unary or unary_stream
    CREDS     "-" (plain text) or DIR/ROLE (DIR/ca.pem, DIR/ROLE.pem,
              DIR/ROLE.key: mutual TLS with that certificate; the server is
              verified against DIR's CA)
    TOKEN     "-" (none) or the bearer token sent as authorization metadata
    EXPECTED  a grpc.StatusCode name (OK, UNAVAILABLE, PERMISSION_DENIED, ...)

The request is an empty message (raw bytes): the refusals under test happen
before any handler parses it. Prints one line per case; exits 1 when a case
ends with another code.
"""
import sys

import grpc


def channel(address, creds):
    if creds == "-":
        return grpc.insecure_channel(address)
    d, role = creds.rsplit("/", 1)
    read = lambda p: open(p, "rb").read()
    c = grpc.ssl_channel_credentials(
        root_certificates=read(f"{d}/ca.pem"),
        private_key=read(f"{d}/{role}.key"),
        certificate_chain=read(f"{d}/{role}.pem"))
    return grpc.secure_channel(address, c)


def call(ch, method, kind, metadata):
    ident = lambda b: b
    if kind == "unary":
        ch.unary_unary(method, request_serializer=ident, response_deserializer=ident)(
            b"", timeout=5, metadata=metadata)
    elif kind == "stream_unary":
        ch.stream_unary(method, request_serializer=ident, response_deserializer=ident)(
            iter([b""]), timeout=5, metadata=metadata)
    elif kind == "unary_stream":
        for _ in ch.unary_stream(method, request_serializer=ident,
                                 response_deserializer=ident)(b"", timeout=5, metadata=metadata):
            pass
    else:
        raise SystemExit(f"tls_probe: unknown kind {kind!r}")


def main():
    bad = 0
    for case in sys.argv[1:]:
        address, method, kind, creds, token, expected = case.split("|")
        metadata = [] if token == "-" else [("authorization", f"Bearer {token}")]
        ch = channel(address, creds)
        try:
            call(ch, method, kind, metadata)
            code, detail = "OK", ""
        except grpc.RpcError as e:
            code, detail = e.code().name, e.details()
        finally:
            ch.close()
        ok = code == expected
        bad += not ok
        who = "no certificate" if creds == "-" else "/".join(creds.split("/")[-2:])
        print(f"{'ok  ' if ok else 'FAIL'} {method} at {address} as {who}, "
              f"token={'yes' if token != '-' else 'no'}: "
              f"{code} (expected {expected}) {detail}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
