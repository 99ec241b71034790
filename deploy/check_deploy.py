#!/usr/bin/env python3
"""Project rules for the deployment files that the generic linters do not know.

  check_deploy.py compose deploy/docker-compose.yml
  check_deploy.py dockerfile deploy/Dockerfile deploy/setup.sh
  check_deploy.py k8s deploy/k8s/*.yaml
  check_deploy.py runtime-libs deploy/Dockerfile BINARY...

compose: the file must also deploy on Docker Swarm (`docker stack deploy`)
and scale with `docker compose up --scale worker=N`:
  * every service names its image (stack deploy cannot build), and uses only
    service keys and deploy keys that stack deploy's compose schema (3.x)
    accepts; no top-level `name:`, no `pull_policy`;
  * volumes are named volumes declared at the top level (no host paths);
  * no service fixes a container name; the worker publishes no host port;
  * every service has a CMD-form health check that runs `lockstep ...
    health`, a restart policy and `deploy.restart_policy`;
  * every service gives --metrics_port=N and prometheus.io/scrape and
    prometheus.io/port labels naming N;
  * every ${VAR} has a default (${VAR:-default}); no daemon gets --advertise
    (the daemons' defaults must work in containers);
  * secure by default: no daemon or health check runs with --insecure; each
    gives --tls_cert, --tls_key and --tls_ca (the coordinator also
    --token_file) and --http_token_file as files under /run/secrets/ that
    are secrets of that service, declared at the top level with a file:
    source.
dockerfile: multi-stage, both stages on Debian 12, the build stage installs
  every build package of deploy/setup.sh (compilers, -dev, Bazel), the
  runtime stage copies the binaries from the build stage and runs as a
  non-root USER.
runtime-libs DOCKERFILE BINARY...: the runtime stage installs exactly the
  Debian packages of the shared libraries the binaries need directly
  (readelf NEEDED, located with ldd, owner from dpkg -S), besides the base
  image's libc6/libgcc-s1/libstdc++6/zlib1g and the dataset package: none
  missing (the image would not start), none extra. Sanitizer runtimes are
  skipped; a rebuilt copy of a Debian library outside the system paths (a
  TSan build's abseil) counts as the package owning its soname.
k8s: every Deployment/StatefulSet container has readiness and liveness
  probes and cpu+memory requests; every StatefulSet's serviceName is a
  headless Service in the set; no --advertise; --metrics_port=N with a
  container port "metrics" at N and prometheus.io/* pod annotations; no
  --insecure; --tls_cert, --tls_key, --tls_ca (coordinator: --token_file)
  and --http_token_file name files in a volume mounted from a Secret; probes are exec probes
  running `lockstep ... --tls_* ... health` (the kubelet's native gRPC probe
  speaks plain text, which a mutual-TLS daemon refuses).
Prints every violation; exits 1 if there is one, 2 on usage errors.
"""
import os
import re
import subprocess
import sys

import yaml

# Service and deploy keys of the compose schema `docker stack deploy` checks
# files against (version 3.x, the default when the file has no version).
SWARM_SERVICE_KEYS = {
    "build", "cap_add", "cap_drop", "cgroup_parent", "cgroupns_mode", "command", "configs",
    "container_name", "credential_spec", "depends_on", "deploy", "devices", "dns",
    "dns_search", "domainname", "entrypoint", "env_file", "environment", "expose",
    "external_links", "extra_hosts", "healthcheck", "hostname", "image", "init", "ipc",
    "isolation", "labels", "links", "logging", "mac_address", "network_mode", "networks",
    "oom_score_adj", "pid", "ports", "privileged", "read_only", "restart", "secrets",
    "security_opt", "shm_size", "stdin_open", "stop_grace_period", "stop_signal", "sysctls",
    "tmpfs", "tty", "ulimits", "user", "userns_mode", "volumes", "working_dir",
}
SWARM_DEPLOY_KEYS = {
    "endpoint_mode", "labels", "mode", "placement", "replicas", "resources",
    "restart_policy", "rollback_config", "update_config",
}
SWARM_TOP_KEYS = {"version", "services", "networks", "volumes", "secrets", "configs"}
SCALED_SERVICES = {"worker"}

errors = []


def err(where, msg):
    errors.append(f"{where}: {msg}")


def check_metrics(where, args, annotations):
    """--metrics_port=N given, and prometheus.io/scrape + port N announced."""
    ports = [str(a).split("=", 1)[1] for a in args if str(a).startswith("--metrics_port=")]
    if len(ports) != 1:
        err(where, "expected one --metrics_port=N (Prometheus scrapes it)")
        return
    if annotations.get("prometheus.io/scrape") != "true" or \
            str(annotations.get("prometheus.io/port")) != ports[0]:
        err(where, f"prometheus.io/scrape: \"true\" and prometheus.io/port: \"{ports[0]}\" "
            f"expected, got {annotations}")
    return ports[0]


TLS_FLAGS = ("--tls_cert", "--tls_key", "--tls_ca")


def flag_values(args, flag):
    return [str(a).split("=", 1)[1] for a in args if str(a).startswith(flag + "=")]


def check_tls_args(where, args, is_coordinator, file_ok, what, daemon=True):
    """--insecure absent; each TLS flag (and the coordinator's --token_file,
    and a daemon's --http_token_file) given once, naming a file file_ok
    accepts (a secret's mount); a daemon serves its HTTP pages over HTTPS
    (--http_tls) to clients with a certificate of the CA
    (--http_client_certs)."""
    args = [str(a) for a in args]
    if any(a == "--insecure" or a.startswith("--insecure=") for a in args):
        err(where, "--insecure given: every daemon in the deploy files uses mutual TLS")
    flags = (TLS_FLAGS + (("--token_file",) if is_coordinator else ()) +
             (("--http_token_file",) if daemon else ()))
    if daemon and "--http_tls" not in args:
        err(where, "no --http_tls: the metrics and status pages (and their token) would be plain HTTP")
    if daemon and "--http_client_certs" not in args:
        err(where, "no --http_client_certs: any HTTPS client holding the token could read the pages")
    for flag in flags:
        values = flag_values(args, flag)
        if len(values) != 1:
            err(where, f"expected one {flag}=FILE ({what})")
        elif not file_ok(values[0]):
            err(where, f"{flag}={values[0]}: not {what}")


def check_compose(path):
    text = open(path, encoding="utf-8").read()
    for m in re.finditer(r"\$\{([^}]*)\}", text):
        if not re.fullmatch(r"[A-Z_][A-Z0-9_]*:-[^}]*", m.group(1)):
            line = text.count("\n", 0, m.start()) + 1
            err(f"{path}:{line}", f"${{{m.group(1)}}} has no default: write ${{VAR:-default}}")
    doc = yaml.safe_load(text)
    for key in doc:
        if key not in SWARM_TOP_KEYS and not key.startswith("x-"):
            err(path, f"top-level key {key!r}: docker stack deploy rejects it")
    volumes = set((doc.get("volumes") or {}).keys())
    services = doc.get("services") or {}
    if not services:
        err(path, "no services")
    for name, svc in services.items():
        where = f"{path}: service {name}"
        for key in svc:
            if key not in SWARM_SERVICE_KEYS and not key.startswith("x-"):
                err(where, f"key {key!r}: docker stack deploy rejects it")
        if not svc.get("image"):
            err(where, "no image: (docker stack deploy cannot build)")
        if "container_name" in svc:
            err(where, "container_name fixes one container: no scaling, no Swarm replicas")
        if not isinstance(svc.get("depends_on", []), list):
            err(where, "depends_on must be a list (Swarm's schema has no conditions)")
        for v in svc.get("volumes") or []:
            source = v.get("source", "") if isinstance(v, dict) else v.split(":")[0]
            if isinstance(v, dict) and v.get("type") != "volume":
                err(where, f"volume {v}: only named volumes (type: volume)")
            elif source not in volumes:
                err(where, f"volume {v!r}: source {source!r} is not a named volume "
                    "declared under volumes: (host paths do not exist on other hosts)")
        if name in SCALED_SERVICES:
            for p in svc.get("ports") or []:
                err(where, f"publishes {p!r}: scaled replicas would collide on the host port")
        deploy = svc.get("deploy") or {}
        for key in deploy:
            if key not in SWARM_DEPLOY_KEYS:
                err(where, f"deploy.{key}: Swarm does not read it")
        if "restart_policy" not in deploy:
            err(where, "no deploy.restart_policy (Swarm ignores restart:)")
        if "restart" not in svc:
            err(where, "no restart: policy (docker compose ignores deploy.restart_policy)")
        if "resources" not in deploy:
            err(where, "no deploy.resources")
        test = (svc.get("healthcheck") or {}).get("test")
        if not (isinstance(test, list) and test[:2] == ["CMD", "lockstep"] and test[-1] == "health"):
            err(where, f"health check {test!r}: expected [CMD, lockstep, --coordinator=..., health]")
        command = svc.get("command")
        if not isinstance(command, list) or not command:
            err(where, "command must be a non-empty list (exec form)")
        elif any(str(a).startswith("--advertise") for a in command):
            err(where, "--advertise given: the daemons' defaults must work in containers")
        else:
            check_metrics(where, command, svc.get("labels") or {})
        # Secrets: /run/secrets/<target> of this service's secrets, each
        # declared at the top level with a file.
        top_secrets = doc.get("secrets") or {}
        mounted = set()
        for sec in svc.get("secrets") or []:
            source = sec.get("source") if isinstance(sec, dict) else sec
            target = (sec.get("target") if isinstance(sec, dict) else None) or source
            if source not in top_secrets or not (top_secrets[source] or {}).get("file"):
                err(where, f"secret {source!r} is not declared under secrets: with a file:")
            mounted.add(f"/run/secrets/{target}")
        what = "a file under /run/secrets/ that is one of this service's secrets"
        if isinstance(command, list) and command:
            check_tls_args(where, command, "coordinator" in str(command[0]),
                           lambda f: f in mounted, what)
        if isinstance(test, list) and test[:2] == ["CMD", "lockstep"]:
            check_tls_args(f"{where} health check", test[2:-1], False,
                           lambda f: f in mounted, what, daemon=False)


BUILD_PACKAGE = re.compile(r"bazel-bootstrap|g\+\+|pkg-config|protobuf-compiler.*|.*-dev")
# -dev packages setup.sh installs for tests only, not to build the image:
# the libFuzzer/sanitizer runtime of tests/fuzz (built with clang-14).
TEST_ONLY_PACKAGES = {"libclang-rt-14-dev"}


def apt_packages(text):
    """Package names after each `apt-get install` in a shell text."""
    out = []
    for m in re.finditer(r"apt-get[^\n]*?install ([^&;)]*)", text.replace("\\\n", " ")):
        out += [w for w in m.group(1).split() if not w.startswith(("-", "$", '"'))]
    return out


def check_dockerfile(path, setup=None):
    if setup:
        text = open(setup, encoding="utf-8").read()
        m = re.search(r"PKGS=\(([^)]*)\)", text)
        wanted = [w for w in (m.group(1).split() if m else [])
                  if BUILD_PACKAGE.fullmatch(w) and w not in TEST_ONLY_PACKAGES]
        if not wanted:
            err(setup, "no PKGS=( ... ) list with build packages")
        build_stage = re.split(r"(?m)^FROM\s", open(path, encoding="utf-8").read())[1]
        have = set(apt_packages(build_stage))
        for w in wanted:
            if w not in have:
                err(path, f"the build stage does not install {w} (deploy/setup.sh does)")

    stages = []
    for raw in open(path, encoding="utf-8").read().replace("\\\n", " ").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            stages.append({"from": rest.split()[0], "lines": []})
        elif stages:
            stages[-1]["lines"].append((word, rest.strip()))
    if len(stages) < 2:
        err(path, f"{len(stages)} stage(s): expected a build stage and a runtime stage")
        return
    for s in stages:
        if not re.fullmatch(r"debian:12(\.[0-9]+)?(-slim)?|debian:bookworm(-slim)?", s["from"]):
            err(path, f"FROM {s['from']}: expected a Debian 12 base")
    final = stages[-1]["lines"]
    users = [rest for word, rest in final if word == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        err(path, "the runtime stage must end as a non-root USER")
    if not any(word == "COPY" and rest.startswith("--from=") for word, rest in final):
        err(path, "the runtime stage must COPY --from= the build stage")
    if any(word == "RUN" and "bazel" in rest for word, rest in final):
        err(path, "the runtime stage must not hold the build tools")


# In debian:12-slim already (essential packages and apt's dependencies).
BASE_SONAMES = {"libc.so.6", "libm.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2",
                "libstdc++.so.6", "libz.so.1"}
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}


def runtime_packages(path):
    """The packages the last stage's `apt-get install` names."""
    text = open(path, encoding="utf-8").read().replace("\\\n", " ")
    stages = re.split(r"(?m)^FROM\s", text)
    m = re.search(r"apt-get install ([^&]*)", stages[-1])
    if not m:
        return None
    return {w for w in m.group(1).split() if not w.startswith("-")}


def packages_of(paths):
    """{path: owning package} with one `dpkg -S` per try (it is slow)."""
    owner = {}
    for variant in (lambda p: p, os.path.realpath, lambda p: "/usr" + p):
        todo = {variant(p): p for p in paths if p not in owner}
        if not todo:
            break
        r = subprocess.run(["dpkg", "-S"] + sorted(todo), capture_output=True, text=True)
        for line in r.stdout.splitlines():
            pkg, _, path = line.partition(": ")
            if path in todo:
                owner[todo[path]] = pkg.split(":")[0].split(",")[0].strip()
    return owner


def check_runtime_libs(dockerfile, binaries):
    listed = runtime_packages(dockerfile)
    if listed is None:
        err(dockerfile, "no apt-get install in the runtime stage")
        return
    uses = {}  # library path -> sonames
    for b in binaries:
        dyn = subprocess.run(["readelf", "-d", b], capture_output=True, text=True, check=True)
        sonames = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn.stdout)
        ldd = subprocess.run(["ldd", b], capture_output=True, text=True, check=True).stdout
        where = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd, re.M))
        for so in sonames:
            if so in BASE_SONAMES or re.match(r"lib(a|ub|t|l)san\.so", so):
                continue  # base image; sanitizer runtimes of an ASan test build
            if so not in where:
                err(b, f"ldd does not locate {so}")
                continue
            uses.setdefault(where[so], set()).add(so)
    owner = packages_of(list(uses))
    # A sanitizer build may load a rebuilt copy of a Debian library from
    # outside the system paths (tests/tsan/run_tsan.sh links abseil built
    # with -fsanitize=thread through an RPATH): such a copy stands for the
    # package that owns the same soname in the linker cache, which is what
    # the image ships.
    unowned = [p for p in uses if p not in owner]
    if unowned:
        cache = dict(re.findall(r"^\s*(\S+) \(.*\) => (/\S+)$",
                                subprocess.run(["ldconfig", "-p"], capture_output=True,
                                               text=True).stdout, re.M))
        system = {p: cache[os.path.basename(p)] for p in unowned
                  if os.path.basename(p) in cache and cache[os.path.basename(p)] != p}
        system_owner = packages_of(list(system.values()))
        for p, sp in system.items():
            if sp in system_owner:
                owner[p] = system_owner[sp]
    needed = {}  # package -> sonames
    for path, sos in uses.items():
        if path not in owner:
            err(dockerfile, f"no Debian package owns {path} ({', '.join(sorted(sos))})")
            continue
        needed.setdefault(owner[path], set()).update(sos)
    for pkg, sos in sorted(needed.items()):
        if pkg not in listed and pkg not in BASE_PACKAGES:
            sample = sorted(sos)[:3] + (["..."] if len(sos) > 3 else [])
            err(dockerfile, f"runtime stage does not install {pkg} ({', '.join(sample)})")
    for pkg in sorted(listed):
        if pkg not in needed and not pkg.startswith("dataset-") and pkg not in BASE_PACKAGES:
            err(dockerfile, f"runtime stage installs {pkg}, which no binary needs")


def check_k8s(paths):
    docs = []
    for path in paths:
        for d in yaml.safe_load_all(open(path, encoding="utf-8")):
            if d:
                docs.append((path, d))
    headless = {d["metadata"]["name"] for _, d in docs
                if d.get("kind") == "Service" and d.get("spec", {}).get("clusterIP") == "None"}
    for path, d in docs:
        kind = d.get("kind")
        name = d.get("metadata", {}).get("name")
        where = f"{path}: {kind}/{name}"
        if kind not in ("Deployment", "StatefulSet"):
            continue
        if kind == "StatefulSet" and d["spec"].get("serviceName") not in headless:
            err(where, f"serviceName {d['spec'].get('serviceName')!r} is no headless Service here")
        for c in d["spec"]["template"]["spec"].get("containers", []):
            cw = f"{where} container {c.get('name')}"
            for probe in ("readinessProbe", "livenessProbe"):
                if probe not in c:
                    err(cw, f"no {probe}")
            req = c.get("resources", {}).get("requests", {})
            if "cpu" not in req or "memory" not in req:
                err(cw, "resources.requests needs cpu and memory")
            args = (c.get("command") or []) + (c.get("args") or [])
            if any(str(a).startswith("--advertise") for a in args):
                err(cw, "--advertise given: the daemons' defaults must work in pods")
            annotations = d["spec"]["template"].get("metadata", {}).get("annotations") or {}
            # TLS files from Secret volumes, for the daemon and its probes.
            pod = d["spec"]["template"]["spec"]
            secret_volumes = {v["name"] for v in pod.get("volumes") or [] if "secret" in v}
            secret_dirs = [m["mountPath"].rstrip("/") + "/" for m in c.get("volumeMounts") or []
                           if m.get("name") in secret_volumes]
            in_secret = lambda f: any(f.startswith(p) for p in secret_dirs)
            what = "a file in a volume mounted from a Secret"
            check_tls_args(cw, args, any("coordinator" in str(a) for a in args[:1]), in_secret,
                           what)
            for probe in ("readinessProbe", "livenessProbe"):
                p = c.get(probe) or {}
                cmd = (p.get("exec") or {}).get("command") or []
                if "exec" not in p or cmd[:1] != ["lockstep"] or cmd[-1:] != ["health"]:
                    if probe in c:
                        err(cw, f"{probe}: expected an exec probe running `lockstep ... health` "
                            "with --tls_* (a native grpc probe speaks plain text)")
                else:
                    check_tls_args(f"{cw} {probe}", cmd[1:-1], False, in_secret, what,
                                   daemon=False)
            port = check_metrics(cw, args, annotations)
            if port and not any(p.get("name") == "metrics" and str(p.get("containerPort")) == port
                                for p in c.get("ports") or []):
                err(cw, f"no container port named metrics at {port}")


def main(argv):
    if len(argv) < 3 or argv[1] not in ("compose", "dockerfile", "k8s", "runtime-libs"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        if argv[1] == "compose":
            check_compose(argv[2])
        elif argv[1] == "dockerfile":
            check_dockerfile(argv[2], argv[3] if len(argv) > 3 else None)
        elif argv[1] == "runtime-libs":
            check_runtime_libs(argv[2], argv[3:])
        else:
            check_k8s(argv[2:])
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError,
            subprocess.CalledProcessError) as e:
        err(" ".join(argv[2:]), f"cannot check: {type(e).__name__}: {e}")
    for e in errors:
        print(e)
    if not errors:
        print(f"{' '.join(argv[2:])}: ok ({argv[1]} rules)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
