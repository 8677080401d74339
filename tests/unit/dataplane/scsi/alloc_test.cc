// The READ/WRITE path on ram and null stores must not allocate (DESIGN.md: steady state allocates
// nothing per command). Counts every operator new in this binary while commands run.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "dataplane/backing/null_store.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/scsi/engine.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// The nothrow form (the data plane's `new (std::nothrow)`) is replaced too, so that every
// allocation this binary frees through the operator delete below came from malloc, also under
// AddressSanitizer, which otherwise serves nothrow new itself and reports the free as a mismatch.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace iscsigw::scsi {
namespace {

TEST(EngineAllocations, ReadWriteOnRamAndNullAllocateNothing) {
  TargetInfo target;
  target.name = "iqn.2026-11.io.iscsigw:alloc";
  LunConfig c0;
  c0.id = 0;
  LunConfig c1;
  c1.id = 1;
  target.luns.push_back(std::make_shared<Lun>(c0, backing::NewRamStore(8 << 20)));
  target.luns.push_back(std::make_shared<Lun>(c1, backing::NewNullStore(8 << 20)));
  Nexus nexus("iqn.1994-05.com.example:init,i,0x000000000001", 1);
  std::vector<uint8_t> buf(1 << 20, 0x5A);
  int completions = 0;
  Task task;

  auto run = [&](std::initializer_list<uint8_t> cdb, uint64_t lun, uint32_t out_len) {
    task.ResetResult();
    std::memset(task.cdb.data(), 0, task.cdb.size());
    std::copy(cdb.begin(), cdb.end(), task.cdb.begin());
    task.cdb_len = 16;
    task.lun = lun;
    task.expected_length = 65536;
    task.nexus = &nexus;
    task.buf = buf.data();
    task.buf_cap = static_cast<uint32_t>(buf.size());
    task.data_out_len = out_len;
    task.complete = [](Task*, void* ctx) { ++*static_cast<int*>(ctx); };
    task.complete_ctx = &completions;
    Engine::Execute(target, task);
  };

  // Warm up: consume the power-on unit attentions and let the RAM store allocate its chunk.
  for (uint64_t lun : {0, 1}) run({0x00}, lun, 0);
  run({0x2A, 0, 0, 0, 0, 0, 0, 0, 128, 0}, 0, 65536);
  ASSERT_EQ(task.status, ScsiStatus::kGood);

  completions = 0;
  const long before = g_allocations.load();
  for (int i = 0; i < 100; ++i) {
    run({0x2A, 0x08, 0, 0, 0, 0, 0, 0, 128, 0}, 0, 65536);  // WRITE(10) FUA, ram
    EXPECT_EQ(task.status, ScsiStatus::kGood);
    run({0x28, 0, 0, 0, 0, 0, 0, 0, 128, 0}, 0, 0);  // READ(10), ram
    EXPECT_EQ(task.in_len, 65536u);
    run({0x88, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 8, 0, 0}, 1, 0);  // READ(16), null
    EXPECT_EQ(task.in_len, 4096u);
    run({0x8A, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 8, 0, 0}, 1, 4096);  // WRITE(16), null
    EXPECT_EQ(task.status, ScsiStatus::kGood);
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
  EXPECT_EQ(completions, 400);
}

}  // namespace
}  // namespace iscsigw::scsi
