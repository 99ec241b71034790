#!/usr/bin/env python3
"""Project rules for the deployment files that the generic linters do not know.

  check_deploy.py compose deploy/docker-compose.yml
  check_deploy.py dockerfile deploy/Dockerfile
  check_deploy.py k8s deploy/k8s/*.yaml

compose: the file must also deploy on Docker Swarm (`docker stack deploy`)
and scale with `docker compose up --scale worker=N`:
  * every service names its image (stack deploy cannot build), and uses only
    service keys and deploy keys that stack deploy's compose schema (3.x)
    accepts; no top-level `name:`, no `pull_policy`;
  * volumes are named volumes declared at the top level (no host paths);
  * no service fixes a container name; the worker publishes no host port;
  * every service has a CMD-form health check that runs `lockstep ...
    health`, a restart policy and `deploy.restart_policy`;
  * every ${VAR} has a default (${VAR:-default}); no daemon gets --advertise
    (the daemons' defaults must work in containers).
dockerfile: multi-stage, both stages on Debian 12, the runtime stage copies
  the binaries from the build stage and runs as a non-root USER.
k8s: every Deployment/StatefulSet container has readiness and liveness
  probes and cpu+memory requests; every StatefulSet's serviceName is a
  headless Service in the set; no --advertise.
Prints every violation; exits 1 if there is one, 2 on usage errors.
"""
import re
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


def check_dockerfile(path):
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


def main(argv):
    if len(argv) < 3 or argv[1] not in ("compose", "dockerfile", "k8s"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        if argv[1] == "compose":
            check_compose(argv[2])
        elif argv[1] == "dockerfile":
            check_dockerfile(argv[2])
        else:
            check_k8s(argv[2:])
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as e:
        err(" ".join(argv[2:]), f"cannot check: {type(e).__name__}: {e}")
    for e in errors:
        print(e)
    if not errors:
        print(f"{' '.join(argv[2:])}: ok ({argv[1]} rules)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
