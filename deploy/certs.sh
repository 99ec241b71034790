#!/usr/bin/env bash
# Creates what mutual TLS between lockstep processes needs (Debian's openssl):
#
#   bash deploy/certs.sh --out=DIR [--hosts=h1,10.0.0.5,...] [--days=N] [--force]
#                        [--k8s_secrets=FILE]
#
# DIR/ca.pem, ca.key             the CA (keep ca.key offline in production)
# DIR/coordinator.{pem,key}      lockstep-coordinator   URI SAN lockstep://role/coordinator
# DIR/server.{pem,key}           lockstep-server (ps)   URI SAN lockstep://role/server
# DIR/worker.{pem,key}           lockstep-worker        URI SAN lockstep://role/worker
# DIR/client.{pem,key}           lockstep CLI / Python  URI SAN lockstep://role/client
# DIR/metrics.{pem,key}          Prometheus (scraping   URI SAN lockstep://role/metrics
#                                daemons with --http_client_certs; no gRPC method admits it)
# DIR/token                      the bearer token for SubmitJob/CancelJob
#                                (coordinator --token_file, lockstep --token_file)
# DIR/http_token                 the token of the daemons' HTTP pages (every
#                                daemon's --http_token_file; Prometheus'
#                                authorization.credentials_file)
#
# Every certificate that a server presents (coordinator, server, worker: a
# worker serves its peers) names localhost, 127.0.0.1, ::1 and every --hosts
# entry (DNS names or IP addresses) as subject alternative names (the C++
# channels check the role, not the host; other TLS clients may check it).
# The role is in the URI SAN that common/grpcutil/call_policy.h reads, and
# again as the DNS SAN <role>.role.lockstep.invalid (".invalid" never
# resolves), which the Python client checks instead of the host name: grpcio
# has no custom verifier, so it sets grpc.ssl_target_name_override to
# coordinator.role.lockstep.invalid. Keys are EC P-256, certificates valid
# --days days (default 365). Private keys and the tokens are mode 0600.
# An existing DIR/ca.pem is kept (re-run with a new --hosts list to re-issue
# the role certificates from the same CA) unless --force.
# --k8s_secrets=FILE also writes Kubernetes Secret objects (mode 0600) that
# deploy/k8s/ mounts at /etc/lockstep/tls: lockstep-coordinator-tls,
# lockstep-server-tls, lockstep-worker-tls (ca.pem, tls.pem, tls.key,
# http_token; the coordinator's also token): kubectl apply -f FILE.
# Docker Compose / Swarm read DIR's files as secrets (deploy/docker-compose.yml,
# LOCKSTEP_PKI_DIR, default deploy/pki).
set -euo pipefail

out="" hosts="" days=365 force=0 k8s=""
for arg in "$@"; do
  case "$arg" in
    --out=*) out="${arg#--out=}" ;;
    --hosts=*) hosts="${arg#--hosts=}" ;;
    --days=*) days="${arg#--days=}" ;;
    --force) force=1 ;;
    --k8s_secrets=*) k8s="${arg#--k8s_secrets=}" ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "certs.sh: unknown argument \"$arg\" (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -z "$out" ]]; then
  echo "certs.sh: --out=DIR is required" >&2; exit 2
fi
if ! [[ "$days" =~ ^[1-9][0-9]*$ ]]; then
  echo "certs.sh: --days: expected a positive integer, got \"$days\"" >&2; exit 2
fi
command -v openssl >/dev/null || { echo "certs.sh: openssl not found (apt-get install openssl)" >&2; exit 1; }
mkdir -p "$out"
umask 077

san_hosts="DNS:localhost,IP:127.0.0.1,IP:::1"
IFS=',' read -r -a extra <<< "$hosts"
for h in "${extra[@]}"; do
  [[ -z "$h" ]] && continue
  if [[ "$h" =~ ^[0-9.]+$ || "$h" == *:* ]]; then
    san_hosts+=",IP:$h"
  elif [[ "$h" =~ ^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$ ]]; then
    san_hosts+=",DNS:$h"
  else
    echo "certs.sh: --hosts: \"$h\" is neither a host name nor an IP address" >&2; exit 2
  fi
done

if [[ $force -eq 1 || ! -s "$out/ca.pem" || ! -s "$out/ca.key" ]]; then
  openssl ecparam -name prime256v1 -genkey -noout -out "$out/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$out/ca.key" -sha256 -days "$days" \
    -subj "/O=lockstep/CN=lockstep CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$out/ca.pem" 2>/dev/null
fi

issue() {  # role, SAN list, extended key usage
  local role="$1" san="$2" eku="$3"
  openssl ecparam -name prime256v1 -genkey -noout -out "$out/$role.key.tmp" 2>/dev/null
  openssl pkcs8 -topk8 -nocrypt -in "$out/$role.key.tmp" -out "$out/$role.key" 2>/dev/null
  rm -f "$out/$role.key.tmp"
  openssl req -new -key "$out/$role.key" -subj "/O=lockstep/OU=$role/CN=lockstep-$role" \
    -out "$out/$role.csr" 2>/dev/null
  printf 'subjectAltName=%s\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n' \
    "$san" "$eku" > "$out/$role.ext"
  openssl x509 -req -in "$out/$role.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" \
    -CAcreateserial -days "$days" -sha256 -extfile "$out/$role.ext" \
    -out "$out/$role.pem" 2>/dev/null
  rm -f "$out/$role.csr" "$out/$role.ext"
  chmod 0644 "$out/$role.pem"
}

issue coordinator "URI:lockstep://role/coordinator,DNS:coordinator.role.lockstep.invalid,$san_hosts" "serverAuth,clientAuth"
issue server "URI:lockstep://role/server,DNS:server.role.lockstep.invalid,$san_hosts" "serverAuth,clientAuth"
issue worker "URI:lockstep://role/worker,DNS:worker.role.lockstep.invalid,$san_hosts" "serverAuth,clientAuth"
issue client "URI:lockstep://role/client" "clientAuth"
issue metrics "URI:lockstep://role/metrics" "clientAuth"
chmod 0644 "$out/ca.pem"
rm -f "$out/ca.srl"

if [[ $force -eq 1 || ! -s "$out/token" ]]; then
  openssl rand -hex 32 > "$out/token"
fi
if [[ $force -eq 1 || ! -s "$out/http_token" ]]; then
  openssl rand -hex 32 > "$out/http_token"
fi

if [[ -n "$k8s" ]]; then
  b64() { base64 -w0 < "$1"; }
  {
    for role in coordinator server worker; do
      printf -- '---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: lockstep-%s-tls\n' "$role"
      printf '  labels:\n    app.kubernetes.io/name: lockstep\n    app.kubernetes.io/component: %s\n' \
        "$([ "$role" = server ] && echo ps || echo "$role")"
      printf 'type: Opaque\ndata:\n  ca.pem: %s\n  tls.pem: %s\n  tls.key: %s\n  http_token: %s\n' \
        "$(b64 "$out/ca.pem")" "$(b64 "$out/$role.pem")" "$(b64 "$out/$role.key")" \
        "$(b64 "$out/http_token")"
      [ "$role" = coordinator ] && printf '  token: %s\n' "$(b64 "$out/token")"
    done
  } > "$k8s"
  chmod 0600 "$k8s"
  echo "certs.sh: Kubernetes Secrets lockstep-{coordinator,server,worker}-tls in $k8s" >&2
fi
echo "certs.sh: CA, coordinator, server, worker and client certificates and tokens in $out" >&2
