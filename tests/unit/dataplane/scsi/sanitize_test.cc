// SANITIZE and the sanitize operation (SBC-3 5.19, SBC-4 4.11 / 5.30) through Engine::Execute, on a
// RamStore whose write completions a test can hold back to see the operation in progress; and the
// control mode page's SWP bit (SPC-4 7.5.8) that write-protects the LUN; START STOP UNIT's reserved
// fields (SBC-3 5.25).
#include "dataplane/scsi/sanitize.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <memory>
#include <vector>

#include "base/endian.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/scsi/engine.h"
#include "dataplane/scsi/mode_pages.h"
#include "dataplane/scsi/sense.h"
#include "dataplane/scsi/task.h"
#include "tests/unit/dataplane/scsi/engine_runner.h"

namespace iscsigw::scsi {
namespace sanitize_test {

constexpr uint32_t kBlock = 512;
constexpr uint64_t kBlocks = 8192;  // 4 MiB: four 1 MiB OVERWRITE pieces

// A RamStore whose Write/Unmap/Flush completions are queued while hold is set, so that a test sees
// an operation between its store calls; Release runs them (optionally failing them).
class HoldStore final : public backing::BackingStore {
 public:
  explicit HoldStore(uint64_t size) : ram_(backing::NewRamStore(size)) {}

  bool hold = false;

  size_t held() const { return held_.size(); }
  // Runs the oldest held completion with its own result, or with `err` when err != 0.
  void ReleaseOne(int err = 0) {
    ASSERT_FALSE(held_.empty());
    Held h = held_.front();
    held_.pop_front();
    h.done(err != 0 ? err : h.err);
  }
  void ReleaseAll() {
    hold = false;
    while (!held_.empty()) ReleaseOne();
  }

  std::string_view kind() const override { return "ram"; }
  uint64_t size_bytes() const override { return ram_->size_bytes(); }
  bool persistent() const override { return false; }
  bool thin_provisioned() const override { return ram_->thin_provisioned(); }
  uint64_t unmap_granularity() const override { return ram_->unmap_granularity(); }
  void Unmap(unsigned slot, uint64_t offset, uint64_t len, backing::IoCompletion done) override {
    Capture(done, [&](backing::IoCompletion c) { ram_->Unmap(slot, offset, len, c); });
  }
  void GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                       backing::IoCompletion done) override {
    ram_->GetProvisioning(slot, offset, max_len, out, done);
  }
  size_t MapRead(uint64_t offset, uint64_t len, std::span<backing::Segment> segs) override {
    return ram_->MapRead(offset, len, segs);
  }
  void Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf,
            backing::IoCompletion done) override {
    ram_->Read(slot, offset, buf, done);
  }
  void Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
             backing::IoCompletion done) override {
    Capture(done, [&](backing::IoCompletion c) { ram_->Write(slot, offset, buf, fua, c); });
  }
  void Flush(unsigned slot, backing::IoCompletion done) override {
    Capture(done, [&](backing::IoCompletion c) { ram_->Flush(slot, c); });
  }

 private:
  struct Held {
    backing::IoCompletion done;
    int err;
  };
  template <typename F>
  void Capture(backing::IoCompletion done, F&& op) {
    if (!hold) return op(done);
    int err = 0;
    op(backing::IoCompletion{[](void* ctx, int e) { *static_cast<int*>(ctx) = e; }, &err});
    held_.push_back(Held{done, err});
  }

  std::unique_ptr<backing::RamStore> ram_;
  std::deque<Held> held_;
};

class SanitizeTest : public ::testing::Test {
 protected:
  SanitizeTest() : nexus_("iqn.test,i,0x1", 1), other_("iqn.other,i,0x2", 1) {
    store_ = std::make_shared<HoldStore>(kBlocks * kBlock);
    target_.name = "iqn.2026-11.io.iscsigw:t1";
    LunConfig c;
    c.id = 0;
    c.block_size = kBlock;
    c.naa_id = 0x6001405000000001ull;
    target_.luns.push_back(std::make_shared<Lun>(c, store_));
    Run({0x00});  // consume the power-on unit attentions
    Run({0x00}, 0, {}, &other_);
  }

  Lun& lun() { return *target_.luns[0]; }

  // Runs one CDB; returns whether the task completed before Execute returned.
  bool Run(std::initializer_list<uint8_t> cdb, uint32_t expected = 0,
           const std::vector<uint8_t>& data_out = {}, Nexus* nexus = nullptr) {
    runner_.Start(cdb, expected, data_out, nexus);
    EXPECT_LE(completions_, 1);
    return completions_ == 1;
  }
  std::vector<uint8_t> DataIn() const { return runner_.DataIn(); }
  void ExpectGood() {
    EXPECT_EQ(completions_, 1);
    EXPECT_EQ(task_.status, ScsiStatus::kGood);
  }
  void ExpectCheck(SenseKey key, Asc asc) { ExpectSense(task_, key, asc); }
  void ExpectInvalidFieldInCdb(uint16_t byte) {
    ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);
    EXPECT_EQ(task_.sense[15] & 0xC0, 0xC0);  // SKSV, C/D=1
    EXPECT_EQ(LoadBe16(&task_.sense[16]), byte);
  }
  // NOT READY / SANITIZE IN PROGRESS with a progress indication; returns the progress.
  uint16_t ExpectInProgress() {
    EXPECT_EQ(task_.status, ScsiStatus::kCheckCondition);
    EXPECT_EQ(task_.sense[2] & 0x0F, static_cast<uint8_t>(SenseKey::kNotReady));
    EXPECT_EQ(task_.sense[12], 0x04);
    EXPECT_EQ(task_.sense[13], 0x1B);
    EXPECT_EQ(task_.sense[15], 0x80);  // SKSV: PROGRESS INDICATION
    return LoadBe16(&task_.sense[16]);
  }
  void Write10(uint64_t lba, uint8_t fill) {
    Run({0x2A, 0, 0, 0, static_cast<uint8_t>(lba >> 8), static_cast<uint8_t>(lba), 0, 0, 1, 0},
        kBlock, std::vector<uint8_t>(kBlock, fill));
  }
  std::vector<uint8_t> Read10(uint64_t lba) {
    Run({0x28, 0, 0, 0, static_cast<uint8_t>(lba >> 8), static_cast<uint8_t>(lba), 0, 0, 1, 0},
        kBlock);
    EXPECT_EQ(task_.status, ScsiStatus::kGood);
    return DataIn();
  }
  // SANITIZE OVERWRITE with OWCOUNT 1 and `pattern`; byte1 adds IMMED/AUSE.
  bool Overwrite(std::vector<uint8_t> pattern, uint8_t byte1 = 0x01) {
    std::vector<uint8_t> p = {0x01, 0, static_cast<uint8_t>(pattern.size() >> 8),
                              static_cast<uint8_t>(pattern.size())};
    p.insert(p.end(), pattern.begin(), pattern.end());
    const uint16_t n = static_cast<uint16_t>(p.size());
    return Run(
        {0x48, byte1, 0, 0, 0, 0, 0, static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n), 0}, n,
        p);
  }
  // MODE SELECT(6) of the control page with SWP set or clear.
  void SelectSwp(bool swp, Nexus* nexus = nullptr) {
    std::vector<uint8_t> p(4 + 12, 0);
    p[4] = 0x0A;
    p[5] = 0x0A;
    p[6] = 0x02;
    p[7] = 0x10;
    p[8] = swp ? 0x08 : 0x00;
    Run({0x15, 0x10, 0, 0, 16, 0}, 16, p, nexus);
  }

  Nexus nexus_;
  Nexus other_;
  std::shared_ptr<HoldStore> store_;
  TargetInfo target_;
  Runner runner_{target_, nexus_};
  Task& task_ = runner_.task();
  int& completions_ = runner_.completions();
};

// ---- VPD and parameter checks
// --------------------------------------------------------------------

TEST_F(SanitizeTest, BlockDeviceCharacteristicsReportWabereq) {
  Run({0x12, 0x01, 0xB1, 0, 64, 0}, 64);
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 64u);
  EXPECT_EQ(d[7] >> 6, 0x1);          // WABEREQ=01b: reads after BLOCK ERASE return GOOD
  EXPECT_EQ((d[7] >> 4) & 0x3, 0x0);  // WACEREQ=00b: no CRYPTOGRAPHIC ERASE
}

TEST_F(SanitizeTest, OverwriteParameterListLengthOutsideHeaderPlusBlockIsInvalidFieldInCdb) {
  std::vector<uint8_t> p(kBlock + 8, 0);
  p[0] = 0x01;
  StoreBe16(&p[2], kBlock);
  for (uint16_t plen : {0, 1, 2, 3, 4, static_cast<int>(kBlock + 5)}) {
    Run({0x48, 0x01, 0, 0, 0, 0, 0, static_cast<uint8_t>(plen >> 8), static_cast<uint8_t>(plen), 0},
        plen, std::vector<uint8_t>(p.begin(), p.begin() + plen));
    ExpectInvalidFieldInCdb(7);
  }
  EXPECT_EQ(lun().sanitize().mode(), SanitizeState::Mode::kIdle);
  // A whole block of pattern (PARAMETER LIST LENGTH = block length + 4) is the largest allowed.
  Overwrite(std::vector<uint8_t>(kBlock, 0x5A));
  ExpectGood();
  EXPECT_EQ(Read10(kBlocks - 1), std::vector<uint8_t>(kBlock, 0x5A));
}

TEST_F(SanitizeTest, OverwriteParameterListErrors) {
  std::vector<uint8_t> p = {0x00, 0, 0, 4, 1, 2, 3, 4};  // OVERWRITE COUNT 0 is reserved
  Run({0x48, 0x01, 0, 0, 0, 0, 0, 0, 8, 0}, 8, p);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInParameterList);
  p = {0x01, 0, 0, 0, 1, 2, 3, 4};  // INITIALIZATION PATTERN LENGTH 0
  Run({0x48, 0x01, 0, 0, 0, 0, 0, 0, 8, 0}, 8, p);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInParameterList);
  p = {0x01, 0, 0, 4, 1, 2, 3, 4};
  Run({0x48, 0x01, 0, 0, 0, 0, 0, 0, 8, 0}, 8, std::vector<uint8_t>(p.begin(), p.begin() + 6));
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
  EXPECT_EQ(lun().sanitize().mode(), SanitizeState::Mode::kIdle);
}

// ---- the operation in progress
// -------------------------------------------------------------------

TEST_F(SanitizeTest, ImmedOverwriteReportsProgressAndRefusesCommandsUntilDone) {
  Write10(7, 0x11);
  store_->hold = true;
  ASSERT_TRUE(Overwrite({0xAB, 0xCD}, 0x81));  // IMMED=1: status before the operation ends
  ExpectGood();
  EXPECT_EQ(lun().sanitize().mode(), SanitizeState::Mode::kInProgress);

  Run({0x00});  // TEST UNIT READY
  EXPECT_EQ(ExpectInProgress(), 0);
  store_->ReleaseOne();                            // first of four 1 MiB pieces
  Run({0x28, 0, 0, 0, 0, 7, 0, 0, 1, 0}, kBlock);  // READ(10)
  EXPECT_EQ(ExpectInProgress(), 0xFFFF / 4);
  Run({0x00}, 0, {}, &other_);  // every I_T nexus sees it
  ExpectInProgress();
  Write10(8, 0x22);
  ExpectInProgress();
  Overwrite({0x01});  // a second SANITIZE too
  ExpectInProgress();

  // Still processed: INQUIRY, REPORT LUNS, and REQUEST SENSE, which reports the progress.
  Run({0x12, 0, 0, 0, 36, 0}, 36);
  ExpectGood();
  Run({0xA0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0}, 16);
  ExpectGood();
  Run({0x03, 0, 0, 0, 18, 0}, 18);
  ExpectGood();
  auto s = DataIn();
  ASSERT_EQ(s.size(), 18u);
  EXPECT_EQ(s[2] & 0x0F, static_cast<uint8_t>(SenseKey::kNotReady));
  EXPECT_EQ(s[12], 0x04);
  EXPECT_EQ(s[13], 0x1B);
  EXPECT_EQ(s[15], 0x80);
  EXPECT_EQ(LoadBe16(&s[16]), 0xFFFF / 4);
  Run({0x03, 0x01, 0, 0, 252, 0}, 252);  // descriptor format: sense key specific descriptor
  ExpectGood();
  s = DataIn();
  ASSERT_EQ(s.size(), 16u);
  EXPECT_EQ(s[0], 0x72);
  EXPECT_EQ(s[8], 0x02);
  EXPECT_EQ(s[12], 0x80);
  EXPECT_EQ(LoadBe16(&s[13]), 0xFFFF / 4);

  // SBC-4 4.11.3: a logical unit reset does not stop it.
  Engine::ResetLun(lun(), &nexus_);
  EXPECT_EQ(lun().sanitize().mode(), SanitizeState::Mode::kInProgress);

  store_->ReleaseAll();  // the remaining pieces and the flush
  EXPECT_EQ(lun().sanitize().mode(), SanitizeState::Mode::kIdle);
  Run({0x00});
  ExpectGood();
  Run({0x03, 0, 0, 0, 18, 0}, 18);
  EXPECT_EQ(DataIn()[2] & 0x0F, static_cast<uint8_t>(SenseKey::kNoSense));
  auto d = Read10(7);
  EXPECT_EQ(d[0], 0xAB);
  EXPECT_EQ(d[1], 0xCD);
  EXPECT_EQ(d[kBlock - 1], 0xCD);
}

TEST_F(SanitizeTest, WithoutImmedTheCommandCompletesWhenTheOperationEnds) {
  store_->hold = true;
  EXPECT_FALSE(Run({0x48, 0x02, 0, 0, 0, 0, 0, 0, 0, 0}));  // BLOCK ERASE, IMMED=0
  EXPECT_EQ(lun().sanitize().mode(), SanitizeState::Mode::kInProgress);
  Task& sanitize = task_;
  int* done = &completions_;
  EXPECT_GT(store_->held(), 0u);
  store_->ReleaseAll();
  EXPECT_EQ(*done, 1);
  EXPECT_EQ(sanitize.status, ScsiStatus::kGood);
  EXPECT_EQ(lun().sanitize().mode(), SanitizeState::Mode::kIdle);
}

TEST_F(SanitizeTest, FailedOperationEntersFailureModeUntilExitOrSuccess) {
  // AUSE=0: only a successful SANITIZE leaves failure mode.
  store_->hold = true;
  EXPECT_FALSE(Overwrite({0x01}));
  store_->ReleaseOne(EIO);
  EXPECT_EQ(task_.status, ScsiStatus::kCheckCondition);  // the waiting SANITIZE reports it
  ExpectCheck(SenseKey::kMediumError, Asc::kWriteError);
  EXPECT_EQ(lun().sanitize().mode(), SanitizeState::Mode::kFailed);
  store_->ReleaseAll();

  Run({0x00});
  ExpectCheck(SenseKey::kMediumError, kAscSanitizeCommandFailed);
  Run({0x03, 0, 0, 0, 18, 0}, 18);
  ExpectGood();
  EXPECT_EQ(DataIn()[2] & 0x0F, static_cast<uint8_t>(SenseKey::kMediumError));
  EXPECT_EQ(DataIn()[12], 0x31);
  EXPECT_EQ(DataIn()[13], 0x03);
  Run({0x48, 0x1F, 0, 0, 0, 0, 0, 0, 0, 0});  // EXIT FAILURE MODE refused: AUSE was 0
  ExpectInvalidFieldInCdb(1);
  Run({0x48, 0x02, 0, 0, 0, 0, 0, 0, 0, 0});  // a successful SANITIZE clears it
  ExpectGood();
  Run({0x00});
  ExpectGood();

  // AUSE=1: EXIT FAILURE MODE is allowed.
  store_->hold = true;
  EXPECT_FALSE(Overwrite({0x01}, 0x21));
  store_->ReleaseOne(EIO);
  store_->ReleaseAll();
  EXPECT_EQ(lun().sanitize().mode(), SanitizeState::Mode::kFailed);
  Run({0x48, 0x1F, 0, 0, 0, 0, 0, 0, 0, 0});
  ExpectGood();
  Run({0x00});
  ExpectGood();
  Run({0x48, 0x1F, 0, 0, 0, 0, 0, 0, 0, 0});  // outside failure mode: nothing to do
  ExpectGood();
}

// ---- software write protect --------------------------------------------------------------------

TEST_F(SanitizeTest, SwpIsChangeableAndWriteProtectsTheLun) {
  Run({0x1A, 0x08, 0x4A, 0, 255, 0}, 255);  // MODE SENSE(6), changeable control page
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 4u + 12u);
  EXPECT_EQ(d[4 + 4], 0x08);  // SWP

  Write10(3, 0x33);
  ExpectGood();
  SelectSwp(true);
  ExpectGood();
  EXPECT_TRUE(lun().mode_pages().software_write_protect());
  Run({0x1A, 0x08, 0x0A, 0, 255, 0}, 255);  // current values: SWP, and WP in the header
  d = DataIn();
  EXPECT_EQ(d[2] & 0x80, 0x80);
  EXPECT_EQ(d[4 + 4] & 0x08, 0x08);

  Run({0x00}, 0, {}, &other_);  // the other nexus learns of the change first
  ExpectCheck(SenseKey::kUnitAttention, Asc::kModeParametersChanged);
  Write10(3, 0x44);
  ExpectCheck(SenseKey::kDataProtect, Asc::kWriteProtected);
  Run({0x2A, 0, 0, 0, 0, 3, 0, 0, 1, 0}, kBlock, std::vector<uint8_t>(kBlock, 0x44), &other_);
  ExpectCheck(SenseKey::kDataProtect, Asc::kWriteProtected);
  Overwrite({0x01});
  ExpectCheck(SenseKey::kDataProtect, Asc::kWriteProtected);
  Run({0x48, 0x02, 0, 0, 0, 0, 0, 0, 0, 0});
  ExpectCheck(SenseKey::kDataProtect, Asc::kWriteProtected);
  EXPECT_EQ(Read10(3), std::vector<uint8_t>(kBlock, 0x33));  // reads still work

  SelectSwp(false);
  ExpectGood();
  Write10(3, 0x44);
  ExpectGood();
  EXPECT_EQ(Read10(3), std::vector<uint8_t>(kBlock, 0x44));
}

// ---- START STOP UNIT ----------------------------------------------------------------------------

TEST_F(SanitizeTest, StartStopUnitRefusesReservedFields) {
  Run({0x1B, 0x01, 0, 0, 0x01, 0});  // IMMED, START
  ExpectGood();
  Run({0x1B, 0x02, 0, 0, 0x01, 0});  // byte 1 bits 7..1 reserved
  ExpectInvalidFieldInCdb(1);
  Run({0x1B, 0, 0x01, 0, 0x01, 0});  // byte 2 reserved
  ExpectInvalidFieldInCdb(2);
  Run({0x1B, 0, 0, 0x10, 0x01, 0});  // byte 3 bits 7..4 reserved
  ExpectInvalidFieldInCdb(3);
  Run({0x1B, 0, 0, 0, 0x09, 0});  // byte 4 bit 3 reserved
  ExpectInvalidFieldInCdb(4);
  EXPECT_EQ(task_.sense[15] & 0x0F, 0x08 | 3);  // BPV, bit 3
}

TEST(ModePagesSwp, SavedSwpRoundTrips) {
  ModePages a(ModePages::Values{});
  EXPECT_EQ(a.Serialize(), "");
  a.SetSaved(ModePages::Values{true, true});
  EXPECT_EQ(a.Serialize(), "mode swp=1\n");
  ModePages b(ModePages::Values{});
  b.Restore(a.Serialize());
  EXPECT_TRUE(b.software_write_protect());
  EXPECT_TRUE(b.write_cache_enabled());
  ModePages c(ModePages::Values{});
  c.Restore("mode wce=0\n");  // a blob written before SWP existed
  EXPECT_FALSE(c.write_cache_enabled());
  EXPECT_FALSE(c.software_write_protect());
}

}  // namespace sanitize_test
}  // namespace iscsigw::scsi
