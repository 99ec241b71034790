#!/usr/bin/env bash
# The coordinator's status page in a real browser: a coordinator (HTTP port
# chosen by the OS) and three workers on 127.0.0.1; job 1 runs on all three
# with one worker started with --fault_perturb_step=3, so it FAILS out of
# sync at step 3; job 2 trains softmax long enough to be RUNNING while
# Debian's chromium (headless) loads the page. The rendered DOM
# (--dump-dom) must show job 2's loss curve (a polyline with >= 2 points),
# its test-accuracy curve, a sync strip of green cells and the per-rank
# table, and job 1's strip a red cell and the divergence reason. The JSON
# endpoints' error paths are checked over HTTP too. Screenshots of both jobs
# are kept as test outputs ($TEST_UNDECLARED_OUTPUTS_DIR/status.png,
# status_failed_job.png). All traffic stays on 127.0.0.1.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
T="${TEST_TMPDIR:-$(mktemp -d)}"
OUT="${TEST_UNDECLARED_OUTPUTS_DIR:-$T}"
mkdir -p "$OUT"
export HOME="$T/home"; mkdir -p "$HOME"   # chromium writes its caches under $HOME
FAIL_TAIL=5
source "$(dirname "$0")/e2e_lib.sh"

CHROMIUM=$(command -v chromium || true)
[ -n "$CHROMIUM" ] || fail "chromium is not installed (bash deploy/setup.sh installs it)"

python3 - "$T" <<'PY'
import random, sys
t = sys.argv[1]
r = random.Random(11)
def write(path, n):
    with open(path, "w") as f:
        for _ in range(n):
            c = r.randrange(3)
            # overlapping classes: test accuracy climbs over epochs, short of 100%
            xs = [(1.0 if j == c else 0.0) + 2.0 * (r.random() - 0.5) for j in range(4)]
            f.write(f"{c}," + ",".join(f"{x:.4f}" for x in xs) + "\n")
write(f"{t}/train.csv", 240)
write(f"{t}/test.csv", 60)
PY
DATA="csv:$T/train.csv;$T/test.csv"

err=$("$COORD" --insecure --listen=127.0.0.1:0 --metrics_port=70000 2>&1); rc=$?
[ "$rc" = 2 ] || fail "--metrics_port=70000: exit $rc, want 2: $err"
grep -q -- '--metrics_port: expected -1 (off), 0 (OS-chosen) or 1..65535, got 70000' <<<"$err" ||
  fail "--metrics_port=70000: $err"

# --lost_after_ms=20000: nothing here is lost on purpose, and under ASan
# with chromium beside the cluster on 2 cores a worker once went 8.4 s
# without a heartbeat (README "Known issues").
"$COORD" --insecure --listen=127.0.0.1:0 --port_file="$T/coord.port" --lost_after_ms=20000 \
  --metrics_port=0 --metrics_port_file="$T/http.port" 2>"$T/coord.log" & pids+=($!)
wait_file "$T/coord.port"
wait_file "$T/http.port"
C="127.0.0.1:$(cat "$T/coord.port")"
URL="http://127.0.0.1:$(cat "$T/http.port")"
cli() { "$CLI" --insecure --coordinator="$C" "$@"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
for i in 1 2 3; do
  fault=(); [ "$i" = 3 ] && fault=(--fault_perturb_step=3)
  "$WORKER" --insecure --coordinator="$C" --port_file="$T/w$i.port" "${fault[@]}" 2>"$T/w$i.log" & pids+=($!)
  wait_file "$T/w$i.port"
  for _ in $(seq 100); do [ "$(cli workers | grep -c IDLE)" = "$i" ] && break; sleep 0.05; done
done

# HTTP GET: prints "STATUS BODY".
get() {
  python3 - "$1" <<'PY'
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
PY
}
# The page rendered by chromium after its scripts ran; "$1" = query string.
browse() {
  local prof; prof=$(mktemp -d "$T/chromium.XXXXXX")
  timeout 45 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --disable-dev-shm-usage --user-data-dir="$prof" --virtual-time-budget=5000 "${@:2}" \
    "$URL/$1" 2>>"$T/chromium.log"
}

echo "== job 1: a replica drifts at step 3 (worker w-3 --fault_perturb_step=3)"
out=$(cli submit --workers=3 --model=softmax --dataset="$DATA" --batch=24 --steps=20 --on_divergence=halt --follow --json)
[ "$(json "d['state']" <<<"$out")" = FAILED ] || fail "drift job: $out"
bad_id=$(json "d['job_id']" <<<"$out")

echo "== job 2: a long softmax job, RUNNING while the browser loads"
id=$(cli submit --workers=2 --model=softmax --dataset="$DATA" --batch=20 --steps=1000000 \
  --eval_each_epoch) || fail "submit"
for _ in $(seq 300); do
  s=$(cli status "$id" --json | json "int(d['step'])"); [ "$s" -gt 30 ] && break; sleep 0.1
done
[ "$s" -gt 30 ] || fail "job $id never got past step 30"

echo "== JSON endpoints and their errors"
r=$(get "$URL/api/job?id=$id"); [ "${r%% *}" = 200 ] || fail "/api/job: $r"
[ "$(json "d['state']" <<<"${r#* }")" = RUNNING ] || fail "/api/job: $r"
r=$(get "$URL/api/job?id=abc"); [ "${r%% *}" = 400 ] || fail "/api/job?id=abc: $r"
grep -q 'id: expected a job id' <<<"$r" || fail "/api/job?id=abc: $r"
r=$(get "$URL/api/curve?id=999"); [ "${r%% *}" = 404 ] || fail "/api/curve?id=999: $r"
grep -q 'job 999 not found' <<<"$r" || fail "/api/curve?id=999: $r"
r=$(get "$URL/api/sync?id=$id&max=5"); [ "${r%% *}" = 200 ] || fail "/api/sync: $r"
[ "$(json "len(d['history']['checks'])" <<<"${r#* }")" = 5 ] || fail "/api/sync max=5: $r"
r=$(get "$URL/api/sync?id=$bad_id&max=5")
[ "$(json "d['strip']['mismatches'][-1]" <<<"${r#* }")" = 1 ] || fail "/api/sync of job $bad_id: $r"
r=$(get "$URL/static/app.js"); [ "${r%% *}" = 200 ] || fail "/static/app.js: ${r:0:200}"

echo "== chromium renders job $id (RUNNING)"
dom=$(browse "?job=$id" --dump-dom) || fail "chromium --dump-dom exit $?: $(tail -5 "$T/chromium.log")"
printf '%s\n' "$dom" > "$OUT/status_running_job.html"
python3 - "$OUT/status_running_job.html" "$id" <<'PY' || fail "running job's DOM (kept in $OUT/status_running_job.html)"
import re, sys
html = open(sys.argv[1]).read()
job = sys.argv[2]
def one(pattern, what):
    m = re.search(pattern, html, re.S)
    assert m, f"no {what}"
    return m
sec = one(r'<section id="job-section"[^>]*data-job="(\d+)"[^>]*data-state="(\w+)"', "job section")
assert sec.group(1) == job and sec.group(2) == "RUNNING", sec.group(0)
loss = one(r'<svg id="loss-curve"[^>]*>(.*?)</svg>', "loss curve")
pl = re.search(r'<polyline[^>]*\spoints="([^"]*)"', loss.group(1))
assert pl, "loss curve has no polyline"
pts = pl.group(1).split()
assert len(pts) >= 2 and all(re.fullmatch(r"[\d.]+,[\d.]+", p) for p in pts), pts[:5]
acc = one(r'<svg id="accuracy-curve"[^>]*>(.*?)</svg>', "accuracy curve")
assert re.search(r'<polyline[^>]*\spoints="[^"]+"', acc.group(1)), "accuracy curve has no polyline"
strip = one(r'<div id="sync-strip"[^>]*>(.*?)</div>', "sync strip").group(1)
ok = len(re.findall(r'class="cell ok"', strip)); bad = len(re.findall(r'class="cell bad"', strip))
assert ok >= 1 and bad == 0, (ok, bad)
ranks = one(r'<table id="ranks">(.*?)</table>', "ranks table").group(1)
assert len(re.findall(r'<tr data-rank=', ranks)) == 2, "ranks table rows"
# The per-rank step breakdown (medians the workers report): every rank has
# a compute median in ms, a number > 0.
compute = re.findall(r'<td class="ms" data-part="compute">([^<]*)</td>', ranks)
assert len(compute) == 2 and all(float(c) > 0 for c in compute), compute
workers = one(r'<table id="workers">(.*?)</table>', "workers table").group(1)
assert len(re.findall(r'<tr data-worker=', workers)) == 3, "workers table rows"
jobs = one(r'<table id="jobs">(.*?)</table>', "jobs table").group(1)
assert f'href="?job={job}"' in jobs, "jobs table has no link to the job"
assert "refreshing every" in html, "no auto-refresh while RUNNING"
print(f"  loss curve: {len(pts)} points; sync strip: {ok} ok cells; 2 ranks, 3 workers")
PY
browse "?job=$id" --screenshot="$OUT/status.png" --window-size=1280,900 >/dev/null ||
  fail "chromium --screenshot exit $?"
[ -s "$OUT/status.png" ] || fail "no screenshot"

echo "== chromium renders job $bad_id (FAILED out of sync)"
dom=$(browse "#job=$bad_id" --dump-dom) || fail "chromium --dump-dom exit $?"
printf '%s\n' "$dom" > "$OUT/status_failed_job.html"
python3 - "$OUT/status_failed_job.html" "$bad_id" <<'PY' || fail "failed job's DOM (kept in $OUT/status_failed_job.html)"
import re, sys
html = open(sys.argv[1]).read()
job = sys.argv[2]
sec = re.search(r'<section id="job-section"[^>]*data-job="(\d+)"[^>]*data-state="(\w+)"', html)
assert sec and sec.group(1) == job and sec.group(2) == "FAILED", sec and sec.group(0)
strip = re.search(r'<div id="sync-strip"[^>]*>(.*?)</div>', html, re.S).group(1)
cells = re.findall(r'class="cell (ok|bad)"[^>]*data-first-step="(\d+)"', strip)
assert [c for c, s in cells] == ["ok", "ok", "ok", "bad"], cells
assert cells[-1][1] == "3", cells
assert "replicas diverged at step 3: rank 2 differs from the majority in block W0" in html, "no divergence reason"
assert re.search(r'<ul id="sync-mismatches"[^>]*><li>step 3: rank\(s\) 2 differ', html), "mismatch list"
assert "auto-refresh stopped" in html, "still refreshing a FAILED job"
print("  sync strip: ok ok ok bad (step 3); reason shown; refresh stopped")
PY
browse "#job=$bad_id" --screenshot="$OUT/status_failed_job.png" --window-size=1280,900 >/dev/null ||
  fail "chromium --screenshot exit $?"

echo "== chromium renders skipped steps, membership events and the step breakdown"
# The same embedded page (fetched from the coordinator) against canned API
# answers with known values, served from 127.0.0.1 by a small python server:
# what the page must print for them is closed-form.
mkdir -p "$T/static"
for f in app.js style.css; do
  r=$(get "$URL/static/$f"); printf '%s' "${r#* }" > "$T/static/$f"
done
r=$(get "$URL/"); printf '%s' "${r#* }" > "$T/static/index.html"
python3 - "$T/static" "$T/canned.port" <<'PY' 2>"$T/canned.log" & pids+=($!)
import http.server, json, os, sys
static, port_file = sys.argv[1], sys.argv[2]
rank = lambda r, compute: {"rank": r, "worker_id": f"w-{r + 1}", "address": f"127.0.0.1:{5000 + r}",
    "hostname": "h", "step": "60", "last_hash": "ab" * 16, "in_sync": True,
    "median_step_seconds": 0.004, "median_compute_seconds": compute,
    "median_communication_seconds": 0.001, "median_exposed_seconds": 0.0005,
    "median_peer_wait_seconds": 0.00025, "resident_bytes": "104857600"}
job = {"job_id": "9", "state": "SUCCEEDED", "reason": "", "step": "60", "total_steps": "60",
    "spec": {"name": "", "model": "softmax", "sync_mode": "RING", "num_workers": 3, "global_batch": "24"},
    "checked_steps": "60", "mismatched_steps": "0",
    "skipped_steps": "2", "last_skipped_step": "5", "last_nonfinite_ranks": [],
    "ranks": [dict(rank(0, 0.0025), waiting_for_peer=2, waiting_s=3.14),
              dict(rank(1, 0.003), waiting_for_shard=1, waiting_s=2.26),
              dict(rank(2, 0.003), waiting_for_peer=1, waiting_s=0.5)],
    "membership_events": [
        {"kind": "shrink", "generation": "1", "world_before": 3, "world_after": 2,
         "worker_id": "w-3", "rank": 2, "step": "42", "unix_s": 1.7e9,
         "reason": "worker w-3 (rank 2) lost: no heartbeat for 3.0s"},
        {"kind": "join", "generation": "2", "world_before": 2, "world_after": 3,
         "worker_id": "w-5", "rank": 2, "step": "50", "unix_s": 1.7e9 + 5, "reason": "w-5 idle"}]}
api = {
    "/api/workers": {"workers": []},
    "/api/jobs": {"total_jobs": 1, "jobs": [job]},
    "/api/job": job,
    "/api/curve": {"job_id": 9, "loss": {"step": [], "loss": [], "window_examples_per_second": []},
                   "eval": {"step": [], "test_accuracy": []}},
    "/api/sync": {"history": {"checks": []},
                  "strip": {"checks_per_cell": 1, "first_step": [], "last_step": [], "checks": [], "mismatches": []}},
}
files = {"/": ("index.html", "text/html"), "/static/app.js": ("app.js", "text/javascript"),
         "/static/style.css": ("style.css", "text/css")}
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = self.path.split("?")[0]
        if path in files:
            name, ctype = files[path]
            body = open(os.path.join(static, name), "rb").read()
        elif path in api:
            ctype, body = "application/json", json.dumps(api[path]).encode()
        else:
            self.send_error(404); return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
PY
wait_file "$T/canned.port"
URL_CANNED="http://127.0.0.1:$(cat "$T/canned.port")"
prof=$(mktemp -d "$T/chromium.XXXXXX")
dom=$(timeout 45 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --disable-dev-shm-usage --user-data-dir="$prof" --virtual-time-budget=5000 --dump-dom \
  "$URL_CANNED/?job=9" 2>>"$T/chromium.log") || fail "chromium --dump-dom (canned) exit $?"
printf '%s\n' "$dom" > "$OUT/status_canned_job.html"
python3 - "$OUT/status_canned_job.html" <<'PY' || fail "canned job's DOM (kept in $OUT/status_canned_job.html)"
import re, sys
html = open(sys.argv[1]).read()
m = re.search(r'<div data-key="skipped steps"><dt>skipped steps</dt><dd[^>]*>([^<]*)</dd>', html)
assert m and m.group(1) == "2 (last at step 5; sum overflowed)", m and m.group(0)
sec = re.search(r'<div id="membership-section"([^>]*)>(.*?)</div>', html, re.S)
assert sec and "hidden" not in sec.group(1), "membership section hidden"
items = re.findall(r'<li data-kind="(\w+)" data-step="(\d+)">(.*?)</li>', sec.group(2), re.S)
assert [(k, s) for k, s, _ in items] == [("shrink", "42"), ("join", "50")], items
text = [re.sub(r"<[^>]+>", "", t) for _, _, t in items]
assert text[0].endswith("shrink: 3 -&gt; 2 workers (generation 1), continued at step 42; "
                        "worker w-3 (rank 2) lost: no heartbeat for 3.0s"), text[0]
assert text[1].endswith("join: w-5 as rank 2, 2 -&gt; 3 workers (generation 2), joined at step 50; "
                        "w-5 idle"), text[1]
ranks = re.search(r'<table id="ranks">(.*?)</table>', html, re.S).group(1)
rows = re.findall(r'<tr data-rank="(\d)">(.*?)</tr>', ranks, re.S)
assert len(rows) == 3, rows
parts = {r: dict(re.findall(r'<td class="ms" data-part="(\w+)">([^<]*)</td>', row)) for r, row in rows}
assert parts["0"] == {"step": "4.000", "compute": "2.500", "exposed": "0.500", "comm": "1.000",
                      "wait": "0.250"}, parts["0"]
assert parts["1"]["compute"] == "3.000", parts["1"]
assert "100 MiB" in rows[0][1], rows[0][1]
# Who waits for whom: rank 2's 0.5 s wait is under the 1 s threshold.
waits = re.search(r'<ul id="rank-waits"([^>]*)>(.*?)</ul>', html, re.S)
assert waits and "hidden" not in waits.group(1), "waits list hidden"
lines = re.findall(r'<li data-rank="(\d)">([^<]*)</li>', waits.group(2))
assert lines == [("0", "rank 0 waits for rank 1: 3.1 s at its last heartbeat"),
                 ("1", "rank 1 waits for ps shard 0: 2.3 s at its last heartbeat")], lines
print("  skipped steps, 2 membership events, the breakdown and who waits for whom rendered as expected")
PY

cli cancel "$id" >/dev/null || fail "cancel"
echo "PASS"
