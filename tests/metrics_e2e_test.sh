#!/usr/bin/env bash
# Prometheus metrics end to end with real processes on 127.0.0.1 (OS-chosen
# ports): a coordinator, two workers and a ps shard serve /metrics
# (--metrics_port=0 + --metrics_port_file); `promtool check metrics`
# accepts each daemon's exposition; a real `prometheus` server scrapes all
# four every second while a ring job runs, and its HTTP API shows every
# target up and lockstep_worker_steps_total growing between scrapes.
# Every daemon runs with --http_token_file: /metrics and the status page
# answer 401 without the token and 200 with it, /healthz stays open, and
# Prometheus scrapes with `authorization: {credentials_file: ...}` while a
# second scrape job without it sees the coordinator down with 401.
# SKIPPED (exit 0, loudly) only when Debian's prometheus package is not
# installed; deploy/setup.sh installs it, so CI runs it.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"; PS="$4"
T="${TEST_TMPDIR:-$(mktemp -d)}"
source "$(dirname "$0")/e2e_lib.sh"

if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  echo "################################################################"
  echo "SKIPPED: prometheus/promtool not installed (bash deploy/setup.sh installs Debian's prometheus)"
  echo "################################################################"
  exit 0
fi

# Every daemon's HTTP server asks for this token on every page but /healthz.
printf 'http-%s\n' "$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')" >"$T/http.token"
# GET url -> stdout (python3: no curl dependency), with the token unless
# NOTOKEN=1; fails on a non-200.
get() {
  python3 - "$1" "$T/http.token" "${NOTOKEN:-0}" <<'PY'
import sys, urllib.request
req = urllib.request.Request(sys.argv[1])
if sys.argv[3] != "1":
    req.add_header("Authorization", "Bearer " + open(sys.argv[2]).read().strip())
with urllib.request.urlopen(req, timeout=10) as r:
    assert r.status == 200, r.status
    sys.stdout.write(r.read().decode())
PY
}
# HTTP status of a GET without the token.
status_without_token() {
  python3 - "$1" <<'PY'
import sys, urllib.error, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code, e.headers.get("WWW-Authenticate", ""))
PY
}

write_blobs "$T" 7 240 60

echo "== a bad --http_token_file stops a daemon before it serves"
for d in "$COORD" "$PS --role=ps" "$WORKER --coordinator=127.0.0.1:1"; do
  rc=0; rm -f "$T/bad.port"
  # shellcheck disable=SC2086  # the binary and its own flags
  $d --insecure --listen=127.0.0.1:0 --port_file="$T/bad.port" \
    --metrics_port=-1 --http_token_file="$T/no-such-token" 2>"$T/bad.log" || rc=$?
  [ "$rc" = 2 ] || fail "$d with a missing token file: exit $rc: $(cat "$T/bad.log")"
  grep -q -- "--http_token_file: cannot read $T/no-such-token" "$T/bad.log" \
    || fail "$d: $(cat "$T/bad.log")"
  [ ! -e "$T/bad.port" ] || fail "$d wrote its port file before refusing the token file"
done
echo "coordinator, ps server and worker: exit 2 naming --http_token_file, no port file"

"$COORD" --insecure --listen=127.0.0.1:0 --port_file="$T/coord.port" --metrics_port=0 \
  --metrics_port_file="$T/coord.mport" --http_token_file="$T/http.token" 2>"$T/coord.log" & pids+=($!)
wait_file "$T/coord.port"; wait_file "$T/coord.mport"
C="127.0.0.1:$(cat "$T/coord.port")"
"$PS" --insecure --role=ps --listen=127.0.0.1:0 --port_file="$T/ps.port" --metrics_port=0 \
  --metrics_port_file="$T/ps.mport" --http_token_file="$T/http.token" 2>"$T/ps.log" & pids+=($!)
wait_file "$T/ps.mport"
for i in 1 2; do
  "$WORKER" --insecure --coordinator="$C" --data_dir="$T" --port_file="$T/w$i.port" --metrics_port=0 \
    --metrics_port_file="$T/w$i.mport" --http_token_file="$T/http.token" 2>"$T/w$i.log" & pids+=($!)
  wait_file "$T/w$i.mport"
done
cli() { "$CLI" --insecure --coordinator="$C" "$@"; }
for _ in $(seq 200); do [ "$(cli workers | grep -c IDLE)" = 2 ] && break; sleep 0.05; done
[ "$(cli workers | grep -c IDLE)" = 2 ] || fail "workers did not register: $(cli workers)"
targets=()
for d in coord ps w1 w2; do targets+=("127.0.0.1:$(cat "$T/$d.mport")"); done

echo "== /healthz open, every other page needs the token, on every daemon"
for t in "${targets[@]}"; do
  [ "$(NOTOKEN=1 get "http://$t/healthz")" = ok ] || fail "$t/healthz"
  st=$(status_without_token "http://$t/metrics")
  [ "$st" = '401 Basic realm="lockstep", charset="UTF-8"' ] || fail "$t/metrics without the token: $st"
done
st=$(status_without_token "http://${targets[0]}/")
[ "${st%% *}" = 401 ] || fail "the status page without the token: $st"
get "http://${targets[0]}/" | grep -q '<html' || fail "the status page with the token"
echo "/metrics and the status page: 401 without the token, 200 with it; /healthz open"

echo "== promtool check metrics on every daemon"
# A ps job first, so the ps shard and the workers' ps counters are not empty.
out=$(cli submit --workers=2 --sync=ps --ps_shards=1 --model=mlp:8 --dataset='csv:train.csv;test.csv' \
  --batch=20 --steps=12 --lr=0.1 --follow --json) || fail "ps job exit $?: $out"
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert d['state'] == 'SUCCEEDED', d" "$out" \
  || fail "ps job: $out"
for t in "${targets[@]}"; do
  get "http://$t/metrics" >"$T/scrape.txt" || fail "GET $t/metrics"
  [ -s "$T/scrape.txt" ] || fail "$t/metrics is empty"
  promtool check metrics <"$T/scrape.txt" >"$T/promtool.out" 2>&1 \
    || fail "promtool check metrics rejects $t/metrics: $(cat "$T/promtool.out")"
  echo "$t: $(grep -vc '^#' "$T/scrape.txt") samples, promtool ok"
done
w1m=$(get "http://${targets[2]}/metrics")
grep -q '^lockstep_worker_steps_total 12$' <<<"$w1m" || fail "worker 1 steps after the ps job: $w1m"
grep -q '^lockstep_transport_sent_bytes_total{transport="ps"} [1-9]' <<<"$w1m" || fail "no ps bytes: $w1m"
grep -q '^lockstep_worker_step_compute_seconds_count 12$' <<<"$w1m" || fail "compute histogram: $w1m"
psm=$(get "http://${targets[1]}/metrics")
# Workers turn IDLE on their next heartbeat after ReportDone: poll for it.
for _ in $(seq 100); do
  cm=$(get "http://${targets[0]}/metrics")
  grep -q '^lockstep_workers{state="IDLE"} 2$' <<<"$cm" && break
  sleep 0.1
done
# The job ran on the coordinator's own shard (no --ps_addresses): (12 steps
# + the dataset-shape agreement round before step 0) x 2 workers.
grep -q '^lockstep_ps_pushes_total 26$' <<<"$cm" || fail "coordinator shard pushes: $cm"
grep -q '^lockstep_jobs{state="SUCCEEDED"} 1$' <<<"$cm" || fail "jobs by state: $cm"
grep -q '^lockstep_steps_total 12$' <<<"$cm" || fail "coordinator steps: $cm"
grep -q '^lockstep_hash_checks_total 12$' <<<"$cm" || fail "hash checks: $cm"
grep -q '^lockstep_workers{state="IDLE"} 2$' <<<"$cm" || fail "workers by state: $cm"
grep -q '^lockstep_ps_pushes_total 0$' <<<"$psm" || fail "the standalone shard was not used: $psm"

echo "== a real prometheus scrapes all four every second"
PP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
{
  echo "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}"
  echo "scrape_configs:"
  echo "  - job_name: lockstep"
  echo "    authorization: {credentials_file: $T/http.token}"
  echo "    static_configs:"
  echo "      - targets: [$(IFS=,; echo "${targets[*]}" | sed 's/,/, /g')]"
  # The same coordinator without the token: Prometheus must see it down (401).
  echo "  - job_name: lockstep_notoken"
  echo "    static_configs:"
  echo "      - targets: [${targets[0]}]"
} >"$T/prometheus.yml"
promtool check config "$T/prometheus.yml" >"$T/promtool_config.out" 2>&1 \
  || fail "config: $(cat "$T/promtool_config.out")"
prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/tsdb" \
  --web.listen-address="127.0.0.1:$PP" 2>"$T/prometheus.log" & pids+=($!)
P="http://127.0.0.1:$PP"
for _ in $(seq 300); do get "$P/-/ready" >/dev/null 2>&1 && break; sleep 0.1; done
get "$P/-/ready" >/dev/null 2>&1 || fail "prometheus not ready"

# A long ring job; cancelled once the counter has grown.
jid=$(cli submit --workers=2 --model=mlp:8 --dataset='csv:train.csv;test.csv' --batch=20 \
  --steps=1000000 --lr=0.01) || fail "submit: $jid"
# Poll Prometheus' query API (bounded): every target up, and the two
# workers' summed step counter seen at two scrape values, the later larger.
python3 - "$P" "${#targets[@]}" <<'PY' || fail "prometheus did not see the steps grow"
import json, sys, time, urllib.parse, urllib.request
base, want_up = sys.argv[1], int(sys.argv[2])
def query(q):
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=5) as r:
        d = json.load(r)
    assert d["status"] == "success", d
    return d["data"]["result"]
def targets():
    with urllib.request.urlopen(base + "/api/v1/targets", timeout=5) as r:
        return json.load(r)["data"]["activeTargets"]
def notoken_refused():
    n = [x for x in targets() if x["labels"]["job"] == "lockstep_notoken"]
    return len(n) == 1 and n[0]["health"] == "down" and "401" in n[0].get("lastError", "")
deadline = time.time() + 60
first = None
ok_up = ok_steps = refused = False
while time.time() < deadline and not (ok_up and ok_steps and refused):
    refused = refused or notoken_refused()
    up = query('up{job="lockstep"}')
    ok_up = len(up) == want_up and all(r["value"][1] == "1" for r in up)
    steps = query('sum(lockstep_worker_steps_total{job="lockstep"})')
    if steps:
        v = float(steps[0]["value"][1])
        # 12 steps of the ps job per worker came before this job.
        if first is None and v > 24:
            first = v
        elif first is not None and v > first:
            print(f"lockstep_worker_steps_total (both workers) {first:.0f} -> {v:.0f}")
            ok_steps = True
    time.sleep(0.2)
print("targets up:", ok_up, "| steps grew:", ok_steps)
everything = targets()
for x in everything:
    print(" ", x["labels"]["job"], x["scrapeUrl"], x["health"], x.get("lastError", ""))
t = [x for x in everything if x["labels"]["job"] == "lockstep"]
print("scraped without the token: down with 401:", refused)
running = query('lockstep_jobs{state="RUNNING"}')
print("lockstep_jobs{state=RUNNING}:", [r["value"][1] for r in running])
sys.exit(0 if ok_up and ok_steps and refused and len(t) == want_up and
         all(x["health"] == "up" for x in t) else 1)
PY
cli cancel "$jid" >/dev/null || fail "cancel"
echo "PASS"
