"""lockstep.Client checks that the server it reaches is the coordinator.

    tls_role_test.py CERTS_SH

Certificates come from deploy/certs.sh. A Python gRPC server serves the
Coordinator service with no handlers (every call UNIMPLEMENTED: the call got
through the handshake) over mutual TLS with one certificate at a time:

  * the coordinator's: accepted, also at 127.0.0.2, which the certificate
    does not name (the client checks the role, not the host it dials);
  * a worker's and a ps server's (a stolen key posing as the coordinator),
    and the coordinator's of another CA: the handshake fails (UNAVAILABLE);
  * one from the cluster's CA that carries the coordinator's DNS name but
    the role URI SAN lockstep://role/worker (as another tool might issue
    it): the grpc handshake would pass on the DNS name, the client's own
    role check refuses it (UNAUTHENTICATED), as the C++ channels do.
"""
import os
import subprocess
import sys
import tempfile
from concurrent import futures

import grpc

import lockstep
from lockstep._stubs import coordinator_pb2_grpc


def read(path):
    with open(path, "rb") as f:
        return f.read()


def serve(pki, role):
    """A server presenting pki/role.pem that requires a client certificate
    from pki's CA; returns (server, port)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    coordinator_pb2_grpc.add_CoordinatorServicer_to_server(
        coordinator_pb2_grpc.CoordinatorServicer(), server)
    creds = grpc.ssl_server_credentials([(read(f"{pki}/{role}.key"), read(f"{pki}/{role}.pem"))],
                                        root_certificates=read(f"{pki}/ca.pem"),
                                        require_client_auth=True)
    port = server.add_secure_port("0.0.0.0:0", creds)
    assert port > 0, "no port"
    server.start()
    return server, port


def issue_mismatched(pki, name):
    """pki/name.{pem,key}: the coordinator's DNS role name, a worker's role URI."""
    key, csr, ext, pem = (f"{pki}/{name}.key", f"{pki}/{name}.csr", f"{pki}/{name}.ext",
                          f"{pki}/{name}.pem")
    run = lambda *a: subprocess.run(list(a), check=True, stderr=subprocess.DEVNULL)
    run("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key)
    run("openssl", "req", "-new", "-key", key, "-subj", "/O=lockstep/CN=mismatched", "-out", csr)
    with open(ext, "w") as f:
        f.write("subjectAltName=URI:lockstep://role/worker,DNS:coordinator.role.lockstep.invalid,"
                "IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    run("openssl", "x509", "-req", "-in", csr, "-CA", f"{pki}/ca.pem", "-CAkey", f"{pki}/ca.key",
        "-CAcreateserial", "-days", "2", "-sha256", "-extfile", ext, "-out", pem)


def code_of(pki, host, port):
    c = lockstep.Client(f"{host}:{port}", timeout=5, tls_ca=f"{pki}/ca.pem",
                        tls_cert=f"{pki}/client.pem", tls_key=f"{pki}/client.key")
    try:
        c.jobs()
        return grpc.StatusCode.OK, ""
    except lockstep.LockstepError as e:
        return e.code, e.message
    finally:
        c.close()


def main():
    certs_sh = sys.argv[1]
    tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    pki, other = f"{tmp}/pki", f"{tmp}/other"
    for d in (pki, other):
        subprocess.run(["bash", certs_sh, f"--out={d}"], check=True, stderr=subprocess.DEVNULL)
    failures = []

    def expect(what, server_pki, role, host, want):
        server, port = serve(server_pki, role)
        try:
            got, message = code_of(pki, host, port)
        finally:
            server.stop(None)
        ok = got == want
        print(f"{'ok  ' if ok else 'FAIL'} {what}: {got.name} (expected {want.name}) {message[:160]}")
        if not ok:
            failures.append(what)

    expect("coordinator at 127.0.0.1", pki, "coordinator", "127.0.0.1",
           grpc.StatusCode.UNIMPLEMENTED)
    expect("coordinator at 127.0.0.2 (not named)", pki, "coordinator", "127.0.0.2",
           grpc.StatusCode.UNIMPLEMENTED)
    expect("worker posing as coordinator", pki, "worker", "127.0.0.1",
           grpc.StatusCode.UNAVAILABLE)
    expect("ps server posing as coordinator", pki, "server", "127.0.0.1",
           grpc.StatusCode.UNAVAILABLE)
    expect("another CA's coordinator", other, "coordinator", "127.0.0.1",
           grpc.StatusCode.UNAVAILABLE)
    issue_mismatched(pki, "mismatched")
    expect("coordinator's DNS name, worker's role URI", pki, "mismatched", "127.0.0.1",
           grpc.StatusCode.UNAUTHENTICATED)
    if failures:
        print(f"FAIL: {len(failures)} case(s): {', '.join(failures)}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
