// SBC-3 commands beyond READ/WRITE through Engine::Execute on a RamStore: UNMAP, GET LBA STATUS,
// WRITE SAME, COMPARE AND WRITE (including concurrent use from several threads), ORWRITE, VERIFY,
// WRITE AND VERIFY, PRE-FETCH, SANITIZE, READ DEFECT DATA; and SBC-4 WRITE ATOMIC(16).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <thread>
#include <vector>

#include "base/endian.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/scsi/engine.h"
#include "dataplane/scsi/sense.h"
#include "dataplane/scsi/task.h"
#include "tests/unit/dataplane/scsi/engine_runner.h"

namespace iscsigw::scsi {
namespace sbc_ext_test {

constexpr uint32_t kBlock = 512;
constexpr uint64_t kBlocks = 8192;  // 4 MiB: four RamStore chunks
constexpr uint64_t kChunkBlocks = (1u << 20) / kBlock;

class SbcExtTest : public ::testing::Test {
 protected:
  SbcExtTest() : nexus_("iqn.test,i,0x1", 1) {
    ram_ = std::shared_ptr<backing::RamStore>(backing::NewRamStore(kBlocks * kBlock));
    target_.name = "iqn.2026-11.io.iscsigw:t1";
    LunConfig c;
    c.id = 0;
    c.block_size = kBlock;
    c.naa_id = 0x6001405000000001ull;
    target_.luns.push_back(std::make_shared<Lun>(c, ram_));
    runner_ = std::make_unique<Runner>(target_, nexus_);
    Run({0x00});  // consume the power-on unit attention
  }

  Task& Run(std::initializer_list<uint8_t> cdb, uint32_t expected = 0,
            const std::vector<uint8_t>& data_out = {}) {
    return runner_->Run(cdb, expected, data_out);
  }
  void Write(uint64_t lba, const std::vector<uint8_t>& data) {
    const uint16_t n = static_cast<uint16_t>(data.size() / kBlock);
    Task& t = Run({0x2A, 0, B(lba, 24), B(lba, 16), B(lba, 8), B(lba, 0), 0, B(n, 8), B(n, 0), 0},
                  static_cast<uint32_t>(data.size()), data);
    ASSERT_EQ(t.status, ScsiStatus::kGood);
  }
  std::vector<uint8_t> Read(uint64_t lba, uint16_t n) {
    Task& t = Run({0x28, 0, B(lba, 24), B(lba, 16), B(lba, 8), B(lba, 0), 0, B(n, 8), B(n, 0), 0},
                  n * kBlock);
    EXPECT_EQ(t.status, ScsiStatus::kGood);
    return runner_->DataIn();
  }
  static uint8_t B(uint64_t v, int shift) { return static_cast<uint8_t>(v >> shift); }

  void ExpectCheck(SenseKey key, Asc asc) { ExpectSense(runner_->task(), key, asc); }
  void ExpectGood() {
    EXPECT_EQ(runner_->task().status, ScsiStatus::kGood);
    EXPECT_EQ(runner_->task().sense_len, 0);
  }
  void ExpectInvalidField(uint16_t byte) {
    ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);
    EXPECT_EQ(LoadBe16(&runner_->task().sense[16]), byte);
  }
  // MISCOMPARE with INFORMATION = offset.
  void ExpectMiscompare(uint32_t offset) {
    ExpectCheck(SenseKey::kMiscompare, Asc::kMiscompareDuringVerify);
    EXPECT_EQ(runner_->task().sense[0], 0xF0);  // VALID=1, current error
    EXPECT_EQ(LoadBe32(&runner_->task().sense[3]), offset);
  }

  static std::vector<uint8_t> UnmapList(std::initializer_list<std::pair<uint64_t, uint32_t>> l) {
    std::vector<uint8_t> p(8 + 16 * l.size(), 0);
    StoreBe16(&p[0], static_cast<uint16_t>(p.size() - 2));
    StoreBe16(&p[2], static_cast<uint16_t>(16 * l.size()));
    size_t i = 0;
    for (auto [lba, n] : l) {
      StoreBe64(&p[8 + 16 * i], lba);
      StoreBe32(&p[8 + 16 * i + 8], n);
      ++i;
    }
    return p;
  }
  Task& Unmap(const std::vector<uint8_t>& list) {
    const uint16_t n = static_cast<uint16_t>(list.size());
    return Run({0x42, 0, 0, 0, 0, 0, 0, B(n, 8), B(n, 0), 0}, n, list);
  }
  // GET LBA STATUS: returns (provisioning status, extent length) of the first descriptor.
  std::pair<int, uint32_t> LbaStatus(uint64_t lba) {
    Task& t = Run({0x9E, 0x12, B(lba, 56), B(lba, 48), B(lba, 40), B(lba, 32), B(lba, 24),
                   B(lba, 16), B(lba, 8), B(lba, 0), 0, 0, 1, 0, 0, 0},
                  256);
    EXPECT_EQ(t.status, ScsiStatus::kGood);
    auto d = runner_->DataIn();
    if (d.size() < 24) return {-1, 0};
    EXPECT_EQ(LoadBe64(&d[8]), lba);
    EXPECT_EQ(LoadBe32(&d[0]) + 4, d.size());
    return {d[20] & 0x0F, LoadBe32(&d[16])};
  }

  std::shared_ptr<backing::RamStore> ram_;
  TargetInfo target_;
  Nexus nexus_;
  std::unique_ptr<Runner> runner_;
};

// ---- UNMAP / GET LBA STATUS -------------------------------------------------------------------

TEST_F(SbcExtTest, UnmapDeallocatesWholeChunksAndZerosTheRest) {
  Write(0, std::vector<uint8_t>(2 * kChunkBlocks * kBlock, 0x77));
  EXPECT_EQ(LbaStatus(0), std::make_pair(0, static_cast<uint32_t>(2 * kChunkBlocks)));
  Unmap(UnmapList({{kChunkBlocks, static_cast<uint32_t>(kChunkBlocks)}, {1, 2}}));
  ExpectGood();
  EXPECT_EQ(ram_->allocated_bytes(), 1u << 20);
  EXPECT_EQ(LbaStatus(kChunkBlocks),
            std::make_pair(1, static_cast<uint32_t>(kBlocks - kChunkBlocks)));
  // Blocks 1..2 read as zeros (LBPRZ) but their chunk stays mapped.
  auto d = Read(0, 4);
  EXPECT_EQ(d[0], 0x77);
  EXPECT_EQ(d[kBlock], 0);
  EXPECT_EQ(d[3 * kBlock - 1], 0);
  EXPECT_EQ(d[3 * kBlock], 0x77);
  EXPECT_EQ(LbaStatus(1).first, 0);
  auto z = Read(kChunkBlocks, 8);
  EXPECT_EQ(z, std::vector<uint8_t>(8 * kBlock, 0));
}

TEST_F(SbcExtTest, UnmapErrors) {
  // ANCHOR is not supported (ANC_SUP=0).
  Run({0x42, 0x01, 0, 0, 0, 0, 0, 0, 24, 0}, 24, UnmapList({{0, 1}}));
  ExpectInvalidField(1);
  // A parameter list shorter than the header.
  Run({0x42, 0, 0, 0, 0, 0, 0, 0, 4, 0}, 4, std::vector<uint8_t>(4, 0));
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
  // Beyond the last LBA: nothing is unmapped.
  Write(0, std::vector<uint8_t>(kBlock, 0x42));
  Unmap(UnmapList({{0, 1}, {kBlocks - 1, 2}}));
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  EXPECT_EQ(Read(0, 1)[0], 0x42);
  // More LBAs than MAXIMUM UNMAP LBA COUNT in total.
  std::vector<uint8_t> many = UnmapList({});
  for (int i = 0; i < 129; ++i) {  // 129 x 8192 blocks > 2^20
    const auto one = UnmapList({{0, static_cast<uint32_t>(kBlocks)}});
    many.insert(many.end(), one.begin() + 8, one.end());
  }
  StoreBe16(&many[0], static_cast<uint16_t>(many.size() - 2));
  StoreBe16(&many[2], static_cast<uint16_t>(many.size() - 8));
  Unmap(many);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInParameterList);
  EXPECT_EQ(Read(0, 1)[0], 0x42);
  // Zero-block descriptors are no error, even at the end of the medium.
  Unmap(UnmapList({{kBlocks, 0}, {5, 0}}));
  ExpectGood();
  // Parameter list length 0: nothing to do.
  Run({0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  ExpectGood();
}

TEST_F(SbcExtTest, GetLbaStatusBeyondTheEndIsOutOfRange) {
  Run({0x9E, 0x12, 0, 0, 0, 0, 0, 0, B(kBlocks, 8), B(kBlocks, 0), 0, 0, 1, 0, 0, 0}, 256);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  EXPECT_EQ(LbaStatus(kBlocks - 1), std::make_pair(1, 1u));
}

// ---- WRITE SAME --------------------------------------------------------------------------------

TEST_F(SbcExtTest, WriteSame10WritesTheBlockToEveryLba) {
  std::vector<uint8_t> block(kBlock);
  for (uint32_t i = 0; i < kBlock; ++i) block[i] = static_cast<uint8_t>(i * 7);
  Run({0x41, 0, 0, 0, 0, 10, 0, 0, 5, 0}, kBlock, block);
  ExpectGood();
  auto d = Read(9, 7);
  EXPECT_EQ(d[0], 0);  // LBA 9 untouched
  for (int b = 1; b <= 5; ++b) {
    EXPECT_EQ(std::vector<uint8_t>(d.begin() + b * kBlock, d.begin() + (b + 1) * kBlock), block);
  }
  EXPECT_EQ(d[6 * kBlock], 0);  // LBA 15 untouched
}

TEST_F(SbcExtTest, WriteSameChecks) {
  std::vector<uint8_t> block(kBlock, 1);
  Run({0x41, 0, 0, 0, B(kBlocks, 8), B(kBlocks, 0), 0, 0, 0, 0}, kBlock, block);  // zero, at end
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  Run({0x41, 0, 0, 0, B(kBlocks, 8), B(kBlocks, 0), 0, 0, 1, 0}, kBlock, block);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  Run({0x41, 0x20, 0, 0, 0, 0, 0, 0, 1, 0}, kBlock, block);  // WRPROTECT
  ExpectInvalidField(1);
  Run({0x41, 0x10, 0, 0, 0, 0, 0, 0, 1, 0}, kBlock, block);  // ANCHOR
  ExpectInvalidField(1);
  // Data-Out of other than one block.
  Run({0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0}, kBlock / 2, std::vector<uint8_t>(kBlock / 2, 1));
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCommandInformationUnit);
  Run({0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0}, 2 * kBlock, std::vector<uint8_t>(2 * kBlock, 1));
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCommandInformationUnit);
}

// SBC-3 5.45, WSNZ=0: NUMBER OF LOGICAL BLOCKS zero writes from the LBA to the end of the medium.
TEST_F(SbcExtTest, WriteSameOfZeroBlocksWritesToTheEnd) {
  std::vector<uint8_t> block(kBlock, 0x5c);
  const uint64_t from = kBlocks - 192;
  Run({0x41, 0, 0, 0, B(from, 8), B(from, 0), 0, 0, 0, 0}, kBlock, block);
  ExpectGood();
  auto d = Read(from - 1, 193);
  EXPECT_EQ(d[0], 0);  // the block before is untouched
  for (uint64_t b = 1; b <= 192; ++b) EXPECT_EQ(d[b * kBlock + 7], 0x5c) << b;
  // WRITE SAME(16), every block of the LUN (within MAXIMUM WRITE SAME LENGTH here).
  std::vector<uint8_t> other(kBlock, 0x21);
  Run({0x93, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, kBlock, other);
  ExpectGood();
  EXPECT_EQ(Read(0, 1)[3], 0x21);
  EXPECT_EQ(Read(kBlocks - 1, 1)[3], 0x21);
  // With UNMAP and a zero block: the blocks from the LBA to the end are deallocated.
  Run({0x41, 0x08, 0, 0, B(from, 8), B(from, 0), 0, 0, 0, 0}, kBlock,
      std::vector<uint8_t>(kBlock, 0));
  ExpectGood();
  EXPECT_EQ(Read(from - 1, 1)[3], 0x21);
  EXPECT_EQ(Read(from, 1)[3], 0);
  EXPECT_EQ(Read(kBlocks - 1, 1)[3], 0);
}

TEST_F(SbcExtTest, WriteSameUnmapWithZerosDeallocates) {
  Write(0, std::vector<uint8_t>(kChunkBlocks * kBlock, 0x99));
  const uint16_t n = static_cast<uint16_t>(kChunkBlocks);
  Run({0x41, 0x08, 0, 0, 0, 0, 0, B(n, 8), B(n, 0), 0}, kBlock, std::vector<uint8_t>(kBlock, 0));
  ExpectGood();
  EXPECT_EQ(ram_->allocated_bytes(), 0u);
  EXPECT_EQ(LbaStatus(0).first, 1);
  EXPECT_EQ(Read(0, 1), std::vector<uint8_t>(kBlock, 0));
  // Non-zero data with UNMAP is written, not unmapped.
  Run({0x41, 0x08, 0, 0, 0, 0, 0, 0, 2, 0}, kBlock, std::vector<uint8_t>(kBlock, 3));
  ExpectGood();
  EXPECT_EQ(Read(1, 1), std::vector<uint8_t>(kBlock, 3));
}

TEST_F(SbcExtTest, WriteSame16NdobWritesZerosWithoutData) {
  Write(4, std::vector<uint8_t>(4 * kBlock, 0xAA));
  Run({0x93, 0x01, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 2, 0, 0});
  ExpectGood();
  auto d = Read(4, 4);
  EXPECT_EQ(d[0], 0xAA);
  EXPECT_EQ(d[kBlock], 0);
  EXPECT_EQ(d[3 * kBlock - 1], 0);
  EXPECT_EQ(d[3 * kBlock], 0xAA);
}

// ---- COMPARE AND WRITE -------------------------------------------------------------------------

TEST_F(SbcExtTest, CompareAndWriteWritesOnMatch) {
  Write(20, std::vector<uint8_t>(2 * kBlock, 0x10));
  std::vector<uint8_t> out(4 * kBlock, 0x10);
  std::fill(out.begin() + 2 * kBlock, out.end(), 0x20);
  Run({0x89, 0, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0, 2, 0, 0}, 4 * kBlock, out);
  ExpectGood();
  EXPECT_EQ(Read(20, 2), std::vector<uint8_t>(2 * kBlock, 0x20));
}

TEST_F(SbcExtTest, CompareAndWriteMiscompareReportsFirstDifferingByte) {
  Write(20, std::vector<uint8_t>(2 * kBlock, 0x10));
  std::vector<uint8_t> out(4 * kBlock, 0x10);
  out[kBlock + 17] = 0x11;  // verify data differs at byte 529
  std::fill(out.begin() + 2 * kBlock, out.end(), 0x20);
  Run({0x89, 0, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0, 2, 0, 0}, 4 * kBlock, out);
  ExpectMiscompare(kBlock + 17);
  EXPECT_EQ(Read(20, 2), std::vector<uint8_t>(2 * kBlock, 0x10));  // nothing written
}

TEST_F(SbcExtTest, CompareAndWriteChecks) {
  std::vector<uint8_t> out(2 * kBlock, 0);
  Run({0x89, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});  // zero blocks: nothing to do
  ExpectGood();
  Run({0x89, 0, 0, 0, 0, 0, 0, 0, B(kBlocks, 8), B(kBlocks, 0), 0, 0, 0, 1, 0, 0}, 2 * kBlock, out);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  Run({0x89, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, 2 * kBlock, out);  // WRPROTECT
  ExpectInvalidField(1);
  // Data-Out of 4 blocks for NUMBER OF LOGICAL BLOCKS 1 (libiscsi InvalidDataOutSize).
  Run({0x89, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, 4 * kBlock,
      std::vector<uint8_t>(4 * kBlock, 0));
  ExpectInvalidField(13);
  // 256 blocks wrap to NUMBER OF LOGICAL BLOCKS 0 with a Data-Out (libiscsi
  // CompareAndWrite.Simple).
  Run({0x89, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 2 * kBlock, out);
  ExpectInvalidField(13);
}

// Several threads (as reactors would) increment a counter in LBA 0 with COMPARE AND WRITE, retrying
// on MISCOMPARE, while other threads WRITE a neighbouring block in the same chunk. Every successful
// CAW must count: the final value equals the number of GOOD completions.
TEST_F(SbcExtTest, CompareAndWriteIsAtomicAcrossThreads) {
  constexpr int kThreads = 4, kIncrements = 200;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Nexus nexus("iqn.thread,i,0x" + std::to_string(t + 2), 1);
      Runner r(target_, nexus);
      r.Run({0x00});
      for (int i = 0; i < kIncrements;) {
        Task& rd = r.Run({0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, kBlock);
        ASSERT_EQ(rd.status, ScsiStatus::kGood);
        const auto cur = r.DataIn();
        std::vector<uint8_t> out(2 * kBlock);
        std::memcpy(out.data(), cur.data(), kBlock);
        StoreBe64(&out[kBlock], LoadBe64(cur.data()) + 1);
        Task& caw = r.Run({0x89, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, 2 * kBlock, out);
        if (caw.status == ScsiStatus::kGood) {
          ++i;
          ++good;
        } else {
          ASSERT_EQ(caw.sense[2] & 0x0F, static_cast<uint8_t>(SenseKey::kMiscompare));
        }
      }
    });
  }
  threads.emplace_back([&] {
    Nexus nexus("iqn.writer,i,0x9", 1);
    Runner r(target_, nexus);
    r.Run({0x00});
    std::vector<uint8_t> data(kBlock, 0x5C);
    while (!stop.load()) {
      ASSERT_EQ(r.Run({0x2A, 0, 0, 0, 0, 1, 0, 0, 1, 0}, kBlock, data).status, ScsiStatus::kGood);
    }
  });
  for (int t = 0; t < kThreads; ++t) threads[t].join();
  stop = true;
  threads.back().join();
  EXPECT_EQ(good.load(), kThreads * kIncrements);
  EXPECT_EQ(LoadBe64(Read(0, 1).data()), static_cast<uint64_t>(kThreads * kIncrements));
}

// ---- WRITE ATOMIC(16) ---------------------------------------------------------------------------

std::vector<uint8_t> WriteAtomic16Cdb(uint64_t lba, uint16_t blocks, uint8_t byte1 = 0,
                                      uint16_t boundary = 0) {
  std::vector<uint8_t> c(16, 0);
  c[0] = 0x9C;
  c[1] = byte1;
  StoreBe64(&c[2], lba);
  StoreBe16(&c[10], boundary);
  StoreBe16(&c[12], blocks);
  return c;
}

TEST_F(SbcExtTest, WriteAtomic16WritesTheWholeRange) {
  const std::vector<uint8_t> data(64 * kBlock, 0xA7);
  // DPO and FUA; across two ram chunks.
  Task& t = runner_->RunCdb(WriteAtomic16Cdb(kChunkBlocks - 32, 64, 0x18),
                            static_cast<uint32_t>(data.size()), data);
  EXPECT_EQ(t.status, ScsiStatus::kGood);
  EXPECT_EQ(Read(kChunkBlocks - 32, 64), data);
}

// Runs `cdb` with data_blocks blocks of Data-Out.
Task& RunWithBlocks(Runner& runner, const std::vector<uint8_t>& cdb, uint32_t data_blocks) {
  return runner.RunCdb(cdb, data_blocks * kBlock, std::vector<uint8_t>(data_blocks * kBlock, 0x3C));
}

TEST_F(SbcExtTest, WriteAtomic16Checks) {
  // SBC-4 5.49: a TRANSFER LENGTH of zero writes nothing and is GOOD; the LBA must still be in
  // range, checked before the atomic limits.
  RunWithBlocks(*runner_, WriteAtomic16Cdb(0, 0), 0);
  ExpectGood();
  RunWithBlocks(*runner_, WriteAtomic16Cdb(kBlocks, 0), 0);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  RunWithBlocks(*runner_, WriteAtomic16Cdb(kBlocks - 1, 4000), 4000);  // past the end and too long
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  RunWithBlocks(*runner_, WriteAtomic16Cdb(0, 1, 0x20),
                1);  // WRPROTECT without protection information
  ExpectInvalidField(1);
  RunWithBlocks(*runner_, WriteAtomic16Cdb(0, 1, 0, 1), 1);  // ATOMIC BOUNDARY: not offered
  ExpectInvalidField(10);
  // Beyond MAXIMUM ATOMIC TRANSFER LENGTH (1 MiB on ram).
  RunWithBlocks(*runner_, WriteAtomic16Cdb(0, 2049), 2049);
  ExpectInvalidField(12);
  // All or nothing: less data than the TRANSFER LENGTH is refused whole, nothing written.
  RunWithBlocks(*runner_, WriteAtomic16Cdb(16, 8), 4);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCommandInformationUnit);
  EXPECT_EQ(Read(16, 8), std::vector<uint8_t>(8 * kBlock, 0));
  RunWithBlocks(*runner_, WriteAtomic16Cdb(kBlocks - 2048, 2048), 2048);
  ExpectGood();
}

// A store with the limits a test gives it, else the ram store's behaviour.
class LimitedAtomicStore final : public backing::BackingStore {
 public:
  LimitedAtomicStore(uint64_t size, AtomicLimits limits)
      : ram_(backing::NewRamStore(size)), limits_(limits) {}
  std::string_view kind() const override { return "ram"; }
  uint64_t size_bytes() const override { return ram_->size_bytes(); }
  bool persistent() const override { return false; }
  AtomicLimits atomic_limits() const override { return limits_; }
  void WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                   backing::IoCompletion done) override {
    ram_->WriteAtomic(slot, offset, buf, fua, done);
  }
  void Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf,
            backing::IoCompletion done) override {
    ram_->Read(slot, offset, buf, done);
  }
  void Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
             backing::IoCompletion done) override {
    ram_->Write(slot, offset, buf, fua, done);
  }
  void Flush(unsigned slot, backing::IoCompletion done) override { ram_->Flush(slot, done); }

 private:
  std::unique_ptr<backing::RamStore> ram_;
  const AtomicLimits limits_;
};

class WriteAtomicLimitsTest : public ::testing::Test {
 protected:
  void Use(backing::BackingStore::AtomicLimits limits) {
    target_.name = "iqn.2026-11.io.iscsigw:t1";
    LunConfig c;
    c.id = 0;
    c.block_size = kBlock;
    c.naa_id = 0x6001405000000001ull;
    target_.luns.push_back(
        std::make_shared<Lun>(c, std::make_shared<LimitedAtomicStore>(kBlocks * kBlock, limits)));
    runner_ = std::make_unique<Runner>(target_, nexus_);
    runner_->Run({0x00});
  }
  std::vector<uint8_t> BlockLimits() {
    EXPECT_EQ(runner_->Run({0x12, 1, 0xB0, 0, 255, 0}, 255).status, ScsiStatus::kGood);
    return runner_->DataIn();
  }
  // REPORT SUPPORTED OPERATION CODES for one opcode: the SUPPORT field and the CDB usage data.
  std::vector<uint8_t> Rsoc(uint8_t op) {
    EXPECT_EQ(runner_->Run({0xA3, 0x0C, 0x01, op, 0, 0, 0, 0, 0, 255, 0, 0}, 255).status,
              ScsiStatus::kGood);
    return runner_->DataIn();
  }

  Nexus nexus_{"iqn.test,i,0x1", 1};
  TargetInfo target_;
  std::unique_ptr<Runner> runner_;
};

TEST_F(WriteAtomicLimitsTest, AlignmentIsEnforcedAndReported) {
  Use({64 * 1024, 64 * 1024});  // an rbd-like unit: 128 blocks, aligned to 128
  const auto vpd = BlockLimits();
  ASSERT_EQ(vpd.size(), 64u);
  EXPECT_EQ(LoadBe32(&vpd[44]), 128u);  // MAXIMUM ATOMIC TRANSFER LENGTH
  EXPECT_EQ(LoadBe32(&vpd[48]), 128u);  // ATOMIC ALIGNMENT
  EXPECT_EQ(LoadBe32(&vpd[52]), 0u);    // ATOMIC TRANSFER LENGTH GRANULARITY
  auto run = [&](uint64_t lba, uint16_t blocks) {
    return RunWithBlocks(*runner_, WriteAtomic16Cdb(lba, blocks), blocks).status;
  };
  EXPECT_EQ(run(128, 128), ScsiStatus::kGood);
  EXPECT_EQ(run(256, 7), ScsiStatus::kGood);
  EXPECT_EQ(run(129, 8), ScsiStatus::kCheckCondition);
  ExpectSense(runner_->task(), SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);
  EXPECT_EQ(LoadBe16(&runner_->task().sense[16]), 2);  // the LBA
  EXPECT_EQ(run(0, 129), ScsiStatus::kCheckCondition);
  EXPECT_EQ(LoadBe16(&runner_->task().sense[16]), 12);  // the TRANSFER LENGTH
  const auto rsoc = Rsoc(0x9C);
  ASSERT_GE(rsoc.size(), 4u + 16u);
  EXPECT_EQ(rsoc[1] & 0x07, 0x03);  // supported as the standard says
  EXPECT_EQ(rsoc[5], 0xF8);         // WRPROTECT, DPO, FUA evaluated
}

TEST_F(WriteAtomicLimitsTest, AStoreWithoutAtomicWritesDoesNotOfferTheCommand) {
  Use({0, 0});
  const auto vpd = BlockLimits();
  ASSERT_EQ(vpd.size(), 64u);
  for (size_t i = 44; i < 64; i += 4) EXPECT_EQ(LoadBe32(&vpd[i]), 0u) << i;
  RunWithBlocks(*runner_, WriteAtomic16Cdb(0, 1), 1);
  ExpectSense(runner_->task(), SenseKey::kIllegalRequest, Asc::kInvalidCommandOperationCode);
  const auto rsoc = Rsoc(0x9C);
  ASSERT_GE(rsoc.size(), 4u);
  EXPECT_EQ(rsoc[1] & 0x07, 0x01);  // not supported
  // Nor in the list of all commands.
  ASSERT_EQ(runner_->Run({0xA3, 0x0C, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0}, 65535).status,
            ScsiStatus::kGood);
  const auto all = runner_->DataIn();
  for (size_t at = 4; at + 8 <= all.size(); at += 8) EXPECT_NE(all[at], 0x9C);
}

// ---- ORWRITE / VERIFY / WRITE AND VERIFY / PRE-FETCH -------------------------------------------

TEST_F(SbcExtTest, OrWriteOrsTheDataIn) {
  Write(3, std::vector<uint8_t>(kBlock, 0x0F));
  Run({0x8B, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0}, kBlock,
      std::vector<uint8_t>(kBlock, 0xF0));
  ExpectGood();
  EXPECT_EQ(Read(3, 1), std::vector<uint8_t>(kBlock, 0xFF));
  Run({0x8B, 0x20, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0}, kBlock,
      std::vector<uint8_t>(kBlock, 0));  // ORPROTECT
  ExpectInvalidField(1);
}

TEST_F(SbcExtTest, VerifyByteCheckModes) {
  std::vector<uint8_t> data(3 * kBlock);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i);
  Write(50, data);
  Run({0x2F, 0x02, 0, 0, 0, 50, 0, 0, 3, 0}, 3 * kBlock, data);  // BYTCHK=01b: match
  ExpectGood();
  auto bad = data;
  bad[2 * kBlock + 3] ^= 1;
  Run({0x2F, 0x02, 0, 0, 0, 50, 0, 0, 3, 0}, 3 * kBlock, bad);
  ExpectMiscompare(2 * kBlock + 3);
  Run({0x2F, 0x00, 0, 0, 0, 50, 0, 0, 3, 0});  // BYTCHK=00b: medium verification
  ExpectGood();
  Run({0x2F, 0x04, 0, 0, 0, 50, 0, 0, 3, 0});  // BYTCHK=10b reserved
  ExpectInvalidField(1);
  Run({0x2F, 0x20, 0, 0, 0, 50, 0, 0, 3, 0});  // VRPROTECT
  ExpectInvalidField(1);
  Run({0x2F, 0x00, 0, 0, B(kBlocks, 8), B(kBlocks, 0), 0, 0, 1, 0});
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  Run({0x2F, 0x02, 0, 0, 0, 50, 0, 0, 0, 0});  // zero blocks
  ExpectGood();
  // BYTCHK=11b: one block compared with each block of the range.
  Write(60, std::vector<uint8_t>(4 * kBlock, 0x3C));
  Run({0xAF, 0x06, 0, 0, 0, 60, 0, 0, 0, 4, 0, 0}, kBlock, std::vector<uint8_t>(kBlock, 0x3C));
  ExpectGood();
  Write(62, std::vector<uint8_t>(kBlock, 0x3D));
  Run({0x8F, 0x06, 0, 0, 0, 0, 0, 0, 0, 60, 0, 0, 0, 4, 0, 0}, kBlock,
      std::vector<uint8_t>(kBlock, 0x3C));
  ExpectMiscompare(2 * kBlock);
}

TEST_F(SbcExtTest, WriteAndVerifyWritesAndChecks) {
  std::vector<uint8_t> data(2 * kBlock, 0x6B);
  Run({0x2E, 0x02, 0, 0, 0, 70, 0, 0, 2, 0}, 2 * kBlock, data);
  ExpectGood();
  EXPECT_EQ(Read(70, 2), data);
  Run({0x8E, 0, 0, 0, 0, 0, 0, 0, 0, 71, 0, 0, 0, 1, 0, 0}, kBlock,
      std::vector<uint8_t>(kBlock, 1));
  ExpectGood();
  EXPECT_EQ(Read(71, 1), std::vector<uint8_t>(kBlock, 1));
  Run({0x2E, 0x04, 0, 0, 0, 70, 0, 0, 1, 0}, kBlock, data);  // reserved bit 2
  ExpectInvalidField(1);
  Run({0xAE, 0, 0, 0, B(kBlocks, 8), B(kBlocks, 0), 0, 0, 0, 1, 0, 0}, kBlock, data);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
}

TEST_F(SbcExtTest, PreFetchIsGoodInRangeAndChecksTheRange) {
  Run({0x34, 0, 0, 0, 0, 0, 0, 1, 0, 0});
  ExpectGood();
  Run({0x90, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});  // IMMED, to the end
  ExpectGood();
  Run({0x34, 0, 0, 0, B(kBlocks - 1, 8), B(kBlocks - 1, 0), 0, 0, 2, 0});
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
}

// ---- SANITIZE / READ DEFECT DATA ---------------------------------------------------------------

TEST_F(SbcExtTest, SanitizeBlockEraseDeallocatesEverything) {
  Write(0, std::vector<uint8_t>(kBlock, 1));
  Write(kBlocks - 1, std::vector<uint8_t>(kBlock, 1));
  Run({0x48, 0x02, 0, 0, 0, 0, 0, 0, 0, 0});
  ExpectGood();
  EXPECT_EQ(ram_->allocated_bytes(), 0u);
  EXPECT_EQ(Read(kBlocks - 1, 1), std::vector<uint8_t>(kBlock, 0));
  Run({0x48, 0x03, 0, 0, 0, 0, 0, 0, 0, 0});  // CRYPTOGRAPHIC ERASE: no encryption
  ExpectInvalidField(1);
  Run({0x48, 0x02, 0, 0, 0, 0, 0, 0, 4, 0}, 4, std::vector<uint8_t>(4, 0));  // needs no list
  ExpectInvalidField(7);
}

TEST_F(SbcExtTest, SanitizeOverwriteWritesThePattern) {
  std::vector<uint8_t> p = {0x01, 0, 0, 3, 0xA, 0xB, 0xC};  // OWCOUNT 1, 3-byte pattern
  Run({0x48, 0x01, 0, 0, 0, 0, 0, 0, 7, 0}, 7, p);
  ExpectGood();
  auto d = Read(kBlocks - 1, 1);
  EXPECT_EQ(d[0], 0xA);
  EXPECT_EQ(d[4], 0xB);
  EXPECT_EQ(d[kBlock - 1], static_cast<uint8_t>(0xA + ((kBlock - 1) % 3)));
  p[0] = 0;  // OWCOUNT 0
  Run({0x48, 0x01, 0, 0, 0, 0, 0, 0, 7, 0}, 7, p);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInParameterList);
}

TEST_F(SbcExtTest, ReadDefectDataReturnsAnEmptyList) {
  Run({0x37, 0, 0x18, 0, 0, 0, 0, 0, 32, 0}, 32);
  ExpectGood();
  auto d = runner_->DataIn();
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[1], 0x18);
  EXPECT_EQ(LoadBe16(&d[2]), 0);
  Run({0xB7, 0x10 | 0x05, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0}, 64);
  ExpectGood();
  d = runner_->DataIn();
  ASSERT_EQ(d.size(), 8u);
  EXPECT_EQ(d[1], 0x15);
  EXPECT_EQ(LoadBe32(&d[4]), 0u);
  Run({0x37, 0, 0x01, 0, 0, 0, 0, 0, 32, 0}, 32);  // reserved format
  ExpectInvalidField(2);
}

}  // namespace sbc_ext_test
}  // namespace iscsigw::scsi
