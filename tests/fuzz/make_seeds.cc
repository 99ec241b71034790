// Writes the seed corpora of the fuzz targets (tests/fuzz/*_fuzz.cc) from
// real messages, one directory per target under argv[1]:
//   bazel run --config=fuzz //tests/fuzz:make_seeds -- $PWD/tests/fuzz/corpus
// (run_fuzzers.sh uses the committed output; rerun this after a wire or
// proto change and commit the result).
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "common/psnet/ps_wire.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "proto/peer.pb.h"
#include "proto/ps.pb.h"
#include "tests/fuzz/fuzz_records.h"
#include "worker/net/peer_wire.h"
#include "worker/net/tcp_wire.h"

namespace {

using lockstep::fuzz::AppendRecord;
namespace v1 = lockstep::v1;

std::string g_root;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string dir = g_root + "/" + target;
  mkdir(g_root.c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::perror(path.c_str());
    std::exit(1);
  }
  std::fclose(f);
}

std::string Bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

v1::JobSpec Spec(v1::SyncMode mode) {
  v1::JobSpec s;
  s.set_name("seed");
  s.set_model(mode == v1::PS ? "mlp:8,4" : "softmax");
  s.mutable_data()->set_dataset(mode == v1::PS ? "libsvm:/tmp/seed.svm" : "csv:/tmp/seed.csv");
  s.set_sync_mode(mode);
  s.set_num_workers(2);
  s.set_global_batch(8);
  s.mutable_lr()->set_base_lr(0.1f);
  s.mutable_lr()->set_decay("cosine");
  s.mutable_lr()->set_warmup_steps(1);
  s.mutable_optimizer()->set_kind("adam");
  s.set_steps(3);
  s.set_seed(7);
  if (mode == v1::PS) s.set_ps_shards(2);
  return s;
}

std::string Idx(uint8_t type, std::initializer_list<uint32_t> dims, size_t elem) {
  std::string out = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  size_t count = 1;
  for (uint32_t d : dims) {
    for (int b = 3; b >= 0; --b) out.push_back(static_cast<char>((d >> (8 * b)) & 0xff));
    count *= d;
  }
  for (size_t i = 0; i < count * elem; ++i) out.push_back(static_cast<char>(i % 3));
  return out;
}

void DataReaders() {
  const std::string t = "data_readers_fuzz";
  Write(t, "idx_labels", std::string(1, 0) + Idx(0x08, {4}, 1));
  Write(t, "idx_images", std::string(1, 0) + Idx(0x08, {2, 2, 3}, 1));
  Write(t, "idx_float", std::string(1, 0) + Idx(0x0D, {2, 3}, 4));
  Write(t, "idx_int16_labels", std::string(1, 8) + Idx(0x0B, {3}, 2));
  Write(t, "csv_header", std::string(1, 1) + "label,a,b\n0,1.5,2\n1,3,-4e2\n\n2,0,0\r\n");
  Write(t, "csv_regression_last", std::string(1, 1 | 16 | 32) + "1.5,2,0.25\n3,4,-1\n");
  Write(t, "csv_tab", std::string(1, 1 | 64) + "0\t1\t2\n1\t3\t4\n");
  Write(t, "libsvm_signed", std::string(1, 2) + "+1 1:0.5 3:2 # c\n-1 qid:3 2:1\n\n");
  Write(t, "libsvm_class", std::string(1, 2 | 8 | 16) + "0 1:1 8:2\n2 4:0.5\n1 2:1e-3\n");
  Write(t, "libsvm_regression", std::string(1, 2 | 12) + "0.5 1:1\n-2.25 2:3\n");
}

void JobSpecs() {
  Write("job_spec_fuzz", "ring", Spec(v1::RING).SerializeAsString());
  Write("job_spec_fuzz", "ps", Spec(v1::PS).SerializeAsString());
  v1::JobSpec tcp = Spec(v1::RING);
  tcp.set_peer_transport(v1::TCP);
  tcp.set_epochs(2);
  tcp.set_steps(0);
  tcp.mutable_data()->set_dataset("fashion-mnist");
  tcp.mutable_data()->set_normalize("standardize");
  tcp.set_checkpoint_dir("/tmp/ckpt");
  tcp.set_checkpoint_every_steps(2);
  Write("job_spec_fuzz", "tcp_epochs_ckpt", tcp.SerializeAsString());
}

void PsWire() {
  namespace psnet = lockstep::psnet;
  uint8_t b[psnet::kHelloBytes];
  psnet::Hello h;
  h.job = 5;
  h.shard = 1;
  h.num_workers = 2;
  h.shard_len = 1000;
  // The fuzz target's fixed secret and nonce: this hello verifies.
  lockstep::dataauth::Nonce nonce;
  nonce.fill(0x5a);
  // Its client nonce: the fuzz target's fixed one for its reply case.
  lockstep::dataauth::Nonce own;
  own.fill(0xa5);
  const std::string secret(lockstep::dataauth::kSecretBytes, 'f');
  psnet::EncodeHello(h, secret, nonce, own, b);
  Write("ps_wire_fuzz", "hello", std::string(1, 0) + Bytes(b, psnet::kHelloBytes));
  // An accepted reply to that hello (shard 0's: the target's fixed hello).
  {
    psnet::Hello h0 = h;
    h0.shard = 0;
    uint8_t hb[psnet::kHelloBytes];
    psnet::EncodeHello(h0, secret, nonce, own, hb);
    uint8_t r[psnet::kHelloReplyBytes];
    psnet::EncodeHelloReply(0, 0, r);
    psnet::SignHelloReply(hb, secret, nonce, r);
    Write("ps_wire_fuzz", "hello_reply_accepted",
          std::string(1, 1) + Bytes(r, psnet::kHelloReplyBytes));
  }
  psnet::EncodeChallenge(nonce, b);
  Write("ps_wire_fuzz", "challenge", std::string(1, 3) + Bytes(b, psnet::kChallengeBytes));
  psnet::EncodeHelloReply(3, 20, b);
  Write("ps_wire_fuzz", "hello_reply", std::string(1, 1) + Bytes(b, psnet::kHelloReplyBytes));
  psnet::Frame f;
  f.kind = static_cast<uint32_t>(psnet::Kind::kRound);
  f.job = 5;
  f.step = 9;
  f.worker = 1;
  f.count = 4;
  f.len = 4000;
  f.wait_us = 1000;
  psnet::EncodeFrame(f, b);
  Write("ps_wire_fuzz", "frame_round", std::string(1, 2) + Bytes(b, psnet::kFrameBytes));
}

void TcpWire() {
  namespace tcpwire = lockstep::tcpwire;
  uint8_t b[tcpwire::kHelloBytes];
  // The fuzz target's fixed secret and nonce: this hello verifies.
  lockstep::dataauth::Nonce nonce;
  nonce.fill(0x5a);
  // The fuzz target's fixed connector nonce for its accept case.
  lockstep::dataauth::Nonce own;
  own.fill(0xa5);
  const std::string secret(lockstep::dataauth::kSecretBytes, 'f');
  tcpwire::EncodeHello(tcpwire::Hello{77, 1, 0, 3}, secret, nonce, own, b);
  Write("tcp_wire_fuzz", "hello", std::string(1, 1) + Bytes(b, tcpwire::kHelloBytes));
  // Its accept (verifies in the target's accept case).
  uint8_t acc[tcpwire::kAcceptBytes];
  tcpwire::EncodeAccept(b, secret, nonce, acc);
  Write("tcp_wire_fuzz", "accept", std::string(1, 3) + Bytes(acc, tcpwire::kAcceptBytes));
  tcpwire::EncodeChallenge(nonce, b);
  Write("tcp_wire_fuzz", "challenge", std::string(1, 2) + Bytes(b, tcpwire::kChallengeBytes));
  tcpwire::EncodeFrame(lockstep::MakeKey(5, 12, 3, 1), 4096, b);
  Write("tcp_wire_fuzz", "frame", std::string(1, 0) + Bytes(b, tcpwire::kHeaderBytes));
}

void PeerWire() {
  lockstep::PeerHeader h;
  h.group = 77;
  h.from_rank = 1;
  h.key = lockstep::MakeKey(5, 12, 3, 1);
  h.seq = 42;
  h.streams = 2;
  const std::string payload = "0123456789abcdef0123";
  uint8_t b[lockstep::kMaxPeerHeaderBytes];
  const size_t n = lockstep::EncodePeerHeader(h, payload.size(), b);
  Write("peer_wire_fuzz", "one_fragment", std::string(1, '\xff') + Bytes(b, n) + payload);
  Write("peer_wire_fuzz", "fragments_of_7", std::string(1, 6) + Bytes(b, n) + payload);
  h.fin_total = 9;
  const size_t n2 = lockstep::EncodePeerHeader(h, 0, b);
  Write("peer_wire_fuzz", "fin_no_data", std::string(1, 15) + Bytes(b, n2));
  v1::PeerMessage m;  // protobuf's own field order
  m.set_job(5);
  m.set_step(1);
  m.set_from_rank(0);
  m.set_data("xyz");
  m.set_group(3);
  Write("peer_wire_fuzz", "protobuf_encoded", std::string(1, 31) + m.SerializeAsString());
}

void CoordinatorSeeds() {
  const std::string hash = "0123456789abcdef0123456789abcdef";
  for (v1::SyncMode mode : {v1::RING, v1::PS}) {
    std::string s;
    for (int w = 1; w <= 2; ++w) {
      v1::RegisterWorkerRequest r;
      r.set_address("127.0.0.1:710" + std::to_string(w));
      r.set_hostname("host" + std::to_string(w));
      r.set_pid(100 + w);
      r.set_data_address("127.0.0.1:720" + std::to_string(w));
      AppendRecord(&s, 0, r.SerializeAsString());
    }
    v1::SubmitJobRequest sub;
    *sub.mutable_spec() = Spec(mode);
    AppendRecord(&s, 6, sub.SerializeAsString());
    for (int w = 1; w <= 2; ++w) {
      v1::HeartbeatRequest hb;
      hb.set_worker_id("w-" + std::to_string(w));
      AppendRecord(&s, 1, hb.SerializeAsString());
      hb.set_job_id(1);
      AppendRecord(&s, 1, hb.SerializeAsString());
    }
    for (int step = 0; step < 3; ++step) {
      for (int rank = 0; rank < 2; ++rank) {
        v1::ReportStepRequest rs;
        rs.set_worker_id("w-" + std::to_string(rank + 1));
        rs.set_job_id(1);
        rs.set_rank(rank);
        rs.set_step(step);
        rs.set_weights_hash(hash);
        rs.set_loss(2.0 - 0.1 * step);
        rs.set_examples(4);
        rs.set_step_seconds(0.01);
        rs.set_lr(0.1);
        rs.set_total_steps(3);
        AppendRecord(&s, 2, rs.SerializeAsString());
      }
      AppendRecord(&s, 11, std::string("\x64\x00", 2));  // +100 ms, Tick
    }
    v1::ReportEvalRequest ev;
    ev.set_worker_id("w-1");
    ev.set_job_id(1);
    ev.set_step(2);
    ev.set_test_accuracy(0.5);
    ev.set_test_examples(10);
    AppendRecord(&s, 3, ev.SerializeAsString());
    v1::WeightsChunk wc;
    wc.set_worker_id("w-1");
    wc.set_job_id(1);
    wc.set_total(2);
    wc.set_data(std::string(8, '\0'));
    wc.add_block_names("w");
    wc.add_block_shapes(2);
    AppendRecord(&s, 5, wc.SerializeAsString());
    for (int rank = 0; rank < 2; ++rank) {
      v1::ReportDoneRequest d;
      d.set_worker_id("w-" + std::to_string(rank + 1));
      d.set_job_id(1);
      d.set_rank(rank);
      d.set_ok(true);
      d.set_steps(3);
      d.set_weights_hash(hash);
      AppendRecord(&s, 4, d.SerializeAsString());
    }
    v1::JobRef ref;
    ref.set_job_id(1);
    AppendRecord(&s, 7, ref.SerializeAsString());
    v1::SyncHistoryRequest sh;
    sh.set_job_id(1);
    AppendRecord(&s, 9, sh.SerializeAsString());
    AppendRecord(&s, 12, "");
    AppendRecord(&s, 13, ref.SerializeAsString());
    Write("coordinator_fuzz", mode == v1::PS ? "ps_job_lifecycle" : "ring_job_lifecycle", s);
  }
  // A worker lost mid-job, a cancel, a deregistration and a drain.
  std::string s;
  for (int w = 1; w <= 2; ++w) {
    v1::RegisterWorkerRequest r;
    r.set_address(":710" + std::to_string(w));
    r.set_pid(w);
    AppendRecord(&s, 0, r.SerializeAsString());
  }
  v1::SubmitJobRequest sub;
  *sub.mutable_spec() = Spec(v1::RING);
  AppendRecord(&s, 6, sub.SerializeAsString());
  AppendRecord(&s, 6, sub.SerializeAsString());
  v1::HeartbeatRequest hb;
  hb.set_worker_id("w-1");
  AppendRecord(&s, 1, hb.SerializeAsString());
  AppendRecord(&s, 11, std::string("\x10\x27", 2));  // +10 s, Tick: lost
  v1::JobRef ref;
  ref.set_job_id(2);
  AppendRecord(&s, 8, ref.SerializeAsString());
  v1::DeregisterWorkerRequest dr;
  dr.set_worker_id("w-2");
  dr.set_reason("SIGTERM");
  AppendRecord(&s, 10, dr.SerializeAsString());
  AppendRecord(&s, 14, "");
  Write("coordinator_fuzz", "lost_cancel_drain", s);
}

void PsServiceSeeds() {
  std::string s;
  for (int w = 0; w < 2; ++w) {
    v1::PushRequest p;
    p.set_job(5);
    p.set_step(0);
    p.set_shard(0);
    p.set_worker_rank(w);
    p.set_num_workers(2);
    p.set_count(4);
    p.set_shard_len(4);
    p.set_grad_sum(std::string(16, static_cast<char>(w)));
    AppendRecord(&s, 0, p.SerializeAsString());
  }
  v1::PullRequest q;
  q.set_job(5);
  q.set_step(0);
  q.set_worker_rank(1);
  q.set_num_workers(2);
  q.set_shard_len(4);
  q.set_wait_micros(100);
  AppendRecord(&s, 1, q.SerializeAsString());
  q.set_step(1);  // nothing pushed: times out
  AppendRecord(&s, 1, q.SerializeAsString());
  AppendRecord(&s, 2, "");
  Write("ps_service_fuzz", "push_push_pull", s);
  // The coordinator sets job 5's secret, a worker registers it (and a wrong
  // one), then the coordinator forgets the job.
  std::string c;
  v1::PsControlRequest set;
  v1::JobSecret* js = set.add_secrets();
  js->set_job(5);
  js->set_data_plane_secret(std::string(32, 's'));
  AppendRecord(&c, 3, set.SerializeAsString());
  v1::DataAddressRequest d;
  d.set_job(5);
  d.set_data_plane_secret(std::string(32, 's'));
  AppendRecord(&c, 2, d.SerializeAsString());
  d.set_data_plane_secret(std::string(32, 'x'));
  AppendRecord(&c, 2, d.SerializeAsString());
  v1::PsControlRequest forget;
  forget.add_forget_jobs(5);
  AppendRecord(&c, 3, forget.SerializeAsString());
  Write("ps_service_fuzz", "control_set_register_forget", c);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds <corpus dir>\n");
    return 2;
  }
  g_root = argv[1];
  DataReaders();
  JobSpecs();
  PsWire();
  TcpWire();
  PeerWire();
  CoordinatorSeeds();
  PsServiceSeeds();
  return 0;
}
