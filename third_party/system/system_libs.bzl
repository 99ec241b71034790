"""Exposes Debian's system libraries to Bazel via pkg-config (local=True)."""

_LIBS = {
    # name: pkg-config modules (grpc++.pc omits protobuf, so list it too)
    "grpc": ["grpc++", "protobuf"],
    # gRPC server reflection (libgrpc++_reflection from libgrpc++-dev, which
    # ships no .pc file: grpc++'s flags plus _EXTRA_LINKOPTS below).
    "grpc_reflection": ["grpc++", "protobuf"],
    "protobuf": ["protobuf"],
    "absl": [
        "absl_flags",
        "absl_flags_parse",
        "absl_flags_usage",
        "absl_status",
        "absl_statusor",
        "absl_strings",
        "absl_str_format_internal",
        "absl_synchronization",
        "absl_time",
        "absl_hash",
        "absl_raw_hash_set",
    ],
    "openblas": ["openblas"],
    "xxhash": ["libxxhash"],
    "zlib": ["zlib"],
    # SQLite (libsqlite3-dev): the coordinator's --state_dir database.
    "sqlite3": ["sqlite3"],
    # OpenSSL's libcrypto (libssl-dev): data-plane secrets and HMACs
    # (common/net/data_auth.h).
    "libcrypto": ["libcrypto"],
    # OpenSSL's libssl (libssl-dev): --data_plane_tls (common/net/data_conn.h);
    # the same libssl.so.3 that Debian's libgrpc links.
    "libssl": ["libssl", "libcrypto"],
    "gtest": ["gtest", "gmock"],
    "gtest_main": ["gtest_main", "gmock", "gtest"],
}

# Libraries without a pkg-config module of their own, linked before their
# modules' libraries.
_EXTRA_LINKOPTS = {
    "grpc_reflection": ["-lgrpc++_reflection"],
}

def _pkg_config(ctx, what, modules):
    res = ctx.execute(["pkg-config", what] + modules)
    if res.return_code != 0:
        fail("pkg-config %s %s failed (run deploy/setup.sh): %s" % (what, " ".join(modules), res.stderr))
    return [f for f in res.stdout.strip().split(" ") if f]

def _system_libs_impl(ctx):
    lines = ['package(default_visibility = ["//visibility:public"])', ""]
    for name, modules in _LIBS.items():
        libs = _pkg_config(ctx, "--libs", modules)
        cflags = [f for f in _pkg_config(ctx, "--cflags", modules) if not f.startswith("-I/usr/include")]
        extra = ["-lpthread"]
        lines.append("cc_library(")
        lines.append('    name = "%s",' % name)
        lines.append("    copts = %s," % repr(cflags))
        lines.append("    linkopts = %s," % repr(_EXTRA_LINKOPTS.get(name, []) + libs + extra))
        lines.append(")")
        lines.append("")
    ctx.file("BUILD", "\n".join(lines))
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)

system_libs = repository_rule(
    implementation = _system_libs_impl,
    local = True,
)
