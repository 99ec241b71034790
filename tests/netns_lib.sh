# Network namespaces on a bridge, for the multi-host tests (source it).
#
#   netns_up PREFIX TAG N   creates a bridge ${TAG}br and N namespaces
#                           ${TAG}n1..${TAG}nN, namespace i at PREFIX.i/24
#                           on veth ${TAG}p$i (host side ${TAG}h$i), lo up.
#                           Calls fail() (the test defines it) on error.
#   on I CMD...             runs CMD in namespace I.
#   netns_cleanup           kills what runs in the namespaces (TERM, then
#                           KILL after 5 s), deletes them and the bridge.
#                           netns_up installs it as the EXIT trap.
# Needs root and iproute2; tests check that first and say SKIPPED.
NETNS_TAG=""
NETNS_LIST=()
netns_cleanup() {
  local n p
  for n in "${NETNS_LIST[@]}"; do
    for p in $(ip netns pids "$n" 2>/dev/null); do kill "$p" 2>/dev/null; done
  done
  for n in "${NETNS_LIST[@]}"; do
    for _ in $(seq 50); do [ -z "$(ip netns pids "$n" 2>/dev/null)" ] && break; sleep 0.1; done
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$n" 2>/dev/null
  done
  [ -n "$NETNS_TAG" ] && ip link del "${NETNS_TAG}br" 2>/dev/null
  return 0
}
netns_up() {
  local prefix=$1 tag=$2 count=$3 i n
  NETNS_TAG=$tag
  trap netns_cleanup EXIT
  ip link add "${tag}br" type bridge || fail "cannot create bridge ${tag}br"
  ip link set "${tag}br" up
  for i in $(seq "$count"); do
    n="${tag}n$i"; NETNS_LIST+=("$n")
    ip netns add "$n" || fail "cannot create namespace $n"
    ip link add "${tag}h$i" type veth peer name "${tag}p$i" || fail "veth $i"
    ip link set "${tag}h$i" master "${tag}br" up
    ip link set "${tag}p$i" netns "$n"
    ip -n "$n" addr add "$prefix.$i/24" dev "${tag}p$i"
    ip -n "$n" link set "${tag}p$i" up
    ip -n "$n" link set lo up
  done
}
on() { local i=$1; shift; ip netns exec "${NETNS_TAG}n$i" "$@"; }
