"""cc_grpc_proto: a genrule around Debian's protoc and grpc_cpp_plugin."""

def cc_grpc_proto(name, src, deps = [], grpc = False):
    """Generates <name>_proto (C++ library) from one .proto in this package.

    Args:
      name: base name; the library is ":<name>_proto".
      src: the .proto file (in this package).
      deps: other cc_grpc_proto libraries whose .proto files src imports.
      grpc: also generate the gRPC service stubs.
    """
    base = src[:-len(".proto")]
    outs = [base + ".pb.h", base + ".pb.cc"]
    if grpc:
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    cmd = "protoc -I. --cpp_out=$(GENDIR) "
    if grpc:
        cmd += "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin) "
    cmd += "$(location %s)" % src
    native.genrule(
        name = name + "_gen",
        srcs = [src] + [d + "_proto_srcs" for d in deps],
        outs = outs,
        cmd = cmd,
    )
    native.filegroup(name = name + "_proto_srcs", srcs = [src])
    native.cc_library(
        name = name + "_proto",
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = [d + "_proto" for d in deps] + ["@system//:grpc"],
        copts = ["-Wno-unused-parameter"],
    )
