#!/usr/bin/env bash
# Issue 10, a worker cut off from the network (policy fail, the default;
# shrink and wait in cases G, H, I at the end):
# four network namespaces on a bridge (10.x addresses, no DNS): a
# coordinator in the first, three workers in the others. A K=3 job runs;
# then one worker's host is cut off, and the test asserts, with deadlines
# and no sleeps to synchronise:
#   * the job is FAILED within BOUND_S (5 s) of the cut, its reason naming
#     the cut-off worker, its rank, its host and its address;
#   * the two other workers are IDLE again within the same bound;
#   * once the network is back, the cut-off worker is IDLE again by itself
#     (it stopped its job when its heartbeats went unanswered).
# Two ways to cut: A. the worker's link taken down (ip link set down; ring
# over raw TCP), B. every packet of its link dropped by nftables, in both
# directions, the link staying up (ring over gRPC, then ps over raw TCP).
# D. only the traffic between two workers dropped (both still reach the
# coordinator): the job FAILED within the bound naming every rank's wait.
# E. only the ps data plane of the coordinator's own shard dropped (the
# workers' heartbeats still reach it): the ps job FAILED within the bound
# naming the shard every rank waits for.
# F. as D for a job with --stall_timeout_ms=8000: FAILED
# no sooner than 8 s after the cut (not at lost_after), within 8 s + bound.
# G. as D under --on_worker_lost=shrink: rank 1 is dropped within the bound
# and the job trains on as K = 1.
# H, I. A host cut off (link down; nft drop) under shrink and under wait:
# the job regroups within REGROUP_S (6 s, as tests/shrink_test) and trains on.
# J. Only the link between w-1 and w-2 cut in a K = 3 ring under shrink: the
# waits form a cycle, a reachability probe finds the link, w-2 is dropped
# within 8 s and the job trains on with w-1 and w-3.
# K. Only w-3's route to the coordinator's ps data port cut in a K = 3 ps
# job under shrink: a probe of the shards finds it, w-3 is dropped within
# 8 s and the job trains on with w-1 and w-2.
# L. w-1 cut off from both other workers in a K = 2 ring under shrink with
# w-3 idle: w-3, probed as a witness, tells that w-1 is the one cut off; it
# is dropped within 8 s and the job trains on with w-2.
# Needs root (ip netns, nft); says SKIPPED loudly otherwise.
set -uo pipefail
COORD="$1"; WORKER="$2"; CLI="$3"
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "SKIPPED: partition_test needs root and iproute2 to create network namespaces"
  exit 0
fi
command -v nft >/dev/null || { echo "FAIL: nft not found (deploy/setup.sh installs nftables)"; exit 1; }
T="${TEST_TMPDIR:-$(mktemp -d)}"
BOUND_S=5
NET="10.79.$(( $$ % 250 + 1 ))"
TAG="lsp$$"
source "$(dirname "$0")/netns_lib.sh"
fail() { echo "FAIL: $*"; for f in "$T"/*.log; do echo "== $f"; tail -12 "$f"; done; exit 1; }
netns_up "$NET" "$TAG" 4
C="$NET.1:7070"
cli() { on 1 "$CLI" --insecure --coordinator="$C" "$@"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
now_ms() { date +%s%3N; }
wait_until() {  # DEADLINE_MS CMD...: polls CMD until it succeeds or the deadline
  local deadline=$1; shift
  while [ "$(now_ms)" -lt "$deadline" ]; do "$@" && return 0; sleep 0.05; done
  "$@"
}
is_failed() { cli status "$1" --json | grep -q '"state":"FAILED"'; }
idle() {  # WORKER_ID...: every one of them IDLE
  local list; list=$(cli workers) || return 1
  for w in "$@"; do grep -Eq "^$w +.* IDLE " <<<"$list" || return 1; done
}
stepped() { [ "$(cli status "$1" --json | json "int(d.get('step', 0))")" -ge "$2" ]; }

on 1 "$COORD" --insecure --listen=0.0.0.0:7070 --ps_data_port=7073 2>"$T/coord.log" &
for _ in $(seq 200); do cli workers >/dev/null 2>&1 && break; sleep 0.05; done
# Worker w-N runs in namespace N+1 at $NET.(N+1) (started one at a time, so
# registration order gives the ids).
for i in 2 3 4; do
  on "$i" "$WORKER" --insecure --coordinator="$C" --listen=0.0.0.0:7071 --data_port=7072 2>"$T/w$((i - 1)).log" &
  wait_until $(( $(now_ms) + 20000 )) idle "w-$((i - 1))" || fail "worker in namespace $i did not register"
done

# cut_host HOW NS: cuts namespace NS's host off: "link" (its link down) or
# "nft" (every packet on its link dropped, both ways); heal_host undoes it.
cut_host() {
  if [ "$1" = link ]; then
    on "$2" ip link set "${TAG}p$2" down
  else
    on "$2" nft -f - <<NFT
table inet lockstep_cut {
  chain in { type filter hook input priority 0; policy accept; iifname "${TAG}p$2" drop; }
  chain out { type filter hook output priority 0; policy accept; oifname "${TAG}p$2" drop; }
}
NFT
  fi
}
heal_host() {
  if [ "$1" = link ]; then
    on "$2" ip link set "${TAG}p$2" up
  else
    on "$2" nft delete table inet lockstep_cut
  fi
}

# cut_case NAME HOW VICTIM(w-N) RANK SURVIVORS -- SUBMIT FLAGS...
# HOW: "link" (link down) or "nft" (drop every packet on the link).
cut_case() {
  local name=$1 how=$2 vid=$3 rank=$4 survivors=$5; shift 6
  local i=$(( ${vid#w-} + 1 ))  # its namespace
  echo "== $name: $how cut on $vid (rank $rank, $NET.$i)"
  local job; job=$(cli submit --model=softmax --batch=48 --steps=1000000 "$@") || fail "$name: submit: $job"
  wait_until $(( $(now_ms) + 30000 )) stepped "$job" 20 || fail "$name: job $job made no progress: $(cli status "$job")"
  cut_host "$how" "$i" || fail "$name: $how cut"
  local t0; t0=$(now_ms)
  wait_until $(( t0 + BOUND_S * 1000 )) is_failed "$job" || fail "$name: job $job not FAILED within ${BOUND_S}s: $(cli status "$job")"
  local t1; t1=$(now_ms)
  # shellcheck disable=SC2086
  wait_until $(( t0 + BOUND_S * 1000 )) idle $survivors || fail "$name: $survivors not IDLE within ${BOUND_S}s: $(cli workers)"
  local t2; t2=$(now_ms)
  local reason; reason=$(cli status "$job" --json | json "d['reason']")
  case "$reason" in
    "worker $vid (rank $rank, host $(hostname), $NET.$i:7071) lost: no heartbeat for "*) ;;
    *) fail "$name: reason does not name $vid, rank $rank, host $(hostname) and $NET.$i:7071: $reason" ;;
  esac
  awk -v n="$name" -v j="$job" -v v="$survivors" -v r="$reason" -v a="$((t1 - t0))" -v b="$((t2 - t0))" \
    'BEGIN { printf "%s: job %s FAILED %.2f s after the cut, survivors (%s) idle after %.2f s; reason: %s\n", n, j, a / 1000, v, b / 1000, r }'
  # The cut-off worker stops its job by itself once its heartbeats go
  # unanswered for lost_after (3 s): wait for that before healing, or a
  # heartbeat in flight at the heal is answered and the coordinator's
  # verdict reaches it first (bound: lost_after + one heartbeat deadline
  # (up to 5 s) + an interval).
  local wlog="$T/w${vid#w-}.log"
  wait_until $(( t0 + 10000 )) grep -q "this worker is lost to its job, stopping it" "$wlog" \
    || fail "$name: $vid did not stop its job within 10 s of the cut"
  local t3; t3=$(now_ms)
  awk -v n="$name" -v v="$vid" -v c="$((t3 - t0))" \
    'BEGIN { printf "%s: %s stopped its own job %.2f s after the cut\n", n, v, c / 1000 }'
  # Heal; the cut-off worker comes back by itself.
  heal_host "$how" "$i"
  wait_until $(( $(now_ms) + 15000 )) idle "$vid" || fail "$name: $vid not IDLE after the network came back: $(cli workers)"
}

cut_case "A link down, ring/tcp" link w-3 2 "w-1 w-2" -- --workers=3 --sync=ring --peer_transport=tcp
cut_case "B nft drop, ring/grpc" nft w-2 1 "w-1 w-3" -- --workers=3 --sync=ring --peer_transport=grpc
cut_case "C nft drop, ps/tcp" nft w-1 0 "w-2 w-3" -- --workers=3 --sync=ps --ps_transport=tcp

# stuck_case NAME NS TABLE RULES REASON_GLOB WAITS -- SUBMIT FLAGS...: a K=2
# job steps, then nft table TABLE with RULES goes into namespace NS; the job
# must be FAILED within the bound with a reason matching REASON_GLOB, its two
# workers IDLE within the same bound, and `lockstep status` must show rank
# 0's wait as WAITS ("rank 0 waits for rank 1: 3.1 s at its last
# heartbeat"); the table is removed after. With STALL_MS set (the job's
# --stall_timeout_ms) the job must stay RUNNING until STALL_MS after the
# cut and be FAILED within STALL_MS + BOUND_S.
stuck_case() {
  local name=$1 ns=$2 table=$3 rules=$4 glob=$5 waits=$6; shift 7
  local job ranks t0 t1 t2 reason bound_ms=$(( ${STALL_MS:-0} + BOUND_S * 1000 ))
  job=$(cli submit --model=softmax --batch=48 --steps=1000000 --workers=2 "$@") || fail "$name: submit: $job"
  wait_until $(( $(now_ms) + 30000 )) stepped "$job" 20 || fail "$name: job $job made no progress: $(cli status "$job")"
  ranks=$(cli status "$job" --json | json "' '.join(r['worker_id'] for r in d['ranks'])")
  [ "$ranks" = "w-1 w-2" ] || fail "$name: expected ranks w-1 w-2, got $ranks"
  printf 'table inet %s {\n%s\n}\n' "$table" "$rules" | on "$ns" nft -f - || fail "$name: nft"
  t0=$(now_ms)
  wait_until $(( t0 + bound_ms )) is_failed "$job" || fail "$name: job $job not FAILED within ${bound_ms} ms: $(cli status "$job")"
  t1=$(now_ms)
  # A wait counts from the last bytes moved, a little before t0: 1 s of
  # slack still tells the stall bound from lost_after (3 s).
  [ $(( t1 - t0 )) -ge $(( ${STALL_MS:-0} - 1000 )) ] \
    || fail "$name: job $job FAILED $(( t1 - t0 )) ms after the cut, before its stall timeout ${STALL_MS} ms"
  wait_until $(( t0 + bound_ms )) idle w-1 w-2 || fail "$name: w-1, w-2 not IDLE within ${bound_ms} ms: $(cli workers)"
  t2=$(now_ms)
  reason=$(cli status "$job" --json | json "d['reason']")
  # shellcheck disable=SC2254
  case "$reason" in
    $glob) ;;
    *) fail "$name: reason does not name every rank's wait: $reason" ;;
  esac
  local status; status=$(cli status "$job") || fail "$name: status: $status"
  grep -q "^  rank 0 waits for $waits: [0-9.]* s at its last heartbeat$" <<<"$status" \
    || fail "$name: status does not show rank 0 waiting for $waits: $status"
  awk -v n="$name" -v j="$job" -v r="$reason" -v a="$((t1 - t0))" -v b="$((t2 - t0))" \
    'BEGIN { printf "%s: job %s FAILED %.2f s after the cut, both workers idle after %.2f s; reason: %s\n", n, j, a / 1000, b / 1000, r }'
  on "$ns" nft delete table inet "$table"
}

# D. Two workers that cannot reach each other while both reach the
# coordinator (nft drops only the traffic between their addresses): no
# worker is lost, every rank's combine waits for its peer, and the
# coordinator fails the job within the bound naming the waits (without
# this it took the 30 s combine timeout). Both workers are IDLE again
# within the bound; the rules are removed afterwards.
echo "== D peer link cut between w-1 and w-2 (both reach the coordinator), ring/tcp"
stuck_case D 2 lockstep_peer_cut "  chain in { type filter hook input priority 0; policy accept; ip saddr $NET.3 drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr $NET.3 drop; }" \
  "every rank waits for a peer while every worker heartbeats: a link between workers is down (rank 0 (w-1, host *) for rank 1 (w-2, host *; rank 1 (w-2, host *) for rank 0 (w-1, host *) *" \
  "rank 1" -- --sync=ring --peer_transport=tcp

# E. The coordinator's ps shard out of the workers' reach while its gRPC
# port is not (nft in the coordinator's namespace drops its raw-TCP ps data
# port only): every rank's push or pull waits for shard 0, no worker is
# lost, and the job is FAILED within the bound naming the shard (it took
# the 30 s combine timeout before).
echo "== E ps data plane cut (the workers still reach the coordinator's gRPC port), ps/tcp"
stuck_case E 1 lockstep_ps_cut "  chain in { type filter hook input priority 0; policy accept; tcp dport 7073 drop; }
  chain out { type filter hook output priority 0; policy accept; tcp sport 7073 drop; }" \
  "every rank waits for a parameter-server shard while every worker heartbeats: a shard is out of the workers' reach or stuck (rank 0 (w-1, host *) for shard 0 (*) *; rank 1 (w-2, host *) for shard 0 (*) *" \
  "ps shard 0" -- --sync=ps --ps_transport=tcp

# F. As D, for a job with its own --stall_timeout_ms (8 s, above the
# coordinator's lost_after of 3 s): FAILED no sooner than 8 s after the cut
# and within 8 s + the bound, naming waits of 8 s or more. (Over the gRPC
# ring, gRPC's keepalive broke the streams about 6 s after such a cut and
# the workers reported that after their grace, FAILED about 10 s after the
# cut: 2026-12-04.)
echo "== F peer link cut, ring/tcp, the job's own --stall_timeout_ms=8000"
STALL_MS=8000 stuck_case F 2 lockstep_peer_cut "  chain in { type filter hook input priority 0; policy accept; ip saddr $NET.3 drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr $NET.3 drop; }" \
  "every rank waits for a peer while every worker heartbeats: a link between workers is down (rank 0 (w-1, host *) for rank 1 (w-2, host *) [89].*s; rank 1 (w-2, host *) for rank 0 (w-1, host *) [89].*s)" \
  "rank 1" -- --sync=ring --peer_transport=tcp --stall_timeout_ms=8000

# start_and_cut NAME RANKS NS TABLE RULES -- SUBMIT FLAGS...: submits a job,
# waits for 20 steps and its ranks RANKS, then loads nft table TABLE with
# RULES in namespace NS. Sets job and t0 (the cut).
start_and_cut() {
  local name=$1 want=$2 ns=$3 table=$4 rules=$5; shift 6
  job=$(cli submit --model=softmax --batch=48 --steps=1000000 "$@") || fail "$name: submit: $job"
  wait_until $(( $(now_ms) + 30000 )) stepped "$job" 20 || fail "$name: job $job made no progress: $(cli status "$job")"
  local ranks; ranks=$(cli status "$job" --json | json "' '.join(r['worker_id'] for r in d['ranks'])")
  [ "$ranks" = "$want" ] || fail "$name: expected ranks $want, got $ranks"
  printf 'table inet %s {\n%s\n}\n' "$table" "$rules" | on "$ns" nft -f - || fail "$name: nft"
  t0=$(now_ms)
}
# A stuck job under shrink or wait that a reachability probe decides
# regroups within this: lost_after (3 s) + the probe (at most 1 s + 3
# heartbeats + 1 s).
PROBE_BOUND_S=8
# The traffic between w-1 and w-2 only, in w-1's namespace.
PEER_CUT="  chain in { type filter hook input priority 0; policy accept; ip saddr $NET.3 drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr $NET.3 drop; }"

# G. As D for a job under --on_worker_lost=shrink: instead of failing, the
# job drops rank 1 (w-2; with K = 2 no rank stands out; the idle w-3, probed
# as a witness, is reached by both, so rank 0 stays) within PROBE_BOUND_S
# and trains on without it (w-1 rank 0, steps still
# advancing; the idle w-3 may join it as a late worker); w-2 is IDLE again
# within the bound (alive, not lost) and is never given the job back; the
# shrink event names the drop.
echo "== G peer link cut between w-1 and w-2, ring/tcp, --on_worker_lost=shrink"
start_and_cut G "w-1 w-2" 2 lockstep_peer_cut "$PEER_CUT" -- --workers=2 --sync=ring \
  --peer_transport=tcp --on_worker_lost=shrink
shrunk_to_w1() {  # regrouped without w-2, w-1 rank 0 (w-3, idle, may join as a late worker)
  cli status "$1" --json | json "d['state'] == 'RUNNING' and int(d.get('generation', 0)) >= 1 and not d.get('regrouping') and [r['worker_id'] for r in d['ranks']][:1] == ['w-1'] and 'w-2' not in [r['worker_id'] for r in d['ranks']]" | grep -q True
}
wait_until $(( t0 + PROBE_BOUND_S * 1000 )) shrunk_to_w1 "$job" || fail "G: job $job not regrouped without w-2 within ${PROBE_BOUND_S}s: $(cli status "$job")"
t1=$(now_ms)
wait_until $(( t0 + PROBE_BOUND_S * 1000 )) idle w-2 || fail "G: w-2 not IDLE within ${PROBE_BOUND_S}s: $(cli workers)"
t2=$(now_ms)
at=$(cli status "$job" --json | json "int(d.get('step', 0))")
wait_until $(( $(now_ms) + 20000 )) stepped "$job" $(( at + 50 )) || fail "G: job $job did not go on after the shrink: $(cli status "$job")"
event=$(cli status "$job" --json | json "d['membership_events'][0]['kind'] + ': ' + d['membership_events'][0]['reason']")
case "$event" in
  "shrink: rank 1 (w-2, host "*") dropped: its peers cannot reach it (every rank waits for a peer while every worker heartbeats"*) ;;
  *) fail "G: the shrink event does not name the drop: $event" ;;
esac
idle w-2 || fail "G: w-2 was given a job again: $(cli workers)"
awk -v j="$job" -v a="$((t1 - t0))" -v b="$((t2 - t0))" -v e="$event" \
  'BEGIN { printf "G: job %s regrouped without w-2 %.2f s after the cut and trains on, w-2 idle after %.2f s; %s\n", j, a / 1000, b / 1000, e }'
cli cancel "$job" >/dev/null || fail "G: cancel $job"
on 2 nft delete table inet lockstep_peer_cut

# J. Only the link between w-1 and w-2 cut in a K = 3 ring under shrink
# (both still reach w-3 and the coordinator): the ring's waits form a cycle
# (rank 1 waits for rank 0, rank 2 for rank 1, rank 0 for rank 2), so no
# rank stands out. The coordinator asks the ranks which peers' data ports
# accept a connection and keeps the largest group that reach each other:
# {w-1, w-3} and {w-2, w-3} tie, rank 0 stays, so w-2 is dropped within
# PROBE_BOUND_S (lost_after 3 s + the probe, at most 1 s + 3 heartbeats +
# 1 s) and the job trains on as K = 2. (Before, it was FAILED.) The ring
# algorithm is forced: this small model's automatic choice is the direct
# exchange, whose waits name a rank without a probe.
regrouped_to() {  # JOB RANKS: running, regrouped (generation >= 1), ranks RANKS
  cli status "$1" --json | json "d['state'] == 'RUNNING' and int(d.get('generation', 0)) >= 1 and not d.get('regrouping') and ' '.join(r['worker_id'] for r in d['ranks']) == '$2'" | grep -q True
}
# probe_case NAME RANKS NS TABLE RULES KEPT DROPPED EVENT -- SUBMIT FLAGS...:
# every worker idle, a job on RANKS is cut as start_and_cut does; within
# PROBE_BOUND_S it has regrouped onto KEPT and DROPPED is IDLE; it trains on
# (50 steps); its first membership event is EVENT exactly; then it is
# cancelled and the table removed.
probe_case() {
  local name=$1 want=$2 ns=$3 table=$4 rules=$5 kept=$6 dropped=$7 expect=$8; shift 9
  wait_until $(( $(now_ms) + 15000 )) idle w-1 w-2 w-3 || fail "$name: workers not idle: $(cli workers)"
  start_and_cut "$name" "$want" "$ns" "$table" "$rules" -- "$@"
  wait_until $(( t0 + PROBE_BOUND_S * 1000 )) regrouped_to "$job" "$kept" \
    || fail "$name: job $job not regrouped onto $kept within ${PROBE_BOUND_S}s: $(cli status "$job")"
  local t1; t1=$(now_ms)
  wait_until $(( t0 + PROBE_BOUND_S * 1000 )) idle "$dropped" || fail "$name: $dropped not IDLE within ${PROBE_BOUND_S}s: $(cli workers)"
  local at; at=$(cli status "$job" --json | json "int(d.get('step', 0))")
  wait_until $(( $(now_ms) + 20000 )) stepped "$job" $(( at + 50 )) || fail "$name: job $job did not go on after the shrink: $(cli status "$job")"
  local event; event=$(cli status "$job" --json | json "d['membership_events'][0]['kind'] + ': ' + d['membership_events'][0]['reason']")
  # shellcheck disable=SC2254
  case "$event" in
    $expect) ;;
    *) fail "$name: the shrink event does not name the drop and the probe: $event" ;;
  esac
  awk -v n="$name" -v j="$job" -v k="$kept" -v a="$((t1 - t0))" -v e="$event" \
    'BEGIN { printf "%s: job %s regrouped onto %s %.2f s after the cut and trains on; %s\n", n, j, k, a / 1000, e }'
  cli cancel "$job" >/dev/null || fail "$name: cancel $job"
  on "$ns" nft delete table inet "$table"
}
echo "== J link cut between w-1 and w-2 in a K = 3 ring (both reach w-3), ring/tcp, shrink"
probe_case J "w-1 w-2 w-3" 2 lockstep_peer_cut "$PEER_CUT" "w-1 w-3" w-2 \
  "shrink: rank 1 (w-2, host *) dropped: its peers cannot reach it (every rank waits for a peer while every worker heartbeats*; a reachability probe found: rank 0 reached 2; rank 1 reached 2; rank 2 reached 0, 1)" \
  -- --workers=3 --sync=ring --peer_transport=tcp --ring_algorithm=ring --on_worker_lost=shrink
grep -q "job stuck, probing which ranks reach which" "$T/coord.log" || fail "J: the coordinator did not log the probe"

# K. A ps job (K = 3, ps/tcp, the coordinator's shard) under shrink whose
# rank 2 (w-3) can no longer reach the shard's data port while every worker
# still reaches the coordinator's gRPC port: every rank waits for shard 0
# (the shard waits for w-3's push). A probe of the shards, as each worker
# dials them, finds w-3 cut off from shard 0 and w-1, w-2 not: w-3 is
# dropped within PROBE_BOUND_S and the job trains on as K = 2. (Before, the
# job was FAILED whatever its policy.)
echo "== K ps data port cut for w-3 only, ps/tcp, shrink"
probe_case K "w-1 w-2 w-3" 4 lockstep_ps_cut "  chain in { type filter hook input priority 0; policy accept; ip saddr $NET.1 tcp sport 7073 drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr $NET.1 tcp dport 7073 drop; }" "w-1 w-2" w-3 \
  "shrink: rank 2 (w-3, host *) dropped: it cannot reach a parameter-server shard (every rank waits for a parameter-server shard*; a reachability probe found: rank 0 reached shard 0; rank 1 reached shard 0; rank 2 reached none)" \
  -- --workers=3 --sync=ps --ps_transport=tcp --on_worker_lost=shrink

# L. A K = 2 ring under shrink with w-3 idle: w-1 (rank 0) is cut off from
# both other workers but still reaches the coordinator. Each rank waits for
# the other, so the waits cannot tell which is cut off; the idle w-3 is
# probed as a witness: w-2 reaches it, w-1 does not, so w-1 is dropped
# (before, rank 1 always was) within PROBE_BOUND_S, and the job trains on
# with w-2 at rank 0 (w-3 may then join it as a late worker).
echo "== L w-1 cut off from both other workers, K = 2 ring/tcp with w-3 idle, shrink"
wait_until $(( $(now_ms) + 15000 )) idle w-1 w-2 w-3 || fail "L: workers not idle: $(cli workers)"
start_and_cut L "w-1 w-2" 2 lockstep_peer_cut "  chain in { type filter hook input priority 0; policy accept; ip saddr { $NET.3, $NET.4 } drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr { $NET.3, $NET.4 } drop; }" \
  -- --workers=2 --sync=ring --peer_transport=tcp --on_worker_lost=shrink
kept_w2() {  # regrouped without w-1, w-2 rank 0
  cli status "$1" --json | json "d['state'] == 'RUNNING' and int(d.get('generation', 0)) >= 1 and not d.get('regrouping') and [r['worker_id'] for r in d['ranks']][:1] == ['w-2'] and 'w-1' not in [r['worker_id'] for r in d['ranks']]" | grep -q True
}
wait_until $(( t0 + PROBE_BOUND_S * 1000 )) kept_w2 "$job" || fail "L: job $job not regrouped onto w-2 within ${PROBE_BOUND_S}s: $(cli status "$job")"
t1=$(now_ms)
at=$(cli status "$job" --json | json "int(d.get('step', 0))")
wait_until $(( $(now_ms) + 20000 )) stepped "$job" $(( at + 50 )) || fail "L: job $job did not go on after the shrink: $(cli status "$job")"
event=$(cli status "$job" --json | json "d['membership_events'][0]['kind'] + ': ' + d['membership_events'][0]['reason']")
case "$event" in
  "shrink: rank 0 (w-1, host "*") dropped: its peers cannot reach it (every rank waits for a peer while every worker heartbeats"*"; a reachability probe found: rank 0 reached none and 0 of 1 idle workers; rank 1 reached none and 1 of 1 idle workers)") ;;
  *) fail "L: the shrink event does not name w-1 and the witness: $event" ;;
esac
awk -v j="$job" -v a="$((t1 - t0))" -v e="$event" \
  'BEGIN { printf "L: job %s regrouped onto w-2 %.2f s after the cut and trains on; %s\n", j, a / 1000, e }'
cli cancel "$job" >/dev/null || fail "L: cancel $job"
on 2 nft delete table inet lockstep_peer_cut

# policy_case NAME HOW VICTIM(w-N) KIND RANKS -- SUBMIT FLAGS...: a job under
# --on_worker_lost=shrink or wait steps; VICTIM's host is cut off (HOW as in
# cut_case); within REGROUP_S the job has regrouped (not regrouping, its
# first membership event KIND naming VICTIM lost) onto RANKS and trains on
# (50 more steps); it is cancelled and the network healed, VICTIM IDLE again.
REGROUP_S=6
policy_case() {
  local name=$1 how=$2 vid=$3 kind=$4 want=$5; shift 6
  local i=$(( ${vid#w-} + 1 ))
  echo "== $name: $how cut on $vid ($NET.$i)"
  # Every worker idle first (the previous case's may still be stopping), so
  # the job lands where the case says.
  wait_until $(( $(now_ms) + 15000 )) idle w-1 w-2 w-3 || fail "$name: workers not idle: $(cli workers)"
  local job; job=$(cli submit --model=softmax --batch=48 --steps=1000000 "$@") || fail "$name: submit: $job"
  wait_until $(( $(now_ms) + 30000 )) stepped "$job" 20 || fail "$name: job $job made no progress: $(cli status "$job")"
  cli status "$job" --json | json "'$vid' in [r['worker_id'] for r in d['ranks']]" | grep -q True \
    || fail "$name: $vid is not a rank of job $job: $(cli status "$job")"
  cut_host "$how" "$i" || fail "$name: $how cut"
  local t0; t0=$(now_ms)
  regrouped_onto() {
    cli status "$1" --json | json "d['state'] == 'RUNNING' and not d.get('regrouping') and ' '.join(r['worker_id'] for r in d['ranks']) == '$want' and d['membership_events'][0]['kind'] == '$kind' and d['membership_events'][0]['worker_id'] == '$vid'" | grep -q True
  }
  wait_until $(( t0 + REGROUP_S * 1000 )) regrouped_onto "$job" \
    || fail "$name: job $job not regrouped onto $want within ${REGROUP_S}s: $(cli status "$job")"
  local t1; t1=$(now_ms)
  local at; at=$(cli status "$job" --json | json "int(d.get('step', 0))")
  wait_until $(( $(now_ms) + 20000 )) stepped "$job" $(( at + 50 )) \
    || fail "$name: job $job did not train on after the regroup: $(cli status "$job")"
  local reason; reason=$(cli status "$job" --json | json "d['membership_events'][0]['reason']")
  case "$reason" in
    "worker $vid (rank "*", host $(hostname), $NET.$i:7071) lost: no heartbeat for "*) ;;
    *) fail "$name: the $kind event does not name $vid lost: $reason" ;;
  esac
  awk -v n="$name" -v j="$job" -v w="$want" -v a="$((t1 - t0))" -v r="$reason" \
    'BEGIN { printf "%s: job %s regrouped onto %s %.2f s after the cut and trains on; %s\n", n, j, w, a / 1000, r }'
  cli cancel "$job" >/dev/null || fail "$name: cancel $job"
  wait_until $(( t0 + 10000 )) grep -q "this worker is lost to its job, stopping it" "$T/w${vid#w-}.log" \
    || fail "$name: $vid did not stop its job within 10 s of the cut"
  heal_host "$how" "$i"
  wait_until $(( $(now_ms) + 15000 )) idle "$vid" || fail "$name: $vid not IDLE after the network came back: $(cli workers)"
}

# H. The link of w-3 down under shrink (K = 3, ring/tcp): w-1 and w-2 go on.
# I. Every packet of w-2 dropped under wait (K = 2, ring/tcp): the idle w-3
# takes rank 1 and the job goes on with K = 2.
policy_case "H link down, shrink" link w-3 shrink "w-1 w-2" -- --workers=3 --sync=ring \
  --peer_transport=tcp --on_worker_lost=shrink
policy_case "I nft drop, wait" nft w-2 wait "w-1 w-3" -- --workers=2 --sync=ring \
  --peer_transport=tcp --on_worker_lost=wait

# The three serve on: a K=3 job succeeds.
out=$(cli submit --workers=3 --model=softmax --batch=48 --steps=20 --follow --json) || fail "job after: exit $?: $out"
[ "$(json "d['state']" <<<"$out")" = SUCCEEDED ] || fail "job after the cuts: $out"
echo PASS
