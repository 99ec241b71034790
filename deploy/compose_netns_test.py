#!/usr/bin/env python3
"""deploy/docker-compose.yml's topology on separate "hosts": one network
namespace per container, each with its own 10.x address on a bridge.

  compose_netns_test.py COMPOSE_FILE COORDINATOR WORKER PS_SERVER CLI CERTS_SH

Every service runs with the command, environment and health check that the
compose file gives it, read from the file (YAML, ${VAR:-default}
interpolated as compose does, with the LOCKSTEP_* variables of the
environment, none under Bazel), so the file cannot drift from what is
tested. The image's binaries (/usr/local/bin/NAME, called by NAME) map to the
Bazel-built ones; each named volume is a directory of the test, and a
container path a volume is mounted at is replaced by that directory in the
service's command. Compose service names resolve the way Docker's embedded
DNS resolves them: `ip netns exec` bind-mounts /etc/netns/NS/hosts over
/etc/hosts, and that file maps every service name to its address. All
namespaces share one host name (no UTS namespace), as cloned VMs may: the
daemons must not rely on it. Nothing passes --advertise: the compose file
gives none (deploy_lint_test checks that).

Mutual TLS as the file deploys it: CERTS_SH (deploy/certs.sh) makes a CA,
certificates and a token (default --hosts only: the channels check the
server's role, not its name, so workers dialed at namespace addresses no
certificate names must work); LOCKSTEP_PKI_DIR points the file's secrets at
them; each instance's secrets (the service's `secrets:`, by target name)
are copied to its own folder, which replaces /run/secrets in its command
and health check. The client namespace's CLI uses the client certificate
and the token; a plain-text (--insecure) CLI must be refused.

Brings up the coordinator, both ps shards and three workers
(`--scale worker=3`) in depends_on order without waiting in between, as
compose does, checks that each health check fails before its service starts
and passes after, then from a client namespace trains short jobs to the end
over ring/tcp, ring/grpc and ps (--ps_shards=2, on the ps services), and
checks that `lockstep sync` reports every step in sync, that every worker is
registered at its own namespace's address, that ring/tcp and ring/grpc end
with the same weights hash, that every daemon's /metrics answers from
another namespace (both ps shards counting the ps job's pushes), and that
every daemon exits 0 on SIGTERM within its stop_grace_period.

Needs root (namespaces, a bridge, /etc/netns). Without it: prints SKIPPED
loudly and exits 0. Cleans up namespaces, bridge, veths, /etc/netns entries
and processes on exit, also on SIGTERM (Bazel's timeout).
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import yaml

SCALE = {"worker": 3}
TAG = f"{os.getpid() % 100000}"
SUBNET = f"10.231.{os.getpid() % 250 + 1}"  # 10.231.N.0/24, N from the PID
BRIDGE = f"lsbr{TAG}"
STEPS = 30


class Failure(Exception):
    pass


def log(msg):
    print(msg, flush=True)


def run(cmd, check=True, timeout=30, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise Failure(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
    return p


# --- compose file ----------------------------------------------------------

_VAR = re.compile(r"\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def interpolate(value, env):
    """Compose's variable substitution on one string: $$, $VAR, ${VAR},
    ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3)
        val = env.get(name)
        if op == ":-":
            return val if val else arg
        if op == "-":
            return val if val is not None else arg
        if op in (":?", "?") and (val is None or (op == ":?" and not val)):
            raise Failure(f"compose file: required variable {name}: {arg}")
        return val or ""
    return _VAR.sub(sub, value)


def interpolate_tree(node, env):
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [interpolate_tree(v, env) for v in node]
    if isinstance(node, dict):
        return {k: interpolate_tree(v, env) for k, v in node.items()}
    return node


def load_compose(path, extra_env=None):
    env = {k: v for k, v in os.environ.items() if k.startswith("LOCKSTEP_")}
    env.update(extra_env or {})
    with open(path, encoding="utf-8") as f:
        doc = interpolate_tree(yaml.safe_load(f), env)
    return doc


def start_order(services):
    """Services in depends_on order (compose starts dependencies first)."""
    order, seen = [], set()

    def visit(name, stack=()):
        if name in seen:
            return
        if name in stack:
            raise Failure(f"compose file: depends_on cycle through {name}")
        deps = services[name].get("depends_on") or []
        for d in (deps if isinstance(deps, list) else list(deps)):
            visit(d, stack + (name,))
        seen.add(name)
        order.append(name)
    for n in services:
        visit(n)
    return order


# --- the test --------------------------------------------------------------

class Cluster:
    def __init__(self, compose_path, binaries, tmp, pki):
        self.compose_dir = os.path.dirname(os.path.abspath(compose_path))
        self.pki = pki
        self.doc = load_compose(compose_path, {"LOCKSTEP_PKI_DIR": pki})
        self.binaries = binaries  # image binary name -> built binary
        self.tmp = tmp
        self.namespaces = []  # (ns, veth host side)
        self.procs = []  # (instance, Popen, log path)
        self.addr = {}  # instance -> IP
        self.netns_dirs = []

    # Instances as `docker compose up --scale worker=3` makes them.
    def instances(self):
        out = []
        for name in start_order(self.doc["services"]):
            n = SCALE.get(name, 1)
            for i in range(1, n + 1):
                out.append((name, name if n == 1 else f"{name}-{i}"))
        return out

    def ns(self, instance):
        return f"ls{TAG}-{instance}"

    def setup_network(self):
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        self.bridge_made = True
        run(["ip", "link", "set", BRIDGE, "up"])
        hosts = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        names = [("client", "client")] + self.instances()
        for idx, (service, instance) in enumerate(names):
            self.addr[instance] = f"{SUBNET}.{10 + idx}"
        # Docker's DNS: the service name resolves to its containers (the
        # first one listed here for a scaled service), each container also
        # answers to its own instance name.
        by_service = {}
        for service, instance in names:
            by_service.setdefault(service, instance)
        for service, instance in by_service.items():
            hosts.append(f"{self.addr[instance]} {service}")
        for service, instance in names:
            if instance != service:
                hosts.append(f"{self.addr[instance]} {instance}")
        for idx, (service, instance) in enumerate(names):
            ns = self.ns(instance)
            veth = f"lsv{TAG}x{idx}"
            run(["ip", "netns", "add", ns])
            self.namespaces.append((ns, veth))
            run(["ip", "link", "add", veth, "type", "veth", "peer", "name", f"lsp{TAG}x{idx}"])
            run(["ip", "link", "set", veth, "master", BRIDGE, "up"])
            run(["ip", "link", "set", f"lsp{TAG}x{idx}", "netns", ns])
            run(["ip", "-n", ns, "link", "set", f"lsp{TAG}x{idx}", "name", "eth0"])
            run(["ip", "-n", ns, "addr", "add", f"{self.addr[instance]}/24", "dev", "eth0"])
            run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            d = f"/etc/netns/{ns}"
            os.makedirs(d, exist_ok=True)
            self.netns_dirs.append(d)
            with open(f"{d}/hosts", "w") as f:
                f.write("\n".join(hosts) + "\n")
        log(f"network: bridge {BRIDGE}, {SUBNET}.0/24: " +
            ", ".join(f"{i}={a}" for i, a in self.addr.items()))

    def map_command(self, argv, volumes):
        """The image's binary -> the built one; volume mount points -> dirs."""
        argv = [str(a) for a in argv]
        name = os.path.basename(argv[0])
        if name not in self.binaries:
            raise Failure(f"compose command {argv[0]!r}: no such binary in the image "
                          f"(known: {', '.join(sorted(self.binaries))})")
        out = [self.binaries[name]]
        for a in argv[1:]:
            for target, d in volumes.items():
                a = re.sub(rf"(?<=[=:,]){re.escape(target)}(?=$|/)", d, a)
            out.append(a)
        return out

    def volumes_of(self, service, instance):
        svc = self.doc["services"][service]
        out = {}
        for v in svc.get("volumes") or []:
            parts = v.split(":") if isinstance(v, str) else [v["source"], v["target"]]
            src, target = parts[0], parts[1]
            if src not in (self.doc.get("volumes") or {}):
                raise Failure(f"service {service}: volume {v!r} is not a named volume")
            d = os.path.join(self.tmp, "volumes", src)
            os.makedirs(d, exist_ok=True)
            out[target] = d
        return out

    def secrets_of(self, service, instance):
        """{"/run/secrets": a folder holding this instance's secrets, each
        under its target name, copied from the top-level secret's file}."""
        svc = self.doc["services"][service]
        d = os.path.join(self.tmp, "secrets", instance)
        os.makedirs(d, exist_ok=True)
        for sec in svc.get("secrets") or []:
            source = sec["source"] if isinstance(sec, dict) else sec
            target = (sec.get("target") if isinstance(sec, dict) else None) or source
            top = (self.doc.get("secrets") or {}).get(source) or {}
            if "file" not in top:
                raise Failure(f"service {service}: secret {source!r} has no top-level file:")
            src = os.path.join(self.compose_dir, top["file"])
            if not os.path.isfile(src):
                raise Failure(f"service {service}: secret {source!r}: no file {src}")
            shutil.copyfile(src, os.path.join(d, target))
            os.chmod(os.path.join(d, target), 0o400)
        return {"/run/secrets": d}

    def start(self, service, instance):
        svc = self.doc["services"][service]
        command = svc.get("entrypoint") or []
        command = (command if isinstance(command, list) else command.split()) + \
            (svc["command"] if isinstance(svc["command"], list) else svc["command"].split())
        volumes = self.volumes_of(service, instance)
        volumes.update(self.secrets_of(service, instance))
        argv = self.map_command(command, volumes)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        # The machine's OpenBLAS settings and the sanitizer options of an
        # ASan or TSan run pass through (not part of the compose file).
        for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "ASAN_OPTIONS", "UBSAN_OPTIONS",
                  "TSAN_OPTIONS"):
            if k in os.environ:
                env[k] = os.environ[k]
        e = svc.get("environment") or {}
        if isinstance(e, list):
            e = dict(x.split("=", 1) for x in e)
        env.update({k: str(v) for k, v in e.items()})
        workdir = os.path.join(self.tmp, "work", instance)
        os.makedirs(workdir, exist_ok=True)
        logpath = os.path.join(self.tmp, f"{instance}.log")
        lf = open(logpath, "w")
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(instance)] + argv, stdout=lf,
                             stderr=subprocess.STDOUT, env=env, cwd=workdir)
        lf.close()
        self.procs.append((instance, p, logpath))
        log(f"started {instance} in {self.ns(instance)} ({self.addr[instance]}): "
            f"{os.path.basename(argv[0])} {' '.join(argv[1:])}")

    def health_command(self, service, instance):
        hc = self.doc["services"][service].get("healthcheck") or {}
        test = hc.get("test")
        if not isinstance(test, list) or not test or test[0] != "CMD":
            raise Failure(f"service {service}: health check {test!r}: expected [CMD, ...]")
        return self.map_command(test[1:], self.secrets_of(service, instance))

    def wait_healthy(self, service, instance, deadline_s=30):
        cmd = ["ip", "netns", "exec", self.ns(instance)] + self.health_command(service, instance)
        t0 = time.monotonic()
        last = ""
        while time.monotonic() - t0 < deadline_s:
            for inst, p, _ in self.procs:
                if inst == instance and p.poll() is not None:
                    raise Failure(f"{instance} exited with {p.returncode} before it was healthy")
            r = run(cmd, check=False, timeout=10)
            if r.returncode == 0:
                log(f"healthy: {instance} after {time.monotonic() - t0:.1f}s "
                    f"(lockstep {' '.join(cmd[5:])}; failed before start)")
                return
            last = (r.stdout + r.stderr).strip()
            time.sleep(0.2)
        raise Failure(f"{instance} not healthy after {deadline_s}s: "
                      f"{' '.join(cmd[4:])}: {last}")

    def client(self, *args, timeout=120, tls=True):
        """The CLI in the client namespace, with the client certificate and
        the token (tls=False: no TLS flags; pass --insecure in args)."""
        coord = self.doc["services"]["coordinator"]
        port = re.search(r"--listen=[^:]*:(\d+)", " ".join(map(str, coord["command"]))).group(1)
        p = self.pki
        creds = [f"--tls_cert={p}/client.pem", f"--tls_key={p}/client.key",
                 f"--tls_ca={p}/ca.pem", f"--token_file={p}/token"] if tls else []
        cmd = ["ip", "netns", "exec", self.ns("client"), self.binaries["lockstep"],
               f"--coordinator=coordinator:{port}"] + creds + list(args)
        return run(cmd, check=False, timeout=timeout)

    def stop_all(self):
        """`docker compose down`: SIGTERM to each container in reverse start
        order, SIGKILL after the service's stop_grace_period (compose's
        default 10 s). Returns [(instance, exit code or None if killed, s)]."""
        out = []
        for inst, p, _ in reversed(self.procs):
            service = next(s for s, i in self.instances() if i == inst)
            grace = self.doc["services"][service].get("stop_grace_period", "10s")
            m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", str(grace))
            grace_s = float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[m.group(2)] if m else 10
            t0 = time.monotonic()
            if p.poll() is None:
                p.terminate()
            try:
                rc = p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                rc = None
            out.append((inst, rc, time.monotonic() - t0))
        return out

    def metrics_port(self, service):
        m = re.search(r"--metrics_port=(\d+)", " ".join(map(str, self.doc["services"][service]["command"])))
        return int(m.group(1)) if m else None

    def scrape(self, instance, port, token=True, client_cert=True):
        """GET https://ADDR:PORT/metrics from the client namespace, as a
        Prometheus on another host would (the file runs every daemon with
        --http_tls): the chain verified against the pki's CA and the name
        against the instance's role, <role>.role.lockstep.invalid (what a
        scrape job's tls_config.server_name says: certificates name roles,
        not addresses), with the pki's http_token as a Bearer token unless
        token=False, presenting the pki's metrics certificate (every daemon
        runs with --http_client_certs) unless client_cert=False. Returns
        (status or None, body); an HTTP error status is returned as the
        status, a refused handshake as None."""
        role = ("coordinator" if instance == "coordinator" else
                "server" if instance.startswith("ps") else "worker")
        code = ("import http.client, socket, ssl, sys\n"
                "host, port, ca, token_file, name, cert, key = sys.argv[1:8]\n"
                "ctx = ssl.create_default_context(cafile=ca)\n"
                "if cert:\n"
                "    ctx.load_cert_chain(cert, key)\n"
                "sock = socket.create_connection((host, int(port)), timeout=5)\n"
                "c = http.client.HTTPSConnection(host, int(port), timeout=5, context=ctx)\n"
                "c.sock = ctx.wrap_socket(sock, server_hostname=name)\n"
                "headers = {}\n"
                "if token_file:\n"
                "    headers['Authorization'] = 'Bearer ' + open(token_file).read().strip()\n"
                "c.request('GET', '/metrics', headers=headers)\n"
                "r = c.getresponse()\n"
                "print(r.status); sys.stdout.write(r.read().decode())\n")
        token_file = os.path.join(self.pki, "http_token") if token else ""
        r = run(["ip", "netns", "exec", self.ns("client"), sys.executable, "-c", code,
                 self.addr[instance], str(port), os.path.join(self.pki, "ca.pem"), token_file,
                 f"{role}.role.lockstep.invalid",
                 os.path.join(self.pki, "metrics.pem") if client_cert else "",
                 os.path.join(self.pki, "metrics.key") if client_cert else ""],
                check=False, timeout=15)
        if r.returncode != 0:
            return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        status, _, body = r.stdout.partition("\n")
        return int(status), body

    def cleanup(self):
        for _, p, _ in self.procs:
            if p.poll() is None:
                p.terminate()
        for _, p, _ in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for ns, veth in self.namespaces:
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
        for d in self.netns_dirs:
            shutil.rmtree(d, ignore_errors=True)

    def dump_logs(self):
        for inst, p, path in self.procs:
            state = "running" if p.poll() is None else f"exit {p.returncode}"
            log(f"== {inst} ({state}) {path}")
            with open(path, errors="replace") as f:
                for line in f.readlines()[-12:]:
                    log("   " + line.rstrip())


def write_dataset(d):
    """3 separable classes in 3 features, CSV with the label first."""
    r = random.Random(7)
    for name, n in (("train.csv", 300), ("test.csv", 90)):
        with open(os.path.join(d, name), "w") as f:
            for _ in range(n):
                c = r.randrange(3)
                xs = [(2.0 if j == c else 0.0) + r.random() - 0.5 for j in range(3)]
                f.write(f"{c}," + ",".join(f"{x:.4f}" for x in xs) + "\n")


def can_make_namespaces():
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None:
        return "no ip(8) (iproute2)"
    probe = f"lsprobe{TAG}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def main(argv):
    if len(argv) != 7:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    compose, coord, worker, ps, cli, certs = (os.path.abspath(a) for a in argv[1:])
    why = can_make_namespaces()
    if why:
        bar = "*" * 72
        log(f"{bar}\nSKIPPED: compose_netns_test cannot create network namespaces ({why}).\n"
            f"Run it as root: bazel test //deploy:compose_netns_test\n{bar}")
        return 0
    binaries = {"lockstep-coordinator": coord, "lockstep-worker": worker,
                "lockstep-server": ps, "lockstep": cli}
    tmp = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
    tmp = tempfile.mkdtemp(prefix="netns.", dir=tmp)
    pki = os.path.join(tmp, "pki")
    r = run(["bash", certs, f"--out={pki}"], check=False)
    if r.returncode != 0:
        log(f"FAIL: {certs} --out={pki}: exit {r.returncode}: {r.stderr.strip()}")
        return 1
    cluster = Cluster(compose, binaries, tmp, pki)
    def on_term(*_):
        raise Failure("SIGTERM (test timeout?)")
    signal.signal(signal.SIGTERM, on_term)
    results = []  # (what, ok, detail)

    def check(what, ok, detail=""):
        results.append((what, bool(ok), detail))
        log(f"{'ok:  ' if ok else 'FAIL:'} {what}{': ' + detail if detail else ''}")
        return ok

    try:
        cluster.setup_network()
        # The workers' dataset volume (the compose file mounts it at /data,
        # their --data_dir) gets a small CSV dataset the jobs name relatively.
        vols = cluster.volumes_of("worker", "worker-1")
        if "/data" not in vols:
            raise Failure("service worker: no volume at /data (its --data_dir)")
        write_dataset(vols["/data"])
        for service, instance in cluster.instances():
            # The health check must fail while nothing serves (else it
            # proves nothing), then pass once the service is up.
            hc = ["ip", "netns", "exec", cluster.ns(instance)] + \
                cluster.health_command(service, instance)
            r = run(hc, check=False, timeout=10)
            if r.returncode == 0:
                raise Failure(f"{instance}: its health check passes before it is started")
            cluster.start(service, instance)
        # As `docker compose up`: dependencies are started first, not waited
        # for (short depends_on; Swarm ignores depends_on altogether), so a
        # worker may come up before the coordinator answers.
        for service, instance in cluster.instances():
            cluster.wait_healthy(service, instance)
        check("every service healthy by its compose health check", True)

        # Secure by default: no daemon was given --insecure, and the
        # coordinator refuses a plain-text client.
        insecure = [i for s, i in cluster.instances()
                    if "--insecure" in map(str, cluster.doc["services"][s]["command"])]
        check("no daemon runs with --insecure", not insecure, ", ".join(insecure))
        r = cluster.client("--insecure", "--timeout_s=3", "jobs", tls=False, timeout=30)
        check("a plain-text client is refused (mutual TLS)",
              r.returncode != 0 and "UNAVAILABLE" in r.stderr,
              f"exit {r.returncode}: {r.stderr.strip()[-200:]}")

        # Every worker registered at its own namespace's address.
        r = cluster.client("workers", "--json")
        workers = json.loads(r.stdout)["workers"] if r.returncode == 0 else []
        want = {cluster.addr[f"worker-{i}"] for i in range(1, SCALE["worker"] + 1)}
        got = {w.get("address", "").rsplit(":", 1)[0] for w in workers}
        check("3 workers registered at their namespaces' addresses", got == want,
              f"want {sorted(want)}, got " + ", ".join(
                  f"{w.get('address')} (data {w.get('data_address')})" for w in workers)
              if r.returncode == 0 else r.stderr.strip())

        job = ["--workers=3", "--model=mlp:16", "--dataset=csv:train.csv;test.csv",
               "--batch=30", f"--steps={STEPS}", "--lr=0.1", "--follow", "--json"]
        hashes = {}
        for name, extra in (("ring/tcp", ["--sync=ring", "--peer_transport=tcp"]),
                            ("ring/grpc", ["--sync=ring", "--peer_transport=grpc"]),
                            ("ps", ["--sync=ps", "--ps_shards=2"])):
            t0 = time.monotonic()
            r = cluster.client("submit", *extra, *job)
            try:
                d = json.loads(r.stdout)
            except json.JSONDecodeError:
                check(f"{name} job", False, f"exit {r.returncode}: {r.stdout.strip()} "
                      f"{r.stderr.strip()}")
                continue
            ok = check(f"{name} job SUCCEEDED", d.get("state") == "SUCCEEDED",
                       f"{d.get('state')} {d.get('reason', '')} in "
                       f"{time.monotonic() - t0:.1f}s, test accuracy {d.get('test_accuracy')}")
            if not ok:
                continue
            hashes[name] = d.get("final_hash")
            ranks = d.get("ranks", [])
            check(f"{name}: every rank at step {STEPS} and in sync",
                  len(ranks) == 3 and all(r_.get("in_sync") and int(r_.get("step", 0)) == STEPS
                                          for r_ in ranks),
                  "; ".join(f"{r_.get('address')} step {r_.get('step')} "
                            f"in_sync={r_.get('in_sync')}" for r_ in ranks))
            s = cluster.client("sync", str(d["job_id"]), "--json", "--max_entries=0")
            sy = json.loads(s.stdout) if s.returncode == 0 else {}
            check(f"{name}: lockstep sync: every step checked and in sync",
                  int(sy.get("checked_steps", -1)) == STEPS and
                  int(sy.get("mismatched_steps", -1)) == 0 and len(sy.get("checks", [])) == STEPS,
                  f"checked {sy.get('checked_steps')}, mismatched {sy.get('mismatched_steps')}, "
                  f"{len(sy.get('checks', []))} entries" if sy else s.stderr.strip())
        if "ring/tcp" in hashes and "ring/grpc" in hashes:
            check("ring/tcp and ring/grpc end with the same weights hash",
                  hashes["ring/tcp"] == hashes["ring/grpc"],
                  f"{hashes['ring/tcp']} vs {hashes['ring/grpc']}")
        # Metrics: every daemon's --metrics_port answers /metrics from
        # another host; both ps shards counted the ps job's pushes.
        for service, instance in cluster.instances():
            port = cluster.metrics_port(service)
            if port is None:
                check(f"{instance}: compose gives --metrics_port", False)
                continue
            status, body = cluster.scrape(instance, port)
            check(f"{instance}: GET https://{cluster.addr[instance]}:{port}/metrics (CA and role name verified)",
                  status == 200 and "# TYPE lockstep_" in body,
                  f"HTTP {status}, {body.count(chr(10))} lines" if status else body)
            if service == "coordinator":
                bare, _ = cluster.scrape(instance, port, token=False)
                check(f"{instance}: GET /metrics without the http_token is refused",
                      bare == 401, f"HTTP {bare}")
                nocert, why = cluster.scrape(instance, port, client_cert=False)
                check(f"{instance}: GET /metrics without a client certificate is refused "
                      "(--http_client_certs)", nocert is None, f"HTTP {nocert}" if nocert else why)
            if service.startswith("ps-") and status == 200:
                pushes = sum(float(line.split()[-1]) for line in body.splitlines()
                             if line.startswith("lockstep_ps_pushes_total"))
                check(f"{instance}: the ps job pushed to this shard", pushes > 0,
                      f"lockstep_ps_pushes_total {pushes:g}")
        stops = cluster.stop_all()
        check("every service exits 0 on SIGTERM within its stop_grace_period",
              all(rc == 0 for _, rc, _ in stops),
              ", ".join(f"{i} {'killed' if rc is None else f'exit {rc}'} {t:.1f}s"
                        for i, rc, t in stops))
        if "ps" in hashes and "ring/grpc" in hashes:
            log(f"note: ps final hash {hashes['ps']} "
                f"{'equals' if hashes['ps'] == hashes['ring/grpc'] else 'differs from'} "
                "ring's (not required: another summation order)")
    except (Failure, subprocess.TimeoutExpired, OSError) as e:
        check("cluster", False, str(e))
    finally:
        failed = [w for w, ok, _ in results if not ok]
        if failed:
            cluster.dump_logs()
        cluster.cleanup()
    passed = sum(1 for _, ok, _ in results if ok)
    log(f"\n{passed} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
