"""cluster_sh_test: an end-to-end sh_test of a cluster's real binaries."""

# A cluster's binaries, passed to every end-to-end test in this order as
# COORD WORKER CLI; the test's own `args` follow.
CLUSTER = [
    "//server:lockstep-coordinator",
    "//worker:lockstep-worker",
    "//client:lockstep",
]

def cluster_sh_test(
        name,
        src,
        args = [],
        data = [],
        libs = ["e2e_lib.sh"],
        size = "medium",
        tags = []):
    """An sh_test of `src` run as `src COORD WORKER CLI args...`.

    Args:
      name: the test's name.
      src: the shell script (several tests may share one, told apart by args).
      args: what follows COORD WORKER CLI ("$(location ...)" expands).
      data: more runfiles than the cluster and `libs`.
      libs: the helpers the script sources (e2e_lib.sh, netns_lib.sh).
      size: the test size.
      tags: e.g. "exclusive" for a test that measures a time bound,
        "no-sandbox" for one that makes network namespaces.
    """
    native.sh_test(
        name = name,
        size = size,
        tags = tags,
        srcs = [src],
        args = ["$(location %s)" % b for b in CLUSTER] + args,
        data = CLUSTER + libs + data,
    )
