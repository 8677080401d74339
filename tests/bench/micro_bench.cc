// Micro benchmarks of the per-command protocol path (Google Benchmark), heap allocations counted
// beside the time (and, BM_FileWrite, what an atomic write costs a file LUN): every operator new in
// this binary is counted, and each benchmark reports the allocations per iteration once warm
// ("allocs/op"). gotgt's report (shared/seeds) measured ~520 ns and one allocation per command for
// its path.
//
//   build/bin/micro_bench [--benchmark_filter=REGEX] [--benchmark_repetitions=3]
//
// Not a test: nothing here asserts a time. The allocation figures are asserted by
// tests/unit/dataplane/scsi/alloc_test.cc and tests/integration/test_allocations.py.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/endian.h"
#include "dataplane/backing/file/file_store.h"
#include "dataplane/backing/null_store.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/iscsi/connection.h"
#include "dataplane/iscsi/gateway.h"
#include "dataplane/iscsi/session.h"
#include "dataplane/pdu/crc32c.h"
#include "dataplane/pdu/frame.h"
#include "dataplane/pdu/text.h"
#include "dataplane/runtime/reactor_pool.h"
#include "dataplane/scsi/engine.h"
#include "tests/common/counting_new.h"

namespace iscsigw {
namespace {

// Runs `body` for the benchmark's iterations and reports allocations per iteration.
template <typename Body>
void Measure(benchmark::State& state, Body body) {
  body();  // warm: first-use allocations are not per command
  const long before = testing::Allocations();
  for (auto _ : state) body();
  state.counters["allocs/op"] = benchmark::Counter(
      static_cast<double>(testing::Allocations() - before), benchmark::Counter::kAvgIterations);
}

// A SCSI Command PDU header: READ(16) of 8 blocks, as an initiator frames it.
std::vector<uint8_t> Read16Pdu() {
  std::vector<uint8_t> b(pdu::kBhsLength, 0);
  b[0] = 0x01;  // SCSI Command
  b[1] = 0xC0;  // F, R
  b[16] = 0x12;
  b[23] = 0x10;  // EDTL 4096
  b[32] = 0x88;
  b[45] = 8;
  return b;
}

void BM_BhsDecode(benchmark::State& state) {
  const auto pdu_bytes = Read16Pdu();
  pdu::FrameLimits limits;
  limits.max_data_segment_length = 262144;
  Measure(state, [&] {
    pdu::Frame f;
    const auto r = pdu::ParseFrame(pdu_bytes, limits, &f);
    const pdu::BhsView h = f.header();
    benchmark::DoNotOptimize(r.status);
    benchmark::DoNotOptimize(h.itt() + h.expected_data_transfer_length() + h.cmd_sn() + h.cdb()[0] +
                             h.lun_raw());
  });
}
BENCHMARK(BM_BhsDecode);

void BM_Crc32c(benchmark::State& state) {
  std::vector<uint8_t> data(static_cast<size_t>(state.range(0)), 0xA5);
  Measure(state, [&] { benchmark::DoNotOptimize(pdu::Crc32c(data.data(), data.size())); });
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_Crc32c)->Arg(48)->Arg(4096)->Arg(262144);

// The SCSI engine on one LUN: the CDB decoded, checked, the store read or written, the status and
// Data-In description set.
class EngineFixture {
 public:
  explicit EngineFixture(std::unique_ptr<backing::BackingStore> store)
      : nexus_("iqn.1994-05.com.example:init,i,0x000000000001", 1), buf_(1 << 20, 0x5A) {
    target_.name = "iqn.2026-11.io.iscsigw:bench";
    scsi::LunConfig c;
    c.id = 0;
    target_.luns.push_back(std::make_shared<scsi::Lun>(c, std::move(store)));
    Run({0x00}, 0);  // TEST UNIT READY consumes the power-on unit attention
  }

  void Run(std::initializer_list<uint8_t> cdb, uint32_t out_len) {
    task_.ResetResult();
    std::memset(task_.cdb.data(), 0, task_.cdb.size());
    std::copy(cdb.begin(), cdb.end(), task_.cdb.begin());
    task_.cdb_len = 16;
    task_.lun = 0;
    task_.expected_length = out_len != 0 ? out_len : 262144;
    task_.nexus = &nexus_;
    task_.buf = buf_.data();
    task_.buf_cap = static_cast<uint32_t>(buf_.size());
    task_.data_out_len = out_len;
    task_.complete = [](scsi::Task*, void* ctx) { ++*static_cast<long*>(ctx); };
    task_.complete_ctx = &completions_;
    scsi::Engine::Execute(target_, task_);
  }
  const scsi::Task& task() const { return task_; }
  long completions() const { return completions_; }

 private:
  scsi::TargetInfo target_;
  scsi::Nexus nexus_;
  std::vector<uint8_t> buf_;
  scsi::Task task_;
  long completions_ = 0;
};

std::unique_ptr<backing::BackingStore> Store(bool ram) {
  if (ram) return backing::NewRamStore(64 << 20);
  return backing::NewNullStore(64 << 20);
}

void BM_Read16Dispatch(benchmark::State& state) {
  const bool ram = state.range(1) != 0;
  EngineFixture e(Store(ram));
  const auto blocks = static_cast<uint8_t>(state.range(0) / 512 >> 8);
  const auto blocks_lo = static_cast<uint8_t>(state.range(0) / 512 & 0xff);
  if (ram) e.Run({0x8A, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, blocks, blocks_lo, 0, 0}, 262144);
  Measure(state, [&] {
    e.Run({0x88, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, blocks, blocks_lo, 0, 0}, 0);
    benchmark::DoNotOptimize(e.task().in_len);
  });
  if (e.task().status != scsi::ScsiStatus::kGood || e.task().in_len != state.range(0) ||
      e.completions() != static_cast<long>(state.iterations()) + (ram ? 3 : 2)) {
    state.SkipWithError("READ(16) did not complete with its data");
  }
}
BENCHMARK(BM_Read16Dispatch)
    ->ArgNames({"bytes", "ram"})
    ->Args({4096, 0})
    ->Args({4096, 1})
    ->Args({262144, 1});

void BM_Write16Dispatch(benchmark::State& state) {
  const bool ram = state.range(1) != 0;
  EngineFixture e(Store(ram));
  const auto len = static_cast<uint32_t>(state.range(0));
  const auto blocks = static_cast<uint8_t>(len / 512 >> 8);
  const auto blocks_lo = static_cast<uint8_t>(len / 512 & 0xff);
  Measure(state, [&] {
    e.Run({0x8A, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, blocks, blocks_lo, 0, 0}, len);
    benchmark::DoNotOptimize(e.task().status);
  });
  if (e.task().status != scsi::ScsiStatus::kGood ||
      e.completions() != static_cast<long>(state.iterations()) + 2) {
    state.SkipWithError("WRITE(16) did not complete");
  }
}
BENCHMARK(BM_Write16Dispatch)->ArgNames({"bytes", "ram"})->Args({4096, 0})->Args({4096, 1});

// The iSCSI connection's side of a command, in memory: a real iscsi::Connection (on a socket that
// is never opened) in a session logged in to a target with one LUN, driven through its test seam
// (Connection::HandleFrameForTest, GatherBatchForTest, FinishBatchForTest): the reader's PDU
// handling, session checks, SCSI dispatch and the writer's batch up to the iovecs sendmsg would
// get. No socket I/O. The reactor pool is not started: everything runs on the benchmark's thread,
// which stands in for the connection's reactor.
//
// The session negotiates what Linux open-iscsi asks for by default (iscsid.conf), which the
// target's limits (TargetLimits) accept as they are: MaxRecvDataSegmentLength 262144 both ways,
// MaxBurstLength 16776192, FirstBurstLength 262144, ImmediateData=Yes, InitialR2T=No, no digests.
// A 256 KiB READ is then one Data-In PDU carrying the status; a 4 KiB WRITE is all immediate data.
class ConnectionFixture {
 public:
  static constexpr char kTarget[] = "iqn.2026-11.io.iscsigw:bench";
  static constexpr uint32_t kMaxRecvDataSegmentLength = 262144;

  explicit ConnectionFixture(std::unique_ptr<backing::BackingStore> store)
      : pool_(1), gw_(pool_, iscsi::GatewayOptions{}) {
    auto target = std::make_shared<iscsi::TargetConfig>();
    target->info.name = kTarget;
    target->allow_any_initiator = true;
    scsi::LunConfig c;
    c.id = 0;
    target->info.luns.push_back(std::make_shared<scsi::Lun>(c, std::move(store)));
    auto snap = std::make_shared<iscsi::Snapshot>();
    snap->targets.push_back(target);
    gw_.Publish(snap);
    if (!gw_.TryAddConnection()) return;
    conn_ = std::make_shared<iscsi::Connection>(gw_, 0,
                                                boost::asio::ip::tcp::socket(pool_.context(0)), 1);
    ok_ = Login() && TestUnitReady() && TestUnitReady(/*expect_good=*/true);
  }
  ~ConnectionFixture() {
    if (conn_) conn_->Close();
  }

  // Set up: logged in, and the power-on unit attention taken by a TEST UNIT READY.
  bool ok() const { return ok_; }
  iscsi::Connection& conn() { return *conn_; }

  // A SCSI Command PDU as the initiator frames it: READ(16) or WRITE(16) of `bytes` at LBA 8, the
  // write's data all immediate. Advance() gives it the next CmdSN (and ITT).
  std::vector<uint8_t> CommandPdu(bool write, uint32_t bytes) const {
    const uint32_t dsl = write ? bytes : 0;
    std::vector<uint8_t> b(pdu::kBhsLength + dsl + pdu::PadLength(dsl), 0xA5);
    pdu::Bhs h;
    h.SetOpcode(pdu::Opcode::kScsiCommand);
    h.SetFlags(static_cast<uint8_t>(0x80 | (write ? 0x20 : 0x40) | 0x01));  // F, W or R, SIMPLE
    h.SetDataSegmentLength(dsl);
    h.Set32(20, bytes);  // ExpectedDataTransferLength
    h.b[32] = write ? 0x8A : 0x88;
    StoreBe64(&h.b[34], 8);
    StoreBe32(&h.b[42], bytes / 512);
    std::memcpy(b.data(), h.data(), pdu::kBhsLength);
    return b;
  }
  void Advance(std::vector<uint8_t>& pdu_bytes) {
    StoreBe32(&pdu_bytes[16], itt_++);
    StoreBe32(&pdu_bytes[24], cmd_sn_++);
    StoreBe32(&pdu_bytes[28], exp_stat_sn_++);
  }

  // What the reader does with the bytes of one PDU: frame it, handle it.
  bool Receive(std::span<const uint8_t> bytes) {
    pdu::Frame f;
    const auto r = pdu::ParseFrame(bytes, limits_, &f);
    return r.status == pdu::FrameStatus::kComplete && f.total_length == bytes.size() &&
           conn_->HandleFrameForTest(f);
  }

  // The session's task in flight, or null when none is.
  iscsi::Task* TaskInFlight() {
    for (auto& s : gw_.Sessions()) {
      for (iscsi::Task& t : s->tasks()) {
        if (t.state != iscsi::Task::State::kFree) return &t;
      }
    }
    return nullptr;
  }

 private:
  // One Login Request from the operational stage straight to full feature phase.
  bool Login() {
    std::vector<uint8_t> text;
    pdu::EncodeText({{"InitiatorName", "iqn.1994-05.com.redhat:bench"},
                     {"TargetName", kTarget},
                     {"SessionType", "Normal"},
                     {"HeaderDigest", "None"},
                     {"DataDigest", "None"},
                     {"ImmediateData", "Yes"},
                     {"InitialR2T", "No"},
                     {"MaxBurstLength", "16776192"},
                     {"FirstBurstLength", "262144"},
                     {"MaxRecvDataSegmentLength", std::to_string(kMaxRecvDataSegmentLength)},
                     {"MaxOutstandingR2T", "1"},
                     {"ErrorRecoveryLevel", "0"}},
                    &text);
    const auto dsl = static_cast<uint32_t>(text.size());
    pdu::Bhs h;
    h.SetOpcode(pdu::Opcode::kLoginRequest);
    h.b[0] |= 0x40;                   // immediate
    h.SetFlags(0x80 | (1 << 2) | 3);  // T, CSG operational, NSG full feature
    h.SetDataSegmentLength(dsl);
    const uint8_t isid[6] = {0x00, 0x02, 0x3d, 0x00, 0x00, 0x01};
    std::memcpy(&h.b[8], isid, sizeof(isid));
    h.SetItt(itt_++);
    h.Set32(24, cmd_sn_);
    h.Set32(28, exp_stat_sn_);
    std::vector<uint8_t> b(h.b.begin(), h.b.end());
    b.insert(b.end(), text.begin(), text.end());
    b.resize(b.size() + pdu::PadLength(dsl), 0);
    pdu::FrameLimits login_limits;  // RFC 7143 13.12: 8192 until declared
    pdu::Frame f;
    if (pdu::ParseFrame(b, login_limits, &f).status != pdu::FrameStatus::kComplete ||
        !conn_->HandleFrameForTest(f)) {
      return false;
    }
    const auto iov = conn_->GatherBatchForTest();
    const auto* resp = iov.empty() ? nullptr : static_cast<const uint8_t*>(iov[0].iov_base);
    const bool ok = resp != nullptr && pdu::BhsView(resp).opcode() == pdu::Opcode::kLoginResponse &&
                    resp[1] == 0x87 && resp[36] == 0 && resp[37] == 0;
    ++exp_stat_sn_;
    limits_.max_data_segment_length = kMaxRecvDataSegmentLength;
    return conn_->FinishBatchForTest() && ok;
  }

  // TEST UNIT READY, answered and sent (the first one reports the power-on unit attention).
  bool TestUnitReady(bool expect_good = false) {
    auto b = CommandPdu(false, 0);
    b[1] = 0x81;  // F, SIMPLE, no data
    b[32] = 0x00;
    Advance(b);
    if (!Receive(b)) return false;
    const auto iov = conn_->GatherBatchForTest();
    const uint8_t* h = iov.empty() ? nullptr : static_cast<const uint8_t*>(iov[0].iov_base);
    const bool ok = h != nullptr && h[0] == static_cast<uint8_t>(pdu::Opcode::kScsiResponse) &&
                    (!expect_good || h[3] == 0);
    return conn_->FinishBatchForTest() && ok;
  }

  runtime::ReactorPool pool_;
  iscsi::Gateway gw_;
  std::shared_ptr<iscsi::Connection> conn_;
  pdu::FrameLimits limits_;
  uint32_t itt_ = 1;
  uint32_t cmd_sn_ = 1;
  uint32_t exp_stat_sn_ = 1;
  bool ok_ = false;
};

// The first PDU of a batch: its header.
const uint8_t* FirstHeader(std::span<const iovec> iov) {
  return iov.empty() || iov[0].iov_len < pdu::kBhsLength
             ? nullptr
             : static_cast<const uint8_t*>(iov[0].iov_base);
}

size_t BatchBytes(std::span<const iovec> iov) {
  size_t n = 0;
  for (const iovec& v : iov) n += v.iov_len;
  return n;
}

// A READ's Data-In with the status in it (RFC 7143 11.7.4: F and S, GOOD) for `bytes` of data.
bool IsDataInWithGood(std::span<const iovec> iov, uint32_t bytes) {
  const uint8_t* h = FirstHeader(iov);
  return h != nullptr && h[0] == static_cast<uint8_t>(pdu::Opcode::kDataIn) && h[1] == 0x81 &&
         h[3] == 0 && pdu::BhsView(h).data_segment_length() == bytes &&
         BatchBytes(iov) == pdu::kBhsLength + bytes;
}

// A SCSI Response, command completed, GOOD, no sense.
bool IsScsiResponseGood(std::span<const iovec> iov) {
  const uint8_t* h = FirstHeader(iov);
  return h != nullptr && h[0] == static_cast<uint8_t>(pdu::Opcode::kScsiResponse) && h[1] == 0x80 &&
         h[2] == 0 && h[3] == 0 && BatchBytes(iov) == pdu::kBhsLength;
}

// Data-In plus status built for a completed READ of range(0) bytes: the connection's completion
// handler (counting, QueueTaskResponse) and the writer's EmitTask into the batch. The task is
// completed once by a real command; each iteration hands it to the completion handler again, as
// the SCSI engine does, after clearing the two response fields a new command would start from
// (Task::ResetForCommand). The batch is not finished, so that the task stays.
void BM_DataInBuild(benchmark::State& state) {
  const auto bytes = static_cast<uint32_t>(state.range(0));
  ConnectionFixture c(backing::NewNullStore(64 << 20));
  auto cmd = c.CommandPdu(false, bytes);
  c.Advance(cmd);
  iscsi::Task* t = c.ok() && c.Receive(cmd) ? c.TaskInFlight() : nullptr;
  if (t == nullptr || t->state != iscsi::Task::State::kResponding ||
      !IsDataInWithGood(c.conn().GatherBatchForTest(), bytes)) {
    state.SkipWithError("setup: the READ did not complete");
    return;
  }
  long bad = 0;
  Measure(state, [&] {
    t->data_sn = 0;
    t->status_sent = false;
    t->scsi.complete(&t->scsi, t->scsi.complete_ctx);
    const auto iov = c.conn().GatherBatchForTest();
    bad += !IsDataInWithGood(iov, bytes);
  });
  if (!c.conn().FinishBatchForTest() || c.TaskInFlight() != nullptr || bad != 0) {
    state.SkipWithError("Data-In with status GOOD was not built each time");
  }
}
BENCHMARK(BM_DataInBuild)->ArgNames({"bytes"})->Arg(4096)->Arg(262144);

// A whole command from its framed bytes to the answer in the batch: ParseFrame, the connection's
// PDU handling (CmdSN window, task, buffer), SCSI dispatch to the store, the response built, and
// the batch finished as if sent (the task and its buffer released). A 4 KiB READ(16) answered by
// one Data-In with status, or a 4 KiB WRITE(16) with immediate data answered by a SCSI Response.
void BM_Command(benchmark::State& state) {
  const bool write = state.range(0) != 0;
  const bool ram = state.range(1) != 0;
  constexpr uint32_t kBytes = 4096;
  ConnectionFixture c(Store(ram));
  if (!c.ok()) {
    state.SkipWithError("setup: no session");
    return;
  }
  auto cmd = c.CommandPdu(write, kBytes);
  long bad = 0;
  Measure(state, [&] {
    c.Advance(cmd);
    bool ok = c.Receive(cmd);
    const auto iov = c.conn().GatherBatchForTest();
    ok = ok && (write ? IsScsiResponseGood(iov) : IsDataInWithGood(iov, kBytes));
    ok = c.conn().FinishBatchForTest() && ok;
    bad += !ok;
  });
  if (bad != 0 || c.TaskInFlight() != nullptr) {
    state.SkipWithError(write ? "WRITE did not end with a SCSI Response GOOD"
                              : "READ did not end with Data-In and status GOOD");
  }
}
BENCHMARK(BM_Command)
    ->ArgNames({"write", "ram"})
    ->Args({0, 0})
    ->Args({0, 1})
    ->Args({1, 0})
    ->Args({1, 1});

// What an atomic write costs on a file LUN against the write it replaces: a 64 KiB WRITE with FUA
// (a write and a group fdatasync) and a 64 KiB WRITE ATOMIC (the journal's record and its
// fdatasync, the write in place and its fdatasync, the retirement and its fdatasync), one at a
// time, on a file in the working directory (its file system and device are what is measured).
void BM_FileWrite(benchmark::State& state) {
  const bool atomic = state.range(0) != 0;
  constexpr uint64_t kLun = 64 << 20, kBytes = 64 << 10;
  char path[] = "./micro-bench-lun-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) {
    state.SkipWithError("mkstemp in the working directory");
    return;
  }
  ::close(fd);
  ::unlink(path);
  boost::asio::io_context ioc;
  {
    auto store = backing::FileStore::Open(backing::FileStoreOptions{path, kLun}, {&ioc});
    if (!store.ok()) {
      state.SkipWithError(store.status().ToString().c_str());
      return;
    }
    std::vector<uint8_t> data(kBytes, 0x5A);
    uint64_t offset = 0;
    int failures = 0;
    for (auto _ : state) {
      bool done = false;
      int err = 0;
      struct Ctx {
        bool* done;
        int* err;
      } ctx{&done, &err};
      const backing::IoCompletion completion{[](void* c, int e) {
                                               auto* x = static_cast<Ctx*>(c);
                                               *x->err = e;
                                               *x->done = true;
                                             },
                                             &ctx};
      if (atomic) {
        (*store)->WriteAtomic(0, offset, data, false, completion);
      } else {
        (*store)->Write(0, offset, data, true, completion);
      }
      while (!done) {
        ioc.restart();
        ioc.run_one();
      }
      failures += err != 0;
      offset = (offset + kBytes) % kLun;
    }
    if (failures != 0) state.SkipWithError("a write failed");
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
  }
  ::unlink(path);
}
BENCHMARK(BM_FileWrite)->ArgNames({"atomic"})->Arg(0)->Arg(1)->UseRealTime();

}  // namespace
}  // namespace iscsigw

BENCHMARK_MAIN();
