// Long commands on a store that completes inline (RamStore) give the reactor back between pieces
// through LunConfig::post: WRITE SAME, SANITIZE and EXTENDED COPY of many megabytes return from
// Engine::Execute unfinished, and complete exactly once, with the right data, when the posted
// continuations run.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "base/endian.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/scsi/engine.h"
#include "dataplane/scsi/task.h"

namespace iscsigw::scsi {
namespace yield_test {

constexpr uint32_t kBlock = 512;
constexpr uint64_t kBytes = uint64_t{64} << 20;
constexpr uint64_t kNaa = 0x6001405000000042ull;

class YieldTest : public ::testing::Test {
 protected:
  YieldTest() : nexus_("iqn.test,i,0x1", 1), buf_(1 << 16) {
    target_.name = "iqn.2026-11.io.iscsigw:y";
    LunConfig c;
    c.id = 0;
    c.block_size = kBlock;
    c.naa_id = kNaa;
    c.post = [this](unsigned slot, std::function<void()> fn) {
      EXPECT_EQ(slot, 0u);
      posted_.push_back(std::move(fn));
    };
    lun_ = std::make_shared<Lun>(c, backing::NewRamStore(kBytes));
    target_.luns.push_back(lun_);
    Run({0x00});  // the power-on unit attention
    EXPECT_EQ(DrainPosts(), 0);
  }

  // Executes one command and returns how many times it gave the reactor back before completing.
  int Run(std::initializer_list<uint8_t> cdb, const std::vector<uint8_t>& out = {}) {
    task_ = Task{};
    std::copy(cdb.begin(), cdb.end(), task_.cdb.begin());
    task_.cdb_len = 16;
    task_.nexus = &nexus_;
    task_.buf = buf_.data();
    task_.buf_cap = static_cast<uint32_t>(buf_.size());
    task_.expected_length = static_cast<uint32_t>(out.size());
    if (!out.empty()) std::memcpy(buf_.data(), out.data(), out.size());  // data() may be null
    task_.data_out_len = static_cast<uint32_t>(out.size());
    completions_ = 0;
    task_.complete = [](Task*, void* ctx) { ++*static_cast<int*>(ctx); };
    task_.complete_ctx = &completions_;
    Engine::Execute(target_, task_);
    const int posts = DrainPosts();
    EXPECT_EQ(completions_, 1);
    return posts;
  }
  int DrainPosts() {
    int n = 0;
    while (!posted_.empty()) {
      auto fn = std::move(posted_.front());
      posted_.pop_front();
      fn();
      ++n;
    }
    return n;
  }
  std::vector<uint8_t> Block(uint64_t lba) {
    std::vector<uint8_t> b(kBlock);
    const backing::IoCompletion done{[](void*, int err) { ASSERT_EQ(err, 0); }, nullptr};
    lun_->store().Read(0, lba * kBlock, b, done);
    return b;
  }
  static uint8_t B(uint64_t v, int shift) { return static_cast<uint8_t>(v >> shift); }

  TargetInfo target_;
  Nexus nexus_;
  std::shared_ptr<Lun> lun_;
  std::vector<uint8_t> buf_;
  Task task_;
  int completions_ = 0;
  std::deque<std::function<void()>> posted_;
};

TEST_F(YieldTest, WriteSameOfSixteenMegabytesYields) {
  const uint32_t blocks = (16u << 20) / kBlock;
  std::vector<uint8_t> pattern(kBlock, 0x5A);
  const int posts = Run({0x93, 0, 0, 0, 0, 0, 0, 0, 0, 0, B(blocks, 24), B(blocks, 16),
                         B(blocks, 8), B(blocks, 0), 0, 0},
                        pattern);
  EXPECT_GE(posts, 1);
  EXPECT_EQ(task_.status, ScsiStatus::kGood);
  EXPECT_EQ(Block(blocks - 1), pattern);
}

TEST_F(YieldTest, SanitizeOverwriteOfTheWholeLunYields) {
  std::vector<uint8_t> p = {0x01, 0, 0, 4, 0xDE, 0xAD, 0xBE, 0xEF};  // OWCOUNT 1, 4-byte pattern
  const int posts = Run({0x48, 0x01, 0, 0, 0, 0, 0, 0, 8, 0}, p);    // IMMED=0: waits for the end
  EXPECT_GE(posts, static_cast<int>(kBytes / (1u << 20) / 8) - 1);
  EXPECT_EQ(task_.status, ScsiStatus::kGood);
  const auto last = Block(kBytes / kBlock - 1);
  EXPECT_EQ(LoadBe32(last.data()), 0xDEADBEEFu);
  EXPECT_EQ(lun_->sanitize().mode(), SanitizeState::Mode::kIdle);
}

TEST_F(YieldTest, ExtendedCopyOfSixteenMegabytesYields) {
  std::vector<uint8_t> pattern(kBlock, 0x77);
  const uint32_t blocks = (16u << 20) / kBlock;
  Run({0x93, 0, 0, 0, 0, 0, 0, 0, 0, 0, B(blocks, 24), B(blocks, 16), B(blocks, 8), B(blocks, 0), 0,
       0},
      pattern);
  // One identification CSCD descriptor and one block-to-block segment (SPC-4 6.4.5.6, 6.4.6.5).
  std::vector<uint8_t> params(16 + 32 + 28, 0);
  StoreBe16(&params[2], 32);
  StoreBe32(&params[8], 28);
  uint8_t* d = &params[16];
  d[0] = 0xE4;
  d[4] = 0x01;
  d[5] = 0x03;
  d[7] = 16;
  StoreBe64(d + 8, kNaa);
  StoreBe24(d + 29, kBlock);
  uint8_t* s = &params[48];
  s[0] = 0x02;
  StoreBe16(s + 2, 0x18);
  StoreBe16(s + 10, static_cast<uint16_t>(blocks > 0xFFFF ? 0xFFFF : blocks));
  StoreBe64(s + 20, blocks);  // destination: right after the written range
  const uint32_t n = static_cast<uint32_t>(params.size());
  const int posts =
      Run({0x83, 0, 0, 0, 0, 0, 0, 0, 0, 0, B(n, 24), B(n, 16), B(n, 8), B(n, 0), 0, 0}, params);
  EXPECT_GE(posts, 1);
  EXPECT_EQ(task_.status, ScsiStatus::kGood);
  EXPECT_EQ(Block(blocks + 100), pattern);
}

}  // namespace yield_test
}  // namespace iscsigw::scsi
