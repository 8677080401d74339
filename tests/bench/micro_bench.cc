// Micro benchmarks of the per-command protocol path (Google Benchmark), heap allocations counted
// beside the time: every operator new in this binary is counted, and each benchmark reports the
// allocations per iteration once warm ("allocs/op"). gotgt's report (shared/seeds) measured ~520 ns
// and one allocation per command for its path.
//
//   build/bin/micro_bench [--benchmark_filter=REGEX] [--benchmark_repetitions=3]
//
// Not a test: nothing here asserts a time. The allocation figures are asserted by
// tests/unit/dataplane/scsi/alloc_test.cc and tests/integration/test_allocations.py.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "dataplane/backing/null_store.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/pdu/crc32c.h"
#include "dataplane/pdu/frame.h"
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

}  // namespace
}  // namespace iscsigw

BENCHMARK_MAIN();
