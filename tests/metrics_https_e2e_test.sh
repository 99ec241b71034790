#!/usr/bin/env bash
# The daemons' HTTP pages over HTTPS (--http_tls, issue 11), real processes
# on 127.0.0.1 with OS-chosen ports and certificates from deploy/certs.sh:
# a coordinator, a lockstep-server ps shard and a worker run with mutual TLS
# on gRPC, --http_token_file and --http_tls. Checks:
#   * /healthz, /metrics and the status page answer over HTTPS for a client
#     that trusts the cluster's CA (the token still needed but /healthz);
#   * a client that does not trust the CA fails the handshake (certificate
#     verify failed), and a plain-HTTP request to the port gets no HTTP
#     answer; the daemon keeps serving after both;
#   * a real prometheus scrapes all three with scheme https, tls_config
#     ca_file and the token: every target up;
#   * --http_tls with --insecure exits 2 naming the flag, before serving;
#   * --http_client_certs (a second ps server): a client without a
#     certificate, or with a worker's, gets no HTTP answer; the metrics
#     certificate gets its pages; prometheus scrapes it with
#     tls_config.cert_file/key_file; without --http_tls the flag exits 2.
# SKIPPED (exit 0, loudly) only when Debian's prometheus is not installed.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"; PS="$4"; CERTS="$5"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAIL_TAIL=8
source "$(dirname "$0")/e2e_lib.sh"
command -v openssl >/dev/null || fail "openssl not installed (deploy/setup.sh installs it)"
if ! command -v prometheus >/dev/null; then
  echo "################################################################"
  echo "SKIPPED: prometheus not installed (bash deploy/setup.sh installs Debian's prometheus)"
  echo "################################################################"
  exit 0
fi

bash "$CERTS" --out="$T/pki" 2>/dev/null || fail "certs.sh"
PKI="$T/pki"
HTTP=(--http_token_file="$PKI/http_token" --http_tls --metrics_port=0)

# fetch URL [CA|none] [token|notoken] [ROLE]: prints "STATUS BODY-HEAD" or
# "ERROR <what>"; ROLE: present PKI/ROLE.pem as the client certificate.
fetch() {
  python3 - "$1" "${2:-$PKI/ca.pem}" "${3:-token}" "$PKI/http_token" "${4:+$PKI/$4}" <<'PY'
import ssl, sys, urllib.error, urllib.request
url, ca, tok, tokfile, cert = sys.argv[1:6]
ctx = ssl.create_default_context(cafile=None if ca == "none" else ca)
if cert:
    ctx.load_cert_chain(cert + ".pem", cert + ".key")
req = urllib.request.Request(url)
if tok == "token":
    req.add_header("Authorization", "Bearer " + open(tokfile).read().strip())
try:
    with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
        print(r.status, r.read(200).decode(errors="replace").replace("\n", " "))
except urllib.error.HTTPError as e:
    print(e.code)
except Exception as e:  # handshake failures, resets
    print("ERROR", e)
PY
}
# A plain-HTTP request to host:port: what comes back (nothing, or bytes).
plain_http() {
  python3 - "$1" <<'PY'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=10)
s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
data = b""
try:
    while True:
        got = s.recv(4096)
        if not got:
            break
        data += got
except (ConnectionResetError, socket.timeout):
    pass
print("HTTP-ANSWER" if data.startswith(b"HTTP/") else "NO-HTTP-ANSWER (%d bytes)" % len(data))
PY
}

echo "== --http_tls without a certificate exits 2 naming the flag"
for d in "$COORD" "$PS --role=ps" "$WORKER --coordinator=127.0.0.1:1"; do
  rc=0; rm -f "$T/bad.port"
  # shellcheck disable=SC2086  # the binary and its own flags
  $d --insecure --listen=127.0.0.1:0 --port_file="$T/bad.port" --metrics_port=0 --http_tls \
    2>"$T/bad.log" || rc=$?
  [ "$rc" = 2 ] || fail "$d --insecure --http_tls: exit $rc: $(cat "$T/bad.log")"
  grep -q -- "--http_tls: needs this daemon's certificate" "$T/bad.log" || fail "$d: $(cat "$T/bad.log")"
  [ ! -e "$T/bad.port" ] || fail "$d wrote its port file before refusing --http_tls"
done
echo "coordinator, ps server and worker: exit 2 naming --http_tls, no port file"
rc=0
# shellcheck disable=SC2046
"$PS" --role=ps --listen=127.0.0.1:0 --port_file="$T/bad.port" --metrics_port=0 \
  --http_client_certs $(tls "$PKI" server) 2>"$T/bad.log" || rc=$?
[ "$rc" = 2 ] && grep -q -- "--http_client_certs: needs --http_tls" "$T/bad.log" \
  || fail "--http_client_certs without --http_tls: exit $rc: $(cat "$T/bad.log")"
echo "--http_client_certs without --http_tls: exit 2 naming it"

# shellcheck disable=SC2046
"$PS" --role=ps --listen=127.0.0.1:0 --port_file="$T/ps.port" --metrics_port_file="$T/ps.mport" \
  "${HTTP[@]}" $(tls "$PKI" server) 2>"$T/ps.log" & pids+=($!)
wait_file "$T/ps.port"; wait_file "$T/ps.mport"
# shellcheck disable=SC2046
"$COORD" --listen=127.0.0.1:0 --port_file="$T/coord.port" --metrics_port_file="$T/coord.mport" \
  --ps_addresses="127.0.0.1:$(cat "$T/ps.port")" --token_file="$PKI/token" "${HTTP[@]}" \
  $(tls "$PKI" coordinator) 2>"$T/coord.log" & pids+=($!)
wait_file "$T/coord.port"; wait_file "$T/coord.mport"
C="127.0.0.1:$(cat "$T/coord.port")"
# shellcheck disable=SC2046
"$WORKER" --coordinator="$C" --data_dir="$T" --port_file="$T/w1.port" \
  --metrics_port_file="$T/w1.mport" "${HTTP[@]}" $(tls "$PKI" worker) 2>"$T/w1.log" & pids+=($!)
wait_file "$T/w1.mport"
grep -q "metrics on https://" "$T/coord.log" || fail "the coordinator does not say https: $(grep metrics "$T/coord.log")"
targets=()
for d in coord ps w1; do targets+=("127.0.0.1:$(cat "$T/$d.mport")"); done

echo "== HTTPS with the cluster's CA; the token still needed"
for t in "${targets[@]}"; do
  r=$(fetch "https://$t/healthz" "$PKI/ca.pem" notoken); [ "$r" = "200 ok " ] || fail "$t/healthz: $r"
  r=$(fetch "https://$t/metrics" "$PKI/ca.pem" notoken); [ "$r" = 401 ] || fail "$t/metrics without the token: $r"
  r=$(fetch "https://$t/metrics"); [ "${r%% *}" = 200 ] || fail "$t/metrics: $r"
  echo "$t: /healthz 200, /metrics 401 without the token, 200 with it"
done
r=$(fetch "https://${targets[0]}/"); [ "${r%% *}" = 200 ] && grep -qi '<!DOCTYPE html' <<<"$r" \
  || fail "status page over https: $r"
echo "status page over https: 200"

echo "== a client that does not trust the CA, and plain HTTP, are refused; serving goes on"
r=$(fetch "https://${targets[0]}/healthz" none notoken)
grep -q "CERTIFICATE_VERIFY_FAILED" <<<"$r" || fail "a client without the CA: $r"
echo "without the CA: $r"
r=$(plain_http "${targets[0]}")
[ "${r%% *}" = NO-HTTP-ANSWER ] || fail "plain HTTP to the HTTPS port: $r"
echo "plain HTTP: $r"
r=$(fetch "https://${targets[0]}/healthz" "$PKI/ca.pem" notoken); [ "$r" = "200 ok " ] \
  || fail "not serving after the refusals: $r"

echo "== --http_client_certs: only the cluster's metrics (or client) certificate gets the pages"
# shellcheck disable=SC2046
"$PS" --role=ps --listen=127.0.0.1:0 --port_file="$T/ps2.port" --metrics_port_file="$T/ps2.mport" \
  "${HTTP[@]}" --http_client_certs $(tls "$PKI" server) 2>"$T/ps2.log" & pids+=($!)
wait_file "$T/ps2.mport"
M="127.0.0.1:$(cat "$T/ps2.mport")"
r=$(fetch "https://$M/healthz" "$PKI/ca.pem" notoken)
[ "${r%% *}" = ERROR ] || fail "no client certificate: $r"
echo "no client certificate: $r"
r=$(fetch "https://$M/metrics" "$PKI/ca.pem" token worker)
[ "${r%% *}" = ERROR ] || fail "a worker's certificate: $r"
echo "a worker's certificate: $r"
r=$(fetch "https://$M/metrics" "$PKI/ca.pem" notoken metrics); [ "$r" = 401 ] || fail "metrics certificate, no token: $r"
r=$(fetch "https://$M/metrics" "$PKI/ca.pem" token metrics); [ "${r%% *}" = 200 ] || fail "metrics certificate: $r"
r=$(fetch "https://$M/healthz" "$PKI/ca.pem" notoken client); [ "$r" = "200 ok " ] || fail "client certificate: $r"
echo "metrics certificate: 401 without the token, 200 with it; client certificate: /healthz 200"

echo "== a real prometheus scrapes all four over https (the fourth with its certificate)"
PP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
{
  echo "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}"
  echo "scrape_configs:"
  echo "  - job_name: lockstep"
  echo "    scheme: https"
  echo "    tls_config: {ca_file: $PKI/ca.pem}"
  echo "    authorization: {credentials_file: $PKI/http_token}"
  echo "    static_configs:"
  echo "      - targets: [$(IFS=,; echo "${targets[*]}" | sed 's/,/, /g')]"
  echo "  - job_name: lockstep-client-certs"
  echo "    scheme: https"
  echo "    tls_config: {ca_file: $PKI/ca.pem, cert_file: $PKI/metrics.pem, key_file: $PKI/metrics.key}"
  echo "    authorization: {credentials_file: $PKI/http_token}"
  echo "    static_configs:"
  echo "      - targets: [$M]"
} >"$T/prometheus.yml"
if command -v promtool >/dev/null; then
  promtool check config "$T/prometheus.yml" >"$T/promtool.out" 2>&1 || fail "config: $(cat "$T/promtool.out")"
fi
prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/tsdb" \
  --web.listen-address="127.0.0.1:$PP" 2>"$T/prometheus.log" & pids+=($!)
python3 - "http://127.0.0.1:$PP" "$(( ${#targets[@]} + 1 ))" <<'PY' || fail "prometheus did not scrape every target over https"
import json, sys, time, urllib.request
base, want = sys.argv[1], int(sys.argv[2])
deadline = time.time() + 60
up = []
while time.time() < deadline:
    try:
        with urllib.request.urlopen(base + "/api/v1/targets", timeout=5) as r:
            t = json.load(r)["data"]["activeTargets"]
    except Exception:
        time.sleep(0.2)
        continue
    up = [x for x in t if x["health"] == "up" and x["scrapeUrl"].startswith("https://")]
    if len(up) == want:
        break
    time.sleep(0.2)
for x in t:
    print(" ", x["scrapeUrl"], x["health"], x.get("lastError", ""))
sys.exit(0 if len(up) == want else 1)
PY
echo PASS
