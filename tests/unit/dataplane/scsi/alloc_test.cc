// The READ/WRITE path on ram and null stores must not allocate (the data plane's rule: steady state
// allocates nothing per command). Counts every operator new in this binary while commands run.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "dataplane/backing/null_store.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/scsi/engine.h"
#include "tests/common/counting_new.h"

namespace iscsigw::scsi {
namespace alloc_test {

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

  // The counter sees allocations (so that the zero below means something).
  {
    const long at = iscsigw::testing::Allocations();
    auto probe = std::make_unique<std::array<uint8_t, 64>>();
    asm volatile("" : : "r"(probe.get()) : "memory");
    ASSERT_EQ(iscsigw::testing::Allocations() - at, 1);
  }

  completions = 0;
  const long before = iscsigw::testing::Allocations();
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
  EXPECT_EQ(iscsigw::testing::Allocations() - before, 0);
  EXPECT_EQ(completions, 400);
}

}  // namespace alloc_test
}  // namespace iscsigw::scsi
