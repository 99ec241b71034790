#!/usr/bin/env bash
# Lints and validates the deployment files, and checks that each check
# rejects a deliberately broken copy (so none of them passes vacuously):
#   docker-compose 1.29 (Debian)  docker-compose -f deploy/docker-compose.yml config -q
#   dclint (npm)                  the Compose file
#   dockerfilelint (npm)          deploy/Dockerfile
#   kubernetes-models (npm)       every deploy/k8s/*.yaml document against the
#                                 Kubernetes OpenAPI schemas (deploy/validate_k8s.mjs)
#   deploy/check_deploy.py        Swarm / scaling / health-check / non-root rules
# Arguments: the four built binaries (for the runtime-library check).
# Tools come from deploy/setup.sh (apt: docker-compose python3-yaml; npm
# packages in $LOCKSTEP_NPM_PREFIX, default /opt/lockstep-npm). A missing tool
# fails the test.
set -uo pipefail
D="${TEST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}"
[ -d "$D/lockstep/deploy" ] && D="$D/lockstep"
DEPLOY="$D/deploy"
NPM="${LOCKSTEP_NPM_PREFIX:-/opt/lockstep-npm}"
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
T="${TEST_TMPDIR:-$(mktemp -d)}"
failures=0
pass() { echo "ok:   $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for tool in docker-compose node; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool not installed (run deploy/setup.sh)"; exit 1; }
done
for bin in dclint dockerfilelint; do
  [ -x "$NPM/node_modules/.bin/$bin" ] || { echo "FAIL: $NPM/node_modules/.bin/$bin missing (run deploy/setup.sh)"; exit 1; }
done
"$PY" -c "import yaml" 2>/dev/null || { echo "FAIL: $PY has no yaml module (run deploy/setup.sh)"; exit 1; }

# expect_ok NAME CMD... / expect_reject NAME CMD...: run CMD, show its output
# on failure (or always, for rejects, so the log shows what was caught).
expect_ok() {
  local name=$1; shift
  if out=$("$@" 2>&1); then pass "$name"; else fail "$name (exit $?)"; echo "$out" | sed 's/^/      /'; fi
}
expect_reject() {
  local name=$1; shift
  if out=$("$@" 2>&1); then
    fail "$name: the broken copy was accepted"; echo "$out" | sed 's/^/      /'
  else
    pass "$name: rejected"; echo "$out" | grep -v '^\s*$' | head -4 | sed 's/^/      /'
  fi
}
compose_cfg() { docker-compose --project-directory "$(dirname "$1")" -f "$1" config -q; }
dclint() { "$NPM/node_modules/.bin/dclint" "$@"; }
dockerfilelint() { "$NPM/node_modules/.bin/dockerfilelint" "$@"; }
k8s() { node "$DEPLOY/validate_k8s.mjs" "$NPM" "$@"; }
rules() { "$PY" "$DEPLOY/check_deploy.py" "$@"; }

echo "== the shipped files"
# Compose resolves build.context (..) against the file's folder: copy the
# file beside the repository layout it expects.
mkdir -p "$T/repo/deploy"
cp "$DEPLOY/docker-compose.yml" "$T/repo/deploy/"
C="$T/repo/deploy/docker-compose.yml"
expect_ok "docker-compose config -q" compose_cfg "$C"
expect_ok "dclint docker-compose.yml" dclint "$C"
# (dockerfilelint takes no symlink, and Bazel's runfiles are symlinks.)
cp "$DEPLOY/Dockerfile" "$T/repo/deploy/Dockerfile"
expect_ok "dockerfilelint Dockerfile" dockerfilelint "$T/repo/deploy/Dockerfile"
expect_ok "kubernetes-models: deploy/k8s/*.yaml" k8s "$DEPLOY"/k8s/*.yaml
expect_ok "rules: compose" rules compose "$C"
expect_ok "rules: Dockerfile" rules dockerfile "$DEPLOY/Dockerfile" "$DEPLOY/setup.sh"
expect_ok "rules: k8s" rules k8s "$DEPLOY"/k8s/*.yaml
# The Secrets deploy/k8s/ mounts, as deploy/certs.sh writes them.
bash "$DEPLOY/certs.sh" --out="$T/pki" --k8s_secrets="$T/pki/k8s-secrets.yaml" 2>/dev/null \
  || fail "certs.sh --k8s_secrets"
expect_ok "kubernetes-models: certs.sh --k8s_secrets" k8s "$T/pki/k8s-secrets.yaml"
names=$(grep -h 'secretName:' "$DEPLOY"/k8s/*.yaml | awk '{print $2}' | sort -u | tr '\n' ' ')
made=$(grep '^  name:' "$T/pki/k8s-secrets.yaml" | awk '{print $2}' | sort -u | tr '\n' ' ')
[ -n "$names" ] && [ "$names" = "$made" ] && pass "the manifests mount exactly the Secrets certs.sh writes ($names)" \
  || fail "secretName in deploy/k8s: '$names'; certs.sh --k8s_secrets writes '$made'"
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || { echo "FAIL: no binaries given"; exit 1; }
expect_ok "rules: runtime image installs the binaries' libraries" rules runtime-libs \
  "$DEPLOY/Dockerfile" "${BINS[@]}"
# --scale and env overrides: the file still resolves with other values.
overrides() {
  LOCKSTEP_WORKERS=5 LOCKSTEP_COORDINATOR_PORT=9000 LOCKSTEP_IMAGE=registry.example/lockstep:1.2 \
    compose_cfg "$1"
}
expect_ok "docker-compose config with overrides" overrides "$C"
resolved=$(LOCKSTEP_COORDINATOR_PORT=9000 docker-compose --project-directory "$T/repo/deploy" -f "$C" config 2>&1)
grep -q -- "--listen=0.0.0.0:9000" <<<"$resolved" && grep -q "127.0.0.1:9000" <<<"$resolved" \
  && pass "LOCKSTEP_COORDINATOR_PORT reaches --listen and the health check" \
  || fail "LOCKSTEP_COORDINATOR_PORT not applied: $resolved"

echo "== broken copies are rejected"
B="$T/broken"; mkdir -p "$B/deploy" "$B/k8s"
# A misspelt service key.
sed 's/^    healthcheck:/    healthchek:/' "$C" >"$B/deploy/typo.yml"
expect_reject "docker-compose config -q, misspelt key" compose_cfg "$B/deploy/typo.yml"
expect_reject "dclint, misspelt key" dclint "$B/deploy/typo.yml"
# Compose: a string where a number goes; a YAML syntax error.
sed 's/^      replicas: \${LOCKSTEP_WORKERS:-3}/      replicas: many/' "$C" >"$B/deploy/replicas.yml"
expect_reject "docker-compose config -q, replicas: many" compose_cfg "$B/deploy/replicas.yml"
sed '0,/^  worker:/s//  worker:\n   bad: [indent/' "$C" >"$B/deploy/syntax.yml"
expect_reject "dclint, YAML syntax error" dclint "$B/deploy/syntax.yml"
# dclint: an image without a concrete tag.
sed '0,/^  worker:/s//  worker:\n    image: lockstep:latest/' "$C" >"$B/deploy/latest.yml"
expect_reject "dclint, image :latest" dclint "$B/deploy/latest.yml"
# Dockerfile: apt-get without -y; an unknown instruction.
sed 's/apt-get install -y /apt-get install /' "$DEPLOY/Dockerfile" >"$B/Dockerfile.noy"
expect_reject "dockerfilelint, apt-get install without -y" dockerfilelint "$B/Dockerfile.noy"
sed 's/^COPY --from=build/COPPY --from=build/' "$DEPLOY/Dockerfile" >"$B/Dockerfile.copy"
expect_reject "dockerfilelint, unknown instruction" dockerfilelint "$B/Dockerfile.copy"
# Kubernetes: a misspelt field, a wrong type, an unknown kind.
sed 's/readinessProbe:/readinesProbe:/' "$DEPLOY/k8s/worker.yaml" >"$B/k8s/typo.yaml"
expect_reject "kubernetes-models, misspelt readinessProbe" k8s "$B/k8s/typo.yaml"
sed 's/^  replicas: 1$/  replicas: "one"/' "$DEPLOY/k8s/coordinator.yaml" >"$B/k8s/type.yaml"
expect_reject "kubernetes-models, replicas: \"one\"" k8s "$B/k8s/type.yaml"
sed 's/^kind: StatefulSet/kind: StatefullSet/' "$DEPLOY/k8s/ps.yaml" >"$B/k8s/kind.yaml"
expect_reject "kubernetes-models, unknown kind" k8s "$B/k8s/kind.yaml"
sed 's/^            periodSeconds: 5$/            periodSeconds: "five"/' "$DEPLOY/k8s/ps.yaml" >"$B/k8s/probe.yaml"
expect_reject "kubernetes-models, probe period not an integer" k8s "$B/k8s/probe.yaml"
# Project rules: a bind mount of a host path, a fixed container name, a
# published worker port, --advertise, an interpolation without a default,
# a build-only service, a root runtime image, a probe-less pod.
sed 's|      - datasets:/data:ro|      - ./data:/data:ro|' "$C" >"$B/deploy/bind.yml"
expect_reject "rules, bind mount of a host path" rules compose "$B/deploy/bind.yml"
sed '0,/^  worker:/s//  worker:\n    container_name: worker/' "$C" >"$B/deploy/cname.yml"
expect_reject "rules, container_name on the scaled worker" rules compose "$B/deploy/cname.yml"
sed "0,/^  worker:/s//  worker:\n    ports: ['7071:7071']/" "$C" >"$B/deploy/wport.yml"
expect_reject "rules, worker publishes a host port" rules compose "$B/deploy/wport.yml"
sed 's|      - --data_dir=/data|      - --data_dir=/data\n      - --advertise=worker|' "$C" >"$B/deploy/adv.yml"
expect_reject "rules, --advertise in a command" rules compose "$B/deploy/adv.yml"
sed 's/\${LOCKSTEP_PS_PORT:-7080}/${LOCKSTEP_PS_PORT}/' "$C" >"$B/deploy/nodefault.yml"
expect_reject "rules, \${VAR} without a default" rules compose "$B/deploy/nodefault.yml"
sed 's/^  image: .*//' "$C" >"$B/deploy/noimage.yml"
expect_reject "rules, build-only services (no image)" rules compose "$B/deploy/noimage.yml"
sed 's/ libgtest-dev / /' "$DEPLOY/Dockerfile" >"$B/Dockerfile.nogtest"
expect_reject "rules, build stage misses a build package of setup.sh" rules dockerfile \
  "$B/Dockerfile.nogtest" "$DEPLOY/setup.sh"
sed 's/^USER lockstep/USER root/' "$DEPLOY/Dockerfile" >"$B/Dockerfile.root"
expect_reject "rules, runtime image runs as root" rules dockerfile "$B/Dockerfile.root"
sed 's/ libxxhash0 / /' "$DEPLOY/Dockerfile" >"$B/Dockerfile.nolib"
expect_reject "rules, runtime image misses a library package" rules runtime-libs \
  "$B/Dockerfile.nolib" "${BINS[@]}"
sed 's/ libxxhash0 / libxxhash0 libcurl4 /' "$DEPLOY/Dockerfile" >"$B/Dockerfile.extra"
expect_reject "rules, runtime image installs a package nothing needs" rules runtime-libs \
  "$B/Dockerfile.extra" "${BINS[@]}"
sed '/prometheus.io\/scrape/d' "$DEPLOY/k8s/ps.yaml" >"$B/k8s/noscrape.yaml"
expect_reject "rules, pod without the prometheus.io/scrape annotation" rules k8s "$B/k8s/noscrape.yaml"
sed 's/      - --metrics_port=\${LOCKSTEP_WORKER_METRICS_PORT:-9171}//' "$C" >"$B/deploy/nometrics.yml"
expect_reject "rules, worker without --metrics_port" rules compose "$B/deploy/nometrics.yml"
"$PY" - "$DEPLOY/k8s/worker.yaml" "$B/k8s/noprobe.yaml" <<'PY'
import sys, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
for d in docs:
    if d and d["kind"] == "StatefulSet":
        for c in d["spec"]["template"]["spec"]["containers"]:
            c.pop("livenessProbe", None)
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))
PY
expect_reject "rules, container without probes" rules k8s "$B/k8s/noprobe.yaml"
# Secure by default: --insecure in a daemon's command, a TLS flag missing,
# a key that is not a secret of the service, a native (plain-text) gRPC
# probe, a TLS file outside the Secret volume.
sed 's|      - --data_dir=/data|      - --data_dir=/data\n      - --insecure|' "$C" >"$B/deploy/insecure.yml"
expect_reject "rules, --insecure in a compose command" rules compose "$B/deploy/insecure.yml"
sed '/^      - --token_file=/d' "$C" >"$B/deploy/notoken.yml"
expect_reject "rules, coordinator without --token_file" rules compose "$B/deploy/notoken.yml"
sed '/^      - --http_client_certs$/d' "$C" >"$B/deploy/noclientcerts.yml"
expect_reject "rules, a daemon's HTTPS without --http_client_certs" rules compose \
  "$B/deploy/noclientcerts.yml"
sed '/- --http_client_certs /d' "$DEPLOY/k8s/ps.yaml" >"$B/k8s/noclientcerts.yaml"
expect_reject "rules, a pod's HTTPS without --http_client_certs" rules k8s "$B/k8s/noclientcerts.yaml"
sed 's|      - --tls_key=/run/secrets/worker.key|      - --tls_key=/run/secrets/server.key|' "$C" >"$B/deploy/wrongkey.yml"
expect_reject "rules, a key that is not one of the service's secrets" rules compose "$B/deploy/wrongkey.yml"
sed 's|            - --combine_timeout_ms=30000|            - --combine_timeout_ms=30000\n            - --insecure|' \
  "$DEPLOY/k8s/worker.yaml" >"$B/k8s/insecure.yaml"
expect_reject "rules, --insecure in a pod's args" rules k8s "$B/k8s/insecure.yaml"
"$PY" - "$DEPLOY/k8s/ps.yaml" "$B/k8s/grpcprobe.yaml" <<'PY'
import sys, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
for d in docs:
    if d and d["kind"] == "StatefulSet":
        for c in d["spec"]["template"]["spec"]["containers"]:
            c["readinessProbe"] = {"grpc": {"port": 7080}, "periodSeconds": 5}
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))
PY
expect_reject "rules, a native gRPC probe (plain text)" rules k8s "$B/k8s/grpcprobe.yaml"
sed 's|            - --tls_ca=/etc/lockstep/tls/ca.pem|            - --tls_ca=/tmp/ca.pem|' \
  "$DEPLOY/k8s/coordinator.yaml" >"$B/k8s/tlspath.yaml"
expect_reject "rules, --tls_ca outside the Secret volume" rules k8s "$B/k8s/tlspath.yaml"

echo
if [ "$failures" -ne 0 ]; then echo "FAIL: $failures check(s) failed"; exit 1; fi
echo "PASS"
