// SCSI engine tests on a RamStore and on a fault-injecting FakeStore: one command at a time through
// Engine::Execute, asserting on status, sense bytes and Data-In.
#include "dataplane/scsi/engine.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "base/endian.h"
#include "dataplane/backing/null_store.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/scsi/sense.h"
#include "dataplane/scsi/task.h"

namespace iscsigw::scsi {
namespace engine_test {

constexpr uint32_t kBlock = 512;
constexpr uint64_t kBlocks = 4096;  // 2 MiB LUN: spans two RamStore chunks

// A store that records every call and can fail or defer completions.
class FakeStore final : public backing::BackingStore {
 public:
  explicit FakeStore(uint64_t size) : data_(size, 0) {}

  std::string_view kind() const override { return "fake"; }
  uint64_t size_bytes() const override { return data_.size(); }
  bool persistent() const override { return true; }
  int ready() const override { return ready_err; }
  bool preferred() const override { return preferred_path; }

  void Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf,
            backing::IoCompletion done) override {
    ++reads;
    last_slot = slot;
    last_offset = offset;
    last_len = buf.size();
    if (read_err == 0) std::memcpy(buf.data(), data_.data() + offset, buf.size());
    Finish(done, read_err);
  }
  void Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
             backing::IoCompletion done) override {
    ++writes;
    last_slot = slot;
    last_offset = offset;
    last_len = buf.size();
    last_fua = fua;
    if (write_err == 0) std::memcpy(data_.data() + offset, buf.data(), buf.size());
    Finish(done, write_err);
  }
  void Flush(unsigned slot, backing::IoCompletion done) override {
    ++flushes;
    Finish(done, flush_err);
  }

  // Runs completions deferred while `deferred` was set (as a file store's would run later).
  void RunDeferred() {
    auto pending = std::move(pending_);
    pending_.clear();
    for (auto& [done, err] : pending) done(err);
  }

  int reads = 0, writes = 0, flushes = 0;
  unsigned last_slot = 0;
  uint64_t last_offset = 0, last_len = 0;
  bool last_fua = false;
  int read_err = 0, write_err = 0, flush_err = 0;
  int ready_err = 0;           // what ready() answers
  bool preferred_path = true;  // what preferred() answers
  bool deferred = false;
  std::vector<uint8_t>& data() { return data_; }

 private:
  void Finish(backing::IoCompletion done, int err) {
    if (deferred) {
      pending_.emplace_back(done, err);
    } else {
      done(err);
    }
  }
  std::vector<uint8_t> data_;
  std::vector<std::pair<backing::IoCompletion, int>> pending_;
};

LunConfig Config(uint64_t id, bool read_only = false) {
  LunConfig c;
  c.id = id;
  c.block_size = kBlock;
  c.read_only = read_only;
  c.serial = "SER" + std::to_string(id);
  c.naa_id = 0x6001405000000000ull + id;
  c.vendor = "ISCSIGW";
  c.product = "ramdisk";
  c.revision = "0001";
  return c;
}

class EngineTest : public ::testing::Test {
 protected:
  EngineTest() {
    ram_ = std::shared_ptr<backing::RamStore>(backing::NewRamStore(kBlocks * kBlock));
    target_.name = "iqn.2026-11.io.iscsigw:t1";
    target_.tpgt = 1;
    target_.relative_port_id = 1;
    target_.luns.push_back(std::make_shared<Lun>(Config(0), ram_));
    buf_.resize(1 << 20);
  }

  // Adds a LUN backed by `store`.
  Lun& AddLun(uint64_t id, std::shared_ptr<backing::BackingStore> store, bool read_only = false) {
    target_.luns.push_back(std::make_shared<Lun>(Config(id, read_only), std::move(store)));
    return *target_.luns.back();
  }

  // Executes `cdb` on `lun` through `nexus` (default: a nexus whose power-on UA was consumed).
  void Run(std::initializer_list<uint8_t> cdb, uint64_t lun = 0, uint32_t expected = 4096,
           const std::vector<uint8_t>& data_out = {}, Nexus* nexus = nullptr) {
    task_ = Task{};
    std::copy(cdb.begin(), cdb.end(), task_.cdb.begin());
    task_.cdb_len = 16;
    task_.lun = lun;
    task_.expected_length = expected;
    task_.nexus = nexus != nullptr ? nexus : &nexus_;
    task_.buf = buf_.data();
    task_.buf_cap = static_cast<uint32_t>(buf_.size());
    if (!data_out.empty()) {
      std::memcpy(buf_.data(), data_out.data(), data_out.size());
      task_.data_out_len = static_cast<uint32_t>(data_out.size());
      task_.dir = DataDirection::kWrite;
    }
    completions_ = 0;
    task_.complete = [](Task*, void* ctx) { ++*static_cast<int*>(ctx); };
    task_.complete_ctx = &completions_;
    Engine::Execute(target_, task_);
  }

  void ClearPowerOn(Nexus& nexus, uint64_t lun = 0) {
    Run({0x00}, lun, 0, {}, &nexus);
    ASSERT_EQ(task_.status, ScsiStatus::kCheckCondition);
    Run({0x00}, lun, 0, {}, &nexus);
    ASSERT_EQ(task_.status, ScsiStatus::kGood);
  }

  std::vector<uint8_t> DataIn() const {
    std::vector<uint8_t> out;
    uint32_t total = 0;
    for (uint32_t i = 0; i < task_.in_seg_count; ++i) {
      out.insert(out.end(), task_.in_segs[i].data, task_.in_segs[i].data + task_.in_segs[i].len);
      total += task_.in_segs[i].len;
    }
    EXPECT_EQ(total, task_.in_len);
    return out;
  }

  void ExpectGood() {
    EXPECT_EQ(completions_, 1);
    EXPECT_EQ(task_.status, ScsiStatus::kGood);
    EXPECT_EQ(task_.sense_len, 0);
  }
  void ExpectCheck(SenseKey key, Asc asc) {
    EXPECT_EQ(completions_, 1);
    ASSERT_EQ(task_.status, ScsiStatus::kCheckCondition);
    ASSERT_EQ(task_.sense_len, kFixedSenseLength);
    EXPECT_EQ(task_.sense[0], 0x70);
    EXPECT_EQ(task_.sense[2] & 0x0F, static_cast<uint8_t>(key));
    EXPECT_EQ(task_.sense[12], asc.asc);
    EXPECT_EQ(task_.sense[13], asc.ascq);
    EXPECT_EQ(task_.in_len, 0u);
  }
  // INVALID FIELD IN CDB with the sense-key-specific field pointer at `byte`.
  void ExpectInvalidField(uint16_t byte) {
    ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);
    EXPECT_EQ(task_.sense[15] & 0xC0, 0xC0);  // SKSV=1, C/D=1
    EXPECT_EQ(LoadBe16(&task_.sense[16]), byte);
  }

  void SetUp() override { ClearPowerOn(nexus_); }

  std::shared_ptr<backing::RamStore> ram_;
  TargetInfo target_;
  Nexus nexus_{"iqn.1994-05.com.example:init,i,0x000000000001", 1};
  std::vector<uint8_t> buf_;
  Task task_;
  int completions_ = 0;
};

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + i / 512);
  return v;
}

// ------------------------------------------------------------------------------------------------
// TEST UNIT READY, unit attentions

TEST_F(EngineTest, FirstCommandReportsPowerOnThenClears) {
  Nexus fresh("iqn.1994-05.com.example:other,i,0x000000000002", 1);
  Run({0x00}, 0, 0, {}, &fresh);
  ExpectCheck(SenseKey::kUnitAttention, Asc::kPowerOnReset);
  Run({0x00}, 0, 0, {}, &fresh);
  ExpectGood();
}

TEST_F(EngineTest, InquiryNotBlockedByUnitAttention) {
  Nexus fresh("iqn.1994-05.com.example:other,i,0x000000000002", 1);
  Run({0x12, 0, 0, 0, 96, 0}, 0, 96, {}, &fresh);
  ExpectGood();
  EXPECT_EQ(task_.in_len, 66u);
  // The UA is still pending for the next ordinary command.
  Run({0x00}, 0, 0, {}, &fresh);
  ExpectCheck(SenseKey::kUnitAttention, Asc::kPowerOnReset);
}

TEST_F(EngineTest, ReportLunsNotBlockedByUnitAttention) {
  Nexus fresh("iqn.1994-05.com.example:other,i,0x000000000002", 1);
  Run({0xA0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, 0, 4096, {}, &fresh);
  ExpectGood();
}

TEST_F(EngineTest, UnsupportedOpcodeReportsUnitAttentionFirst) {
  Nexus fresh("iqn.1994-05.com.example:other,i,0x000000000002", 1);
  Run({0xC5}, 0, 0, {}, &fresh);
  ExpectCheck(SenseKey::kUnitAttention, Asc::kPowerOnReset);
  Run({0xC5}, 0, 0, {}, &fresh);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidCommandOperationCode);
}

TEST_F(EngineTest, RequestSenseReturnsAndClearsUnitAttention) {
  Nexus fresh("iqn.1994-05.com.example:other,i,0x000000000002", 1);
  Run({0x03, 0, 0, 0, 18, 0}, 0, 18, {}, &fresh);
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 18u);
  EXPECT_EQ(d[0], 0x70);
  EXPECT_EQ(d[2], 0x06);
  EXPECT_EQ(d[12], 0x29);
  EXPECT_EQ(d[13], 0x00);
  Run({0x00}, 0, 0, {}, &fresh);
  ExpectGood();
  Run({0x03, 0, 0, 0, 18, 0}, 0, 18, {}, &fresh);
  ExpectGood();
  d = DataIn();
  EXPECT_EQ(d[2], 0x00);  // NO SENSE
  EXPECT_EQ(d[12], 0x00);
}

TEST_F(EngineTest, RequestSenseDescriptorFormat) {
  Run({0x03, 0x01, 0, 0, 252, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 8u);
  EXPECT_EQ(d[0], 0x72);
  EXPECT_EQ(d[1], 0x00);
  EXPECT_EQ(d[7], 0x00);
}

TEST_F(EngineTest, RequestSenseTruncatesToAllocationLength) {
  Run({0x03, 0, 0, 0, 4, 0});
  ExpectGood();
  EXPECT_EQ(task_.in_len, 4u);
}

TEST_F(EngineTest, ResetLunRaisesBusDeviceResetOnOtherNexusOnly) {
  Nexus other("iqn.1994-05.com.example:other,i,0x000000000002", 1);
  ClearPowerOn(other);
  Engine::ResetLun(*target_.luns[0], &nexus_);
  Run({0x00});
  ExpectGood();  // the issuer sees nothing
  Run({0x00}, 0, 0, {}, &other);
  ExpectCheck(SenseKey::kUnitAttention, Asc::kBusDeviceReset);
  Run({0x00}, 0, 0, {}, &other);
  ExpectGood();
}

TEST_F(EngineTest, ResetLunSubsumedByPendingPowerOn) {
  Nexus other("iqn.1994-05.com.example:other,i,0x000000000002", 1);
  Run({0x12, 0, 0, 0, 36, 0}, 0, 36, {}, &other);  // first use: syncs the epoch, UA pending
  Engine::ResetLun(*target_.luns[0], &nexus_);
  Run({0x00}, 0, 0, {}, &other);
  ExpectCheck(SenseKey::kUnitAttention, Asc::kPowerOnReset);
  Run({0x00}, 0, 0, {}, &other);
  ExpectGood();
}

// A LUN deleted and created again under the same id is a new logical unit to a nexus that used
// the old one: POWER ON first, then its own events, whatever the old one's epoch had reached.
// Before, the nexus kept the old LUN's epoch and missed the new one's first events.
TEST_F(EngineTest, ALunCreatedAgainUnderTheSameIdStartsAfreshForEveryNexus) {
  Lun& old = *target_.luns[0];
  for (int i = 0; i < 3; ++i) old.RaiseUnitAttention(UnitAttention{0x2A, 0x09}, nullptr);
  old.NoteWriteError();
  for (int i = 0; i < 3; ++i) {  // the nexus takes the old LUN's events
    Run({0x00});
    ExpectCheck(SenseKey::kUnitAttention, Asc{0x2A, 0x09});
  }
  Run({0x00});
  ExpectGood();
  target_.luns[0] = std::make_shared<Lun>(Config(0), backing::NewRamStore(kBlocks * kBlock));
  Run({0x00});
  ExpectCheck(SenseKey::kUnitAttention, Asc::kPowerOnReset);
  Run({0x00});
  ExpectGood();
  target_.luns[0]->RaiseUnitAttention(UnitAttention{0x2A, 0x09}, nullptr);  // epoch 1
  Run({0x00});
  ExpectCheck(SenseKey::kUnitAttention, Asc{0x2A, 0x09});
  Run({0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, 0);  // no write error of the new LUN to hear of
  ExpectGood();
}

TEST_F(EngineTest, UnitAttentionQueueIsBoundedAndOrdered) {
  Lun& lun = *target_.luns[0];
  for (int i = 0; i < 12; ++i) {
    lun.RaiseUnitAttention(UnitAttention{0x2A, static_cast<uint8_t>(i)}, nullptr);
  }
  // Oldest dropped: the 8 newest (ascq 4..11) remain, oldest first.
  for (int i = 4; i < 12; ++i) {
    Run({0x00});
    ExpectCheck(SenseKey::kUnitAttention, Asc{0x2A, static_cast<uint8_t>(i)});
  }
  Run({0x00});
  ExpectGood();
}

TEST_F(EngineTest, AddAndClearUnitAttentionsOnOneNexus) {
  nexus_.AddUnitAttention(0, UnitAttention{0x2A, 0x09});
  Run({0x00});
  ExpectCheck(SenseKey::kUnitAttention, Asc::kCapacityDataChanged);
  nexus_.AddUnitAttention(0, UnitAttention{0x2A, 0x09});
  nexus_.ClearUnitAttentions(0);
  Run({0x00});
  ExpectGood();
}

TEST_F(EngineTest, UnitAttentionsArePerLun) {
  AddLun(1, backing::NewRamStore(1 << 20));
  // LUN 1 still has its power-on UA although LUN 0's was consumed.
  Run({0x00}, 1);
  ExpectCheck(SenseKey::kUnitAttention, Asc::kPowerOnReset);
  Run({0x00}, 0);
  ExpectGood();
}

// ------------------------------------------------------------------------------------------------
// Dispatch

TEST_F(EngineTest, TestUnitReadyIsNotReadyWhileStoreIsOffline) {
  auto fake = std::make_shared<FakeStore>(kBlocks * kBlock);
  fake->ready_err = ENOTCONN;
  AddLun(1, fake);
  // The power-on unit attention comes before readiness (SAM-5 5.14).
  Run({0x00}, 1, 0);
  ExpectCheck(SenseKey::kUnitAttention, Asc::kPowerOnReset);
  Run({0x00}, 1, 0);
  ExpectCheck(SenseKey::kNotReady, Asc{0x04, 0x01});  // BECOMING READY
  Run({0x00}, 1, 0);
  ExpectCheck(SenseKey::kNotReady, Asc{0x04, 0x01});  // not a unit attention: stays until ready
  EXPECT_EQ(fake->reads + fake->writes + fake->flushes, 0);
  fake->ready_err = 0;
  Run({0x00}, 1, 0);
  ExpectGood();
}

// While the store cannot reach its medium, commands that need it (capacity, reads, writes,
// cache, provisioning) are NOT READY and reach no store call; INQUIRY, REPORT LUNS, MODE SENSE
// and the reservation commands are still served.
TEST_F(EngineTest, MediumCommandsAreNotReadyWhileStoreIsOffline) {
  auto fake = std::make_shared<FakeStore>(kBlocks * kBlock);
  fake->ready_err = ENOTCONN;
  AddLun(1, fake);
  Run({0x00}, 1, 0);
  ExpectCheck(SenseKey::kUnitAttention, Asc::kPowerOnReset);
  auto not_ready = [&](const char* what) {
    SCOPED_TRACE(what);
    ExpectCheck(SenseKey::kNotReady, Asc{0x04, 0x01});
  };
  Run({0x25}, 1, 8);
  not_ready("READ CAPACITY(10)");
  Run({0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32}, 1, 32);
  not_ready("READ CAPACITY(16)");
  Run({0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, 1, 512);
  not_ready("READ(10)");
  Run({0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0}, 1, 512, std::vector<uint8_t>(kBlock, 1));
  not_ready("WRITE(10)");
  Run({0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 1, 0);
  not_ready("SYNCHRONIZE CACHE(10)");
  Run({0x34, 0, 0, 0, 0, 0, 0, 0, 1, 0}, 1, 0);
  not_ready("PRE-FETCH(10)");
  EXPECT_EQ(fake->reads + fake->writes + fake->flushes, 0);

  Run({0x12, 0, 0, 0, 96, 0}, 1, 96);
  ExpectGood();  // INQUIRY
  Run({0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0}, 1, 256);
  ExpectGood();  // REPORT LUNS
  Run({0x1A, 0, 0x3F, 0, 255, 0}, 1, 255);
  ExpectGood();  // MODE SENSE(6)
  Run({0x5E, 0, 0, 0, 0, 0, 0, 0, 255, 0}, 1, 255);
  ExpectGood();  // PERSISTENT RESERVE IN, READ KEYS
  fake->ready_err = 0;
  Run({0x25}, 1, 8);
  ExpectGood();
}

TEST_F(EngineTest, UnknownOpcodeIsInvalidCommandOperationCode) {
  for (uint8_t op : {0x01, 0x04, 0x40, 0xC0, 0xFF}) {
    Run({op});
    ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidCommandOperationCode);
  }
}

TEST_F(EngineTest, NacaBitIsInvalidField) {
  Run({0x00, 0, 0, 0, 0, 0x04});
  ExpectInvalidField(5);
  EXPECT_EQ(task_.sense[15] & 0x0F, 0x08 | 2);  // BPV=1, bit 2
}

TEST_F(EngineTest, MissingLunIsLogicalUnitNotSupported) {
  Run({0x00}, 7);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLogicalUnitNotSupported);
  Run({0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, 7, 512);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLogicalUnitNotSupported);
}

TEST_F(EngineTest, MissingLunInquiryHasQualifier011b) {
  Run({0x12, 0, 0, 0, 96, 0}, 7, 96);
  ExpectGood();
  auto d = DataIn();
  ASSERT_GE(d.size(), 36u);
  EXPECT_EQ(d[0], 0x7F);
}

TEST_F(EngineTest, MissingLunRequestSenseIsGoodWithLunNotSupported) {
  Run({0x03, 0, 0, 0, 18, 0}, 7, 18);
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 18u);
  EXPECT_EQ(d[2], 0x05);
  EXPECT_EQ(d[12], 0x25);
  EXPECT_EQ(d[13], 0x00);
}

TEST_F(EngineTest, MissingLunReportLunsServed) {
  Run({0xA0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, 9);
  ExpectGood();
  EXPECT_EQ(LoadBe32(DataIn().data()), 8u);
}

// ------------------------------------------------------------------------------------------------
// INQUIRY

TEST_F(EngineTest, StandardInquiry) {
  Run({0x12, 0, 0, 0, 255, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 66u);
  EXPECT_EQ(d[0], 0x00);  // qualifier 000b, direct access block device
  EXPECT_EQ(d[1], 0x00);  // not removable
  EXPECT_EQ(d[2], 0x06);  // SPC-4
  EXPECT_EQ(d[3], 0x12);  // HISUP, response data format 2
  EXPECT_EQ(d[4], 61);    // additional length
  EXPECT_EQ(d[7], 0x02);  // CMDQUE
  EXPECT_EQ(std::string(d.begin() + 8, d.begin() + 16), "ISCSIGW ");
  EXPECT_EQ(std::string(d.begin() + 16, d.begin() + 32), "ramdisk         ");
  EXPECT_EQ(std::string(d.begin() + 32, d.begin() + 36), "0001");
  EXPECT_EQ(LoadBe16(&d[62]), 0x0460);  // SPC-4 version descriptor
}

TEST_F(EngineTest, InquiryTruncatesToAllocationLength) {
  Run({0x12, 0, 0, 0, 5, 0});
  ExpectGood();
  EXPECT_EQ(task_.in_len, 5u);
  EXPECT_EQ(DataIn()[4], 61);  // ADDITIONAL LENGTH still the full length
  Run({0x12, 0, 0, 0, 0, 0});  // allocation length 0: nothing transferred, not an error
  ExpectGood();
  EXPECT_EQ(task_.in_len, 0u);
}

TEST_F(EngineTest, InquiryPageCodeWithoutEvpdIsInvalid) {
  Run({0x12, 0, 0x80, 0, 255, 0});
  ExpectInvalidField(2);
}

TEST_F(EngineTest, InquiryUnsupportedVpdPageIsInvalid) {
  Run({0x12, 1, 0x81, 0, 255, 0});
  ExpectInvalidField(2);
  Run({0x12, 1, 0xB9, 0, 255, 0});
  ExpectInvalidField(2);
}

TEST_F(EngineTest, VpdSupportedPages) {
  Run({0x12, 1, 0x00, 0, 255, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 11u);
  EXPECT_EQ(d[1], 0x00);
  EXPECT_EQ(LoadBe16(&d[2]), 7);
  EXPECT_EQ(std::vector<uint8_t>(d.begin() + 4, d.end()),
            (std::vector<uint8_t>{0x00, 0x80, 0x83, 0x8F, 0xB0, 0xB1, 0xB2}));
}

TEST_F(EngineTest, VpdUnitSerialNumber) {
  Run({0x12, 1, 0x80, 0, 255, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 8u);
  EXPECT_EQ(d[1], 0x80);
  EXPECT_EQ(LoadBe16(&d[2]), 4);
  EXPECT_EQ(std::string(d.begin() + 4, d.end()), "SER0");
}

TEST_F(EngineTest, VpdDeviceIdentification) {
  Run({0x12, 1, 0x83, 0x01, 0x00, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_GE(d.size(), 4u);
  EXPECT_EQ(d[1], 0x83);
  ASSERT_EQ(LoadBe16(&d[2]) + 4u, d.size());
  struct Desc {
    uint8_t protocol, code_set, piv, assoc, type;
    std::vector<uint8_t> body;
  };
  std::vector<Desc> descs;
  for (size_t pos = 4; pos < d.size();) {
    ASSERT_LE(pos + 4, d.size());
    const size_t len = d[pos + 3];
    ASSERT_LE(pos + 4 + len, d.size());
    descs.push_back(Desc{static_cast<uint8_t>(d[pos] >> 4), static_cast<uint8_t>(d[pos] & 0x0F),
                         static_cast<uint8_t>(d[pos + 1] >> 7),
                         static_cast<uint8_t>((d[pos + 1] >> 4) & 3),
                         static_cast<uint8_t>(d[pos + 1] & 0x0F),
                         std::vector<uint8_t>(d.begin() + pos + 4, d.begin() + pos + 4 + len)});
    pos += 4 + len;
  }
  ASSERT_EQ(descs.size(), 6u);
  // NAA type 6: 16 bytes, naa_id first.
  EXPECT_EQ(descs[0].type, 0x3);
  EXPECT_EQ(descs[0].assoc, 0);
  EXPECT_EQ(descs[0].code_set, 1);
  ASSERT_EQ(descs[0].body.size(), 16u);
  EXPECT_EQ(LoadBe64(descs[0].body.data()), 0x6001405000000000ull);
  // T10 vendor id.
  EXPECT_EQ(descs[1].type, 0x1);
  EXPECT_EQ(descs[1].code_set, 2);
  EXPECT_EQ(std::string(descs[1].body.begin(), descs[1].body.end()), "ISCSIGW SER0");
  // Relative target port.
  EXPECT_EQ(descs[2].type, 0x4);
  EXPECT_EQ(descs[2].assoc, 1);
  EXPECT_EQ(descs[2].piv, 1);
  EXPECT_EQ(descs[2].protocol, 5);
  ASSERT_EQ(descs[2].body.size(), 4u);
  EXPECT_EQ(LoadBe16(&descs[2].body[2]), 1);
  // Target port group (SPC-4 7.8.6.8), as REPORT TARGET PORT GROUPS names it.
  EXPECT_EQ(descs[3].type, 0x5);
  EXPECT_EQ(descs[3].assoc, 1);
  EXPECT_EQ(descs[3].piv, 1);
  EXPECT_EQ(descs[3].protocol, 5);
  EXPECT_EQ(descs[3].code_set, 1);
  ASSERT_EQ(descs[3].body.size(), 4u);
  EXPECT_EQ(LoadBe16(&descs[3].body[2]), 1);
  // SCSI name strings: target port then target device, null terminated, multiple of 4.
  EXPECT_EQ(descs[4].type, 0x8);
  EXPECT_EQ(descs[4].assoc, 1);
  EXPECT_EQ(descs[4].code_set, 3);
  EXPECT_EQ(descs[4].body.size() % 4, 0u);
  EXPECT_STREQ(reinterpret_cast<const char*>(descs[4].body.data()),
               "iqn.2026-11.io.iscsigw:t1,t,0x0001");
  EXPECT_EQ(descs[5].type, 0x8);
  EXPECT_EQ(descs[5].assoc, 2);
  EXPECT_EQ(descs[5].body.size() % 4, 0u);
  EXPECT_STREQ(reinterpret_cast<const char*>(descs[5].body.data()), "iqn.2026-11.io.iscsigw:t1");
}

TEST_F(EngineTest, StandardInquiryClaimsImplicitAlua) {
  Run({0x12, 0, 0, 0, 255, 0});
  ExpectGood();
  EXPECT_EQ(DataIn()[5] & 0x30, 0x10);  // TPGS=01b
}

TEST_F(EngineTest, ReportTargetPortGroups) {
  // Length-only header: one group, this gateway's, active/optimized (a RAM store is this
  // gateway's alone), with the one port.
  Run({0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 0, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 16u);
  EXPECT_EQ(LoadBe32(&d[0]), 12u);  // RETURN DATA LENGTH
  EXPECT_EQ(d[4], 0x00);            // PREF=0, active/optimized
  EXPECT_EQ(d[5], 0x03);            // AO_SUP, AN_SUP
  EXPECT_EQ(LoadBe16(&d[6]), 1);    // TARGET PORT GROUP, as in VPD 0x83
  EXPECT_EQ(d[9], 0x00);            // STATUS CODE
  EXPECT_EQ(d[11], 1);              // TARGET PORT COUNT
  EXPECT_EQ(LoadBe16(&d[14]), 1);   // RELATIVE TARGET PORT IDENTIFIER, as in VPD 0x83
  // Extended header: FORMAT TYPE 001b, then the same descriptor.
  Run({0xA3, 0x2A, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 0, 0});
  ExpectGood();
  auto e = DataIn();
  ASSERT_EQ(e.size(), 20u);
  EXPECT_EQ(LoadBe32(&e[0]), 16u);
  EXPECT_EQ(e[4], 0x10);
  EXPECT_EQ(std::vector<uint8_t>(e.begin() + 8, e.end()),
            std::vector<uint8_t>(d.begin() + 4, d.end()));
  // Cut to the allocation length, which still reports the whole length.
  Run({0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0});
  ExpectGood();
  ASSERT_EQ(DataIn().size(), 6u);
  EXPECT_EQ(LoadBe32(&DataIn()[0]), 12u);
}

// A store another gateway holds (an rbd image whose exclusive lock is elsewhere) is active/non-
// optimized through this one; when that changes, every I_T nexus learns it from ASYMMETRIC ACCESS
// STATE CHANGED, once, and RTPG then reports the new state.
TEST_F(EngineTest, AccessStateFollowsTheStoreAndChangesAreUnitAttentions) {
  target_.relative_port_id = 3;
  target_.target_port_group = 3;
  auto fake = std::make_shared<FakeStore>(kBlocks * kBlock);
  fake->preferred_path = false;
  Lun& lun = AddLun(1, fake);
  Nexus other{"iqn.1994-05.com.example:other,i,0x000000000002", 3};
  ClearPowerOn(nexus_, 1);
  ClearPowerOn(other, 1);
  EXPECT_FALSE(Engine::CheckAccessState(lun));  // the state it was created with: no change
  Run({0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 0, 0}, 1, 4096, {}, &other);
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 16u);
  EXPECT_EQ(d[4] & 0x0F, 0x01);  // active/non-optimized
  EXPECT_EQ(d[5], 0x03);
  EXPECT_EQ(LoadBe16(&d[6]), 3);   // this gateway's group
  EXPECT_EQ(LoadBe16(&d[14]), 3);  // and the nexus' port

  fake->preferred_path = true;
  EXPECT_TRUE(Engine::CheckAccessState(lun));
  EXPECT_FALSE(Engine::CheckAccessState(lun));  // reported once
  for (Nexus* n : {&nexus_, &other}) {
    Run({0x00}, 1, 0, {}, n);
    ExpectCheck(SenseKey::kUnitAttention, Asc::kAsymmetricAccessStateChanged);
    Run({0x00}, 1, 0, {}, n);
    ExpectGood();
  }
  Run({0x00}, 0, 0);  // LUN 0's state did not change
  ExpectGood();
  Run({0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 0, 0}, 1);
  ExpectGood();
  EXPECT_EQ(DataIn()[4] & 0x0F, 0x00);  // active/optimized
}

// A state must hold for `settle` looks before it is reported: a lock passing back and forth
// between gateways raises no unit attention for each pass.
TEST_F(EngineTest, AccessStateChangesSettleBeforeTheyAreReported) {
  auto fake = std::make_shared<FakeStore>(kBlocks * kBlock);
  Lun& lun = AddLun(1, fake);
  ClearPowerOn(nexus_, 1);
  fake->preferred_path = false;
  EXPECT_FALSE(Engine::CheckAccessState(lun, 3));
  EXPECT_FALSE(Engine::CheckAccessState(lun, 3));
  fake->preferred_path = true;  // back before it settled: the count starts again
  EXPECT_FALSE(Engine::CheckAccessState(lun, 3));
  fake->preferred_path = false;
  EXPECT_FALSE(Engine::CheckAccessState(lun, 3));
  EXPECT_FALSE(Engine::CheckAccessState(lun, 3));
  Run({0x00}, 1, 0);
  ExpectGood();  // nothing reported yet
  EXPECT_TRUE(Engine::CheckAccessState(lun, 3));
  Run({0x00}, 1, 0);
  ExpectCheck(SenseKey::kUnitAttention, Asc::kAsymmetricAccessStateChanged);
  EXPECT_FALSE(lun.reported_preferred().load());
}

// A LUN without reservations (an rbd LUN other gateways export) refuses the reservation commands
// as unsupported, and REPORT SUPPORTED OPERATION CODES says so; other LUNs serve them.
TEST_F(EngineTest, ReservationCommandsAreUnsupportedWhereTheLunHasNone) {
  LunConfig c = Config(2);
  c.reservations = false;
  target_.luns.push_back(std::make_shared<Lun>(c, ram_));
  ClearPowerOn(nexus_, 2);
  const std::vector<std::vector<uint8_t>> cdbs = {
      {0x5E, 0x00, 0, 0, 0, 0, 0, 0x01, 0x00, 0},  // PERSISTENT RESERVE IN, READ KEYS
      {0x5F, 0x00, 0, 0, 0, 0, 0, 0, 24, 0},       // PERSISTENT RESERVE OUT, REGISTER
      {0x16, 0, 0, 0, 0, 0},                       // RESERVE(6)
      {0x17, 0, 0, 0, 0, 0},                       // RELEASE(6)
      {0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0},           // RESERVE(10)
      {0x57, 0, 0, 0, 0, 0, 0, 0, 0, 0}};          // RELEASE(10)
  for (const auto& cdb : cdbs) {
    task_ = Task{};
    std::copy(cdb.begin(), cdb.end(), task_.cdb.begin());
    task_.cdb_len = 16;
    task_.lun = 2;
    task_.expected_length = cdb[0] == 0x5F ? 24 : 256;
    task_.nexus = &nexus_;
    task_.buf = buf_.data();
    task_.buf_cap = static_cast<uint32_t>(buf_.size());
    if (cdb[0] == 0x5F) {
      std::fill(buf_.begin(), buf_.begin() + 24, 0);
      buf_[15] = 1;  // SERVICE ACTION RESERVATION KEY 1
      task_.data_out_len = 24;
      task_.dir = DataDirection::kWrite;
    }
    completions_ = 0;
    task_.complete = [](Task*, void* ctx) { ++*static_cast<int*>(ctx); };
    task_.complete_ctx = &completions_;
    Engine::Execute(target_, task_);
    ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidCommandOperationCode);
  }
  // REPORT SUPPORTED OPERATION CODES, one command (opcode and service action): SUPPORT 001b, not
  // supported, on LUN 2; 011b on LUN 0.
  Run({0xA3, 0x0C, 0x02, 0x5F, 0x00, 0x00, 0, 0, 0x01, 0x00, 0, 0}, 2);
  ExpectGood();
  EXPECT_EQ(DataIn()[1] & 0x07, 0x01);
  Run({0xA3, 0x0C, 0x02, 0x5F, 0x00, 0x00, 0, 0, 0x01, 0x00, 0, 0}, 0);
  ExpectGood();
  EXPECT_EQ(DataIn()[1] & 0x07, 0x03);
  Run({0x5E, 0x00, 0, 0, 0, 0, 0, 0x01, 0x00, 0}, 0);  // READ KEYS on LUN 0
  ExpectGood();
}

TEST_F(EngineTest, ReportTargetPortGroupsChecksItsCdb) {
  Run({0xA3, 0x4A, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 0, 0});  // PARAMETER DATA FORMAT 010b
  ExpectInvalidField(1);
  Run({0xA3, 0x0A, 0, 0, 1, 0, 0, 0, 0x01, 0x00, 0, 0});  // reserved byte 4
  ExpectInvalidField(4);
  Run({0xA3, 0x2C, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 0, 0});  // bits 7..5 of another service action
  ExpectInvalidField(1);
}

TEST_F(EngineTest, VpdBlockLimits) {
  Run({0x12, 1, 0xB0, 0, 255, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 64u);
  EXPECT_EQ(LoadBe16(&d[2]), 0x3C);
  EXPECT_EQ(LoadBe16(&d[6]), 8);                   // 4 KiB granularity in 512-byte blocks
  EXPECT_EQ(LoadBe32(&d[8]), (16u << 20) / 512);   // maximum transfer length
  EXPECT_EQ(LoadBe32(&d[12]), (1u << 20) / 512);   // optimal transfer length
  EXPECT_EQ(d[4] & 0x01, 0);                       // WSNZ
  EXPECT_EQ(d[5], 255);                            // maximum COMPARE AND WRITE length
  EXPECT_EQ(LoadBe32(&d[20]), 1u << 20);           // maximum UNMAP LBA count (thin ram store)
  EXPECT_EQ(LoadBe32(&d[24]), 256u);               // maximum UNMAP block descriptor count
  EXPECT_EQ(LoadBe32(&d[28]), (1u << 20) / 512);   // optimal unmap granularity: one chunk
  EXPECT_EQ(LoadBe32(&d[32]), 0x80000000u);        // UGAVALID, alignment 0
  EXPECT_EQ(LoadBe64(&d[36]), (16u << 20) / 512);  // maximum WRITE SAME length
  EXPECT_EQ(LoadBe32(&d[44]), (1u << 20) / 512);   // maximum atomic transfer length (ram: 1 MiB)
  // No atomic alignment, granularity or boundaries.
  for (size_t i = 48; i < 64; i += 4) EXPECT_EQ(LoadBe32(&d[i]), 0u) << i;
}

TEST_F(EngineTest, VpdBlockDeviceCharacteristics) {
  Run({0x12, 1, 0xB1, 0, 255, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 64u);
  EXPECT_EQ(LoadBe16(&d[4]), 1);  // non-rotating
}

TEST_F(EngineTest, VpdLogicalBlockProvisioning) {
  Run({0x12, 1, 0xB2, 0, 255, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 8u);
  EXPECT_EQ(d[1], 0xB2);
  EXPECT_EQ(LoadBe16(&d[2]), 4);
  EXPECT_EQ(d[5], 0xE4);      // LBPU, LBPWS, LBPWS10, LBPRZ
  EXPECT_EQ(d[6] & 0x07, 2);  // thin provisioned
}

TEST_F(EngineTest, VpdTruncatesToAllocationLength) {
  Run({0x12, 1, 0x83, 0, 10, 0});
  ExpectGood();
  EXPECT_EQ(task_.in_len, 10u);
}

// ------------------------------------------------------------------------------------------------
// REPORT LUNS

TEST_F(EngineTest, ReportLunsListsEveryLun) {
  AddLun(3, backing::NewRamStore(1 << 20));
  AddLun(200, backing::NewRamStore(1 << 20));
  Run({0xA0, 0, 0x00, 0, 0, 0, 0, 0, 0x10, 0, 0, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 32u);
  EXPECT_EQ(LoadBe32(&d[0]), 24u);
  EXPECT_EQ(LoadBe64(&d[8]), 0u);
  EXPECT_EQ(LoadBe64(&d[16]), 0x0003000000000000ull);
  EXPECT_EQ(LoadBe64(&d[24]), 0x00C8000000000000ull);
  Run({0xA0, 0, 0x02, 0, 0, 0, 0, 0, 0x10, 0, 0, 0});
  ExpectGood();
  EXPECT_EQ(LoadBe32(DataIn().data()), 24u);
}

TEST_F(EngineTest, ReportLunsWellKnownOnlyIsEmpty) {
  Run({0xA0, 0, 0x01, 0, 0, 0, 0, 0, 0x10, 0, 0, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 8u);
  EXPECT_EQ(LoadBe32(&d[0]), 0u);
}

TEST_F(EngineTest, ReportLunsErrors) {
  Run({0xA0, 0, 0x00, 0, 0, 0, 0, 0, 0, 15, 0, 0});
  ExpectInvalidField(6);
  Run({0xA0, 0, 0x03, 0, 0, 0, 0, 0, 0x10, 0, 0, 0});
  ExpectInvalidField(2);
}

TEST_F(EngineTest, ReportLunsTruncatesButReportsFullLength) {
  AddLun(1, backing::NewRamStore(1 << 20));
  AddLun(2, backing::NewRamStore(1 << 20));
  Run({0xA0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 16u);
  EXPECT_EQ(LoadBe32(&d[0]), 24u);
}

// ------------------------------------------------------------------------------------------------
// READ CAPACITY

TEST_F(EngineTest, ReadCapacity10) {
  Run({0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 8u);
  EXPECT_EQ(LoadBe32(&d[0]), kBlocks - 1);
  EXPECT_EQ(LoadBe32(&d[4]), kBlock);
}

TEST_F(EngineTest, ReadCapacity10LbaWithoutPmiIsInvalid) {
  Run({0x25, 0, 0, 0, 0, 1, 0, 0, 0, 0});
  ExpectInvalidField(2);
}

TEST_F(EngineTest, ReadCapacity10SaturatesAbove32Bits) {
  // 2^32 + 10 blocks of 512 bytes on a null store (no memory used).
  AddLun(1, backing::NewNullStore(((uint64_t{1} << 32) + 10) * 512));
  ClearPowerOn(nexus_, 1);
  Run({0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 1);
  ExpectGood();
  EXPECT_EQ(LoadBe32(DataIn().data()), 0xFFFFFFFFu);
  Run({0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, 1);
  ExpectGood();
  EXPECT_EQ(LoadBe64(DataIn().data()), (uint64_t{1} << 32) + 9);
}

TEST_F(EngineTest, ReadCapacity16) {
  Run({0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 32u);
  EXPECT_EQ(LoadBe64(&d[0]), kBlocks - 1);
  EXPECT_EQ(LoadBe32(&d[8]), kBlock);
  EXPECT_EQ(d[12], 0);     // no protection
  EXPECT_EQ(d[13], 0);     // LBPPBE 0
  EXPECT_EQ(d[14], 0xC0);  // LBPME 1, LBPRZ 1 (thin ram store)
}

// 512e: 512-byte logical blocks on 4096-byte physical blocks (SBC-3 5.16.2).
TEST_F(EngineTest, ReadCapacity16ReportsPhysicalBlocksOf512e) {
  LunConfig c = Config(1);
  c.physical_block_size = 4096;
  target_.luns.push_back(std::make_shared<Lun>(c, backing::NewRamStore(kBlocks * kBlock)));
  EXPECT_EQ(target_.luns.back()->blocks_per_physical(), 8u);
  Run({0x00}, 1);  // its power-on unit attention
  Run({0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, 1);
  ExpectGood();
  auto d = DataIn();
  EXPECT_EQ(LoadBe32(&d[8]), kBlock);
  EXPECT_EQ(d[13] & 0x0F, 3);               // LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT
  EXPECT_EQ(LoadBe16(&d[14]) & 0x3FFF, 0);  // LOWEST ALIGNED LBA
  // The physical block of a 4096-byte-block LUN is its logical block.
  c = Config(2);
  c.block_size = 4096;
  c.physical_block_size = 4096;
  target_.luns.push_back(std::make_shared<Lun>(c, backing::NewRamStore(kBlocks * kBlock)));
  Run({0x00}, 2);
  Run({0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, 2);
  ExpectGood();
  EXPECT_EQ(DataIn()[13] & 0x0F, 0);
}

// WRITE SAME with NUMBER OF LOGICAL BLOCKS zero on a LUN larger than MAXIMUM WRITE SAME LENGTH
// (16 MiB): to the end of the medium only when that end is within the maximum.
TEST_F(EngineTest, WriteSameOfZeroBlocksStaysWithinTheMaximumLength) {
  constexpr uint64_t kBig = (64u << 20) / kBlock;
  constexpr uint64_t kMaxWs = (16u << 20) / kBlock;
  AddLun(3, backing::NewRamStore(kBig * kBlock));
  Run({0x00}, 3);  // its power-on unit attention
  const std::vector<uint8_t> block(kBlock, 0x42);
  Run({0x41, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 3, kBlock, block);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);
  uint64_t lba = kBig - kMaxWs - 1;
  Run({0x41, 0, static_cast<uint8_t>(lba >> 24), static_cast<uint8_t>(lba >> 16),
       static_cast<uint8_t>(lba >> 8), static_cast<uint8_t>(lba), 0, 0, 0, 0},
      3, kBlock, block);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);
  lba = kBig - kMaxWs;
  Run({0x41, 0, static_cast<uint8_t>(lba >> 24), static_cast<uint8_t>(lba >> 16),
       static_cast<uint8_t>(lba >> 8), static_cast<uint8_t>(lba), 0, 0, 0, 0},
      3, kBlock, block);
  ExpectGood();
}

TEST_F(EngineTest, ReadCapacity16TruncatesAndRejectsOtherServiceActions) {
  Run({0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 0, 0});
  ExpectGood();
  EXPECT_EQ(task_.in_len, 12u);
  Run({0x9E, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0});
  ExpectInvalidField(1);
}

// ------------------------------------------------------------------------------------------------
// READ / WRITE

struct RwCase {
  const char* name;
  std::vector<uint8_t> write;  // CDB template; LBA and length filled by Make()
  std::vector<uint8_t> read;
  int lba_at;
  int lba_size;  // bytes (3 for the 21-bit READ6/WRITE6 field)
  int len_at;
  int len_size;
};

std::vector<RwCase> RwCases() {
  return {
      {"6", {0x0A, 0, 0, 0, 0, 0}, {0x08, 0, 0, 0, 0, 0}, 1, 3, 4, 1},
      {"10", {0x2A, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0x28, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 2, 4, 7, 2},
      {"12",
       {0xAA, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
       {0xA8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
       2,
       4,
       6,
       4},
      {"16",
       {0x8A, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
       {0x88, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
       2,
       8,
       10,
       4},
  };
}

void PutField(std::vector<uint8_t>& cdb, int at, int size, uint64_t v) {
  for (int i = size - 1; i >= 0; --i) {
    cdb[at + i] = static_cast<uint8_t>(v);
    v >>= 8;
  }
}

std::vector<uint8_t> Make(std::vector<uint8_t> cdb, const RwCase& c, uint64_t lba, uint32_t len) {
  PutField(cdb, c.lba_at, c.lba_size, lba);
  PutField(cdb, c.len_at, c.len_size, len);
  return cdb;
}

class RwTest : public EngineTest {
 protected:
  void RunCdb(const std::vector<uint8_t>& cdb, uint32_t expected,
              const std::vector<uint8_t>& data_out = {}, uint64_t lun = 0) {
    task_ = Task{};
    std::copy(cdb.begin(), cdb.end(), task_.cdb.begin());
    task_.cdb_len = 16;
    task_.lun = lun;
    task_.expected_length = expected;
    task_.nexus = &nexus_;
    task_.buf = buf_.data();
    task_.buf_cap = static_cast<uint32_t>(buf_.size());
    if (!data_out.empty()) std::memcpy(buf_.data(), data_out.data(), data_out.size());
    task_.data_out_len = static_cast<uint32_t>(data_out.size());
    completions_ = 0;
    task_.complete = [](Task*, void* ctx) { ++*static_cast<int*>(ctx); };
    task_.complete_ctx = &completions_;
    Engine::Execute(target_, task_);
  }
};

TEST_F(RwTest, RoundTripEverySizeAcrossChunkBoundary) {
  for (const RwCase& c : RwCases()) {
    SCOPED_TRACE(c.name);
    // 16 blocks straddling the RamStore's 1 MiB chunk boundary (block 2048).
    const uint64_t lba = 2040;
    const auto data = Pattern(16 * kBlock, static_cast<uint8_t>(c.write[0]));
    RunCdb(Make(c.write, c, lba, 16), data.size(), data);
    ExpectGood();
    RunCdb(Make(c.read, c, lba, 16), data.size());
    ExpectGood();
    EXPECT_EQ(task_.in_len, data.size());
    EXPECT_EQ(DataIn(), data);
  }
}

TEST_F(RwTest, LastBlockOkOnePastFails) {
  for (const RwCase& c : RwCases()) {
    SCOPED_TRACE(c.name);
    const auto one = Pattern(kBlock, 9);
    RunCdb(Make(c.write, c, kBlocks - 1, 1), kBlock, one);
    ExpectGood();
    RunCdb(Make(c.read, c, kBlocks - 1, 1), kBlock);
    ExpectGood();
    EXPECT_EQ(DataIn(), one);
    RunCdb(Make(c.read, c, kBlocks, 1), kBlock);
    ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
    RunCdb(Make(c.write, c, kBlocks - 1, 2), 2 * kBlock, Pattern(2 * kBlock, 1));
    ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  }
}

TEST_F(RwTest, HugeLbaDoesNotWrap) {
  const RwCase c = RwCases()[3];
  RunCdb(Make(c.read, c, ~uint64_t{0}, 2), 1024);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  RunCdb(Make(c.read, c, 1, 0xFFFFFFFF), 1024);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
}

TEST_F(RwTest, ZeroTransferLengthTransfersNothing) {
  const auto cases = RwCases();
  for (size_t i = 1; i < cases.size(); ++i) {
    const RwCase& c = cases[i];
    SCOPED_TRACE(c.name);
    RunCdb(Make(c.read, c, 5, 0), 0);
    ExpectGood();
    EXPECT_EQ(task_.in_len, 0u);
    RunCdb(Make(c.write, c, 5, 0), 0);
    ExpectGood();
    // The LBA is still checked: one past the last LBA is out of range even for 0 blocks.
    RunCdb(Make(c.read, c, kBlocks - 1, 0), 0);
    ExpectGood();
    RunCdb(Make(c.read, c, kBlocks, 0), 0);
    ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
    RunCdb(Make(c.write, c, kBlocks, 0), 0);
    ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  }
  EXPECT_EQ(ram_->allocated_bytes(), 0u);
}

TEST_F(RwTest, Read6ZeroLengthMeans256Blocks) {
  const RwCase c = RwCases()[0];
  const auto data = Pattern(256 * kBlock, 3);
  RunCdb(Make(c.write, c, 100, 0), data.size(), data);
  ExpectGood();
  RunCdb(Make(c.read, c, 100, 0), data.size());
  ExpectGood();
  EXPECT_EQ(task_.in_len, 256u * kBlock);
  EXPECT_EQ(DataIn(), data);
}

TEST_F(RwTest, UnwrittenBlocksReadZero) {
  RunCdb({0x28, 0, 0, 0, 0, 0x10, 0, 0, 8, 0}, 8 * kBlock);
  ExpectGood();
  EXPECT_EQ(DataIn(), std::vector<uint8_t>(8 * kBlock, 0));
}

TEST_F(RwTest, WriteProtected) {
  AddLun(1, backing::NewRamStore(1 << 20), /*read_only=*/true);
  ClearPowerOn(nexus_, 1);
  RunCdb({0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0}, kBlock, Pattern(kBlock, 1), 1);
  ExpectCheck(SenseKey::kDataProtect, Asc::kWriteProtected);
  RunCdb({0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, kBlock, {}, 1);
  ExpectGood();
  // WRITE SAME with UNMAP and no Data-Out at all: still DATA PROTECT (SBC-3 4.13), before the
  // missing block would be INVALID FIELD IN COMMAND INFORMATION UNIT.
  RunCdb({0x41, 0x08, 0, 0, 0, 0, 0, 0, 1, 0}, 0, {}, 1);
  ExpectCheck(SenseKey::kDataProtect, Asc::kWriteProtected);
}

TEST_F(RwTest, ProtectFieldIsInvalid) {
  RunCdb({0x28, 0x20, 0, 0, 0, 0, 0, 0, 1, 0}, kBlock);
  ExpectInvalidField(1);
  RunCdb({0x2A, 0x20, 0, 0, 0, 0, 0, 0, 1, 0}, kBlock, Pattern(kBlock, 1));
  ExpectInvalidField(1);
}

TEST_F(RwTest, TransferAboveMaximumIsInvalid) {
  // 16 MiB + 1 block.
  const uint32_t blocks = (16u << 20) / kBlock + 1;
  AddLun(1, backing::NewNullStore(uint64_t{1} << 30));
  ClearPowerOn(nexus_, 1);
  RunCdb({0x88, 0, 0, 0, 0, 0, 0, 0, 0, 0, static_cast<uint8_t>(blocks >> 24),
          static_cast<uint8_t>(blocks >> 16), static_cast<uint8_t>(blocks >> 8),
          static_cast<uint8_t>(blocks), 0, 0},
         0, {}, 1);
  ExpectInvalidField(10);
}

TEST_F(RwTest, ShortDataOutWritesTheWholeBlocksReceived) {
  // Two blocks of 'a', then a WRITE of two blocks of which only one block of Data-Out arrived
  // (EDTL < TRANSFER LENGTH): GOOD, the first block written, the second left alone.
  RunCdb({0x2A, 0, 0, 0, 0, 0, 0, 0, 2, 0}, 2 * kBlock, Pattern(2 * kBlock, 7));
  ExpectGood();
  RunCdb({0x2A, 0, 0, 0, 0, 0, 0, 0, 2, 0}, kBlock, Pattern(kBlock, 1));
  ExpectGood();
  EXPECT_EQ(task_.transfer_bytes, 2u * kBlock);  // the transport reports the overflow from this
  RunCdb({0x28, 0, 0, 0, 0, 0, 0, 0, 2, 0}, 2 * kBlock);
  ExpectGood();
  auto d = DataIn();
  const auto first = Pattern(kBlock, 1);
  const auto old = Pattern(2 * kBlock, 7);
  EXPECT_EQ(std::vector<uint8_t>(d.begin(), d.begin() + kBlock), first);
  EXPECT_EQ(std::vector<uint8_t>(d.begin() + kBlock, d.end()),
            std::vector<uint8_t>(old.begin() + kBlock, old.end()));
}

TEST_F(RwTest, ShortDataOutOfNoBlockWritesNothing) {
  // No Data-Out at all: nothing to write, GOOD (the transport reports the whole overflow).
  RunCdb({0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0}, 0);
  ExpectGood();
  EXPECT_EQ(task_.transfer_bytes, kBlock);
  EXPECT_EQ(ram_->allocated_bytes(), 0u);
  // Data ending inside a block cannot be written as a block: refused, nothing written.
  RunCdb({0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0}, 200, Pattern(200, 1));
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCommandInformationUnit);
  EXPECT_EQ(ram_->allocated_bytes(), 0u);
}

TEST_F(RwTest, LongDataOutWritesOnlyTransferLength) {
  // EDTL > TRANSFER LENGTH (residual underflow): only the CDB's blocks are written.
  RunCdb({0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0}, 2 * kBlock, Pattern(2 * kBlock, 4));
  ExpectGood();
  EXPECT_EQ(task_.transfer_bytes, kBlock);
  RunCdb({0x28, 0, 0, 0, 0, 0, 0, 0, 2, 0}, 2 * kBlock);
  ExpectGood();
  auto d = DataIn();
  const auto p = Pattern(2 * kBlock, 4);
  EXPECT_EQ(std::vector<uint8_t>(d.begin(), d.begin() + kBlock),
            std::vector<uint8_t>(p.begin(), p.begin() + kBlock));
  EXPECT_EQ(std::vector<uint8_t>(d.begin() + kBlock, d.end()), std::vector<uint8_t>(kBlock, 0));
}

TEST_F(RwTest, ReadSetsTransferBytes) {
  RunCdb({0x28, 0, 0, 0, 0, 0, 0, 0, 3, 0}, 200);
  ExpectGood();
  EXPECT_EQ(task_.transfer_bytes, 3u * kBlock);
  EXPECT_EQ(task_.in_len, 3u * kBlock);
}

TEST_F(RwTest, NullStoreReadsZerosWithoutCopy) {
  AddLun(1, backing::NewNullStore(uint64_t{1} << 30));
  ClearPowerOn(nexus_, 1);
  std::memset(buf_.data(), 0xAB, 4096);
  RunCdb({0x28, 0, 0, 0, 0, 0, 0, 0, 8, 0}, 4096, {}, 1);
  ExpectGood();
  EXPECT_EQ(task_.in_seg_count, 1u);
  EXPECT_NE(task_.in_segs[0].data, buf_.data());  // zero copy
  EXPECT_EQ(DataIn(), std::vector<uint8_t>(4096, 0));
}

class FakeStoreTest : public RwTest {
 protected:
  void SetUp() override {
    fake_ = std::make_shared<FakeStore>(1 << 20);
    AddLun(1, fake_);
    ClearPowerOn(nexus_, 1);
  }
  std::shared_ptr<FakeStore> fake_;
};

TEST_F(FakeStoreTest, FuaReachesTheStore) {
  RunCdb({0x2A, 0x08, 0, 0, 0, 3, 0, 0, 2, 0}, 2 * kBlock, Pattern(2 * kBlock, 1), 1);
  ExpectGood();
  EXPECT_EQ(fake_->writes, 1);
  EXPECT_TRUE(fake_->last_fua);
  EXPECT_EQ(fake_->last_offset, 3u * kBlock);
  EXPECT_EQ(fake_->last_len, 2u * kBlock);
  RunCdb({0x2A, 0x10, 0, 0, 0, 3, 0, 0, 2, 0}, 2 * kBlock, Pattern(2 * kBlock, 1), 1);  // DPO only
  ExpectGood();
  EXPECT_FALSE(fake_->last_fua);
  RunCdb({0x8A, 0x08, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0}, kBlock, Pattern(kBlock, 2), 1);
  ExpectGood();
  EXPECT_TRUE(fake_->last_fua);
}

TEST_F(FakeStoreTest, ReadFallsBackToStoreReadIntoBuffer) {
  fake_->data()[10 * kBlock] = 0x5A;
  RunCdb({0x28, 0, 0, 0, 0, 10, 0, 0, 1, 0}, kBlock, {}, 1);
  ExpectGood();
  EXPECT_EQ(fake_->reads, 1);
  EXPECT_EQ(task_.in_seg_count, 1u);
  EXPECT_EQ(task_.in_segs[0].data, buf_.data());
  EXPECT_EQ(DataIn()[0], 0x5A);
}

TEST_F(FakeStoreTest, ReadLimitedToBufferCapacity) {
  task_ = Task{};
  const std::vector<uint8_t> cdb = {0x28, 0, 0, 0, 0, 0, 0, 0, 4, 0};
  std::copy(cdb.begin(), cdb.end(), task_.cdb.begin());
  task_.cdb_len = 16;
  task_.lun = 1;
  task_.expected_length = kBlock;
  task_.nexus = &nexus_;
  task_.buf = buf_.data();
  task_.buf_cap = kBlock;
  completions_ = 0;
  task_.complete = [](Task*, void* ctx) { ++*static_cast<int*>(ctx); };
  task_.complete_ctx = &completions_;
  Engine::Execute(target_, task_);
  ExpectGood();
  EXPECT_EQ(fake_->last_len, kBlock);
  EXPECT_EQ(task_.in_len, kBlock);
}

TEST_F(FakeStoreTest, MediumErrorOnRead) {
  fake_->read_err = EIO;
  RunCdb({0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, kBlock, {}, 1);
  ExpectCheck(SenseKey::kMediumError, Asc::kUnrecoveredReadError);
  EXPECT_EQ(task_.in_seg_count, 0u);
}

TEST_F(FakeStoreTest, MediumErrorOnWrite) {
  fake_->write_err = EIO;
  RunCdb({0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0}, kBlock, Pattern(kBlock, 1), 1);
  ExpectCheck(SenseKey::kMediumError, Asc::kWriteError);
}

TEST_F(FakeStoreTest, AsynchronousCompletionCompletesExactlyOnce) {
  fake_->deferred = true;
  RunCdb({0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0}, kBlock, Pattern(kBlock, 1), 1);
  EXPECT_EQ(completions_, 0);
  fake_->RunDeferred();
  ExpectGood();
  fake_->read_err = EIO;
  RunCdb({0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, kBlock, {}, 1);
  EXPECT_EQ(completions_, 0);
  fake_->RunDeferred();
  ExpectCheck(SenseKey::kMediumError, Asc::kUnrecoveredReadError);
}

TEST_F(FakeStoreTest, SynchronizeCacheFlushes) {
  RunCdb({0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, {}, 1);
  ExpectGood();
  EXPECT_EQ(fake_->flushes, 1);
  RunCdb({0x91, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0}, 0, {}, 1);
  ExpectGood();
  EXPECT_EQ(fake_->flushes, 2);
}

TEST_F(FakeStoreTest, SynchronizeCacheRangeChecked) {
  const uint32_t blocks = (1u << 20) / kBlock;                // 2048
  RunCdb({0x35, 0, 0, 0, 0x07, 0xFF, 0, 0, 1, 0}, 0, {}, 1);  // last block
  ExpectGood();
  RunCdb({0x35, 0, 0, 0, 0x08, 0x00, 0, 0, 1, 0}, 0, {}, 1);  // one past
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  RunCdb({0x91, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0x08, 0x00, 0, 0}, 0, {}, 1);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  RunCdb({0x35, 0, 0, 0, 0x08, 0x00, 0, 0, 0, 0}, 0, {}, 1);  // past the end, "to the end"
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kLbaOutOfRange);
  EXPECT_EQ(fake_->flushes, 1);
  EXPECT_EQ(blocks, 2048u);
}

TEST_F(FakeStoreTest, SynchronizeCacheErrorAndImmed) {
  fake_->flush_err = EIO;
  RunCdb({0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, {}, 1);
  ExpectCheck(SenseKey::kMediumError, Asc::kWriteError);
  fake_->deferred = true;
  RunCdb({0x35, 0x02, 0, 0, 0, 0, 0, 0, 0, 0}, 0, {}, 1);  // IMMED: GOOD before the flush ends
  ExpectGood();
  EXPECT_EQ(fake_->flushes, 2);
  fake_->RunDeferred();
  EXPECT_EQ(completions_, 1);
}

// Linux reports a writeback error once per open file; here each I_T nexus learns of a store write
// error at its next SYNCHRONIZE CACHE, whichever initiator's flush met it first: an initiator
// whose writes were among the lost ones does not get GOOD because another one flushed first.
TEST_F(FakeStoreTest, EveryNexusLearnsOfAWriteErrorAtItsNextFlush) {
  Nexus other{"iqn.1994-05.com.example:other,i,0x000000000002", 1};
  ClearPowerOn(other, 1);
  RunCdb({0x2A, 0, 0, 0, 0, 1, 0, 0, 1, 0}, 0, std::vector<uint8_t>(512, 0x11), 1);
  ExpectGood();  // in the store's volatile cache
  fake_->flush_err = EIO;
  Run({0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 1, 0, {}, &other);
  ExpectCheck(SenseKey::kMediumError, Asc::kWriteError);  // the other initiator's flush met it
  fake_->flush_err = 0;
  RunCdb({0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, {}, 1);
  ExpectCheck(SenseKey::kMediumError, Asc::kWriteError);  // the writer hears of it too
  RunCdb({0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, {}, 1);
  ExpectGood();  // once
  Run({0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 1, 0, {}, &other);
  ExpectGood();
}

// A flush the initiator will retry (the store timed out) does not use up the report of an earlier
// failed write: the retried SYNCHRONIZE CACHE still reports it.
TEST_F(FakeStoreTest, RetryableFlushErrorKeepsAnEarlierWriteError) {
  fake_->write_err = EIO;
  RunCdb({0x2A, 0, 0, 0, 0, 1, 0, 0, 1, 0}, 0, std::vector<uint8_t>(512, 0x11), 1);
  ExpectCheck(SenseKey::kMediumError, Asc::kWriteError);
  fake_->write_err = 0;
  fake_->flush_err = ETIMEDOUT;
  RunCdb({0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, {}, 1);
  ExpectCheck(SenseKey::kNotReady, Asc{0x04, 0x01});
  fake_->flush_err = 0;
  RunCdb({0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, {}, 1);
  ExpectCheck(SenseKey::kMediumError, Asc::kWriteError);
  RunCdb({0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, {}, 1);
  ExpectGood();
}

// ------------------------------------------------------------------------------------------------
// START STOP UNIT

TEST_F(FakeStoreTest, StartStopUnit) {
  RunCdb({0x1B, 0, 0, 0, 0x01, 0}, 0, {}, 1);  // START
  ExpectGood();
  EXPECT_EQ(fake_->flushes, 0);
  RunCdb({0x1B, 0, 0, 0, 0x00, 0}, 0, {}, 1);  // STOP: cache flushed
  ExpectGood();
  EXPECT_EQ(fake_->flushes, 1);
  RunCdb({0x1B, 0, 0, 0, 0x04, 0}, 0, {}, 1);  // STOP with NO_FLUSH
  ExpectGood();
  EXPECT_EQ(fake_->flushes, 1);
  RunCdb({0x1B, 0, 0, 0, 0x03, 0}, 0, {}, 1);  // LOEJ + START on non-removable medium
  ExpectGood();
  RunCdb({0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, kBlock, {}, 1);  // still ready
  ExpectGood();
  RunCdb({0x1B, 0, 0, 0, 0x30, 0}, 0, {}, 1);  // STANDBY: unsupported power condition
  ExpectInvalidField(4);
}

// ------------------------------------------------------------------------------------------------
// MODE SENSE

TEST_F(EngineTest, ModeSense6CachingPage) {
  Run({0x1A, 0, 0x08, 0, 255, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 4u + 8 + 20);
  EXPECT_EQ(d[0], d.size() - 1);
  EXPECT_EQ(d[2], 0x10);  // DPOFUA, not WP
  EXPECT_EQ(d[3], 8);     // block descriptor length
  EXPECT_EQ(LoadBe32(&d[4]), kBlocks);
  EXPECT_EQ(LoadBe24(&d[9]), kBlock);
  EXPECT_EQ(d[12], 0x08);
  EXPECT_EQ(d[13], 0x12);
  EXPECT_EQ(d[14] & 0x05, 0x04);  // WCE=1, RCD=0
}

TEST_F(EngineTest, ModeSense6AllPagesWithoutBlockDescriptor) {
  Run({0x1A, 0x08, 0x3F, 0, 255, 0});
  ExpectGood();
  auto d = DataIn();
  // 01h, 02h, 08h, 0Ah, 1Ch in ascending order; no subpages for 3Fh/00h; PS=0 (nothing savable
  // without a state store).
  ASSERT_EQ(d.size(), 4u + 12 + 16 + 20 + 12 + 12);
  EXPECT_EQ(d[3], 0);
  EXPECT_EQ(d[4], 0x01);
  EXPECT_EQ(d[16], 0x02);
  EXPECT_EQ(d[32], 0x08);
  EXPECT_EQ(d[52], 0x0A);
  EXPECT_EQ(d[53], 0x0A);
  EXPECT_EQ(d[64], 0x1C);
  EXPECT_EQ(d[66], 0x08);  // DEXCPT
}

TEST_F(EngineTest, ModeSense10ControlPageLongLba) {
  Run({0x5A, 0x10, 0x0A, 0, 0, 0, 0, 0, 255, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 8u + 16 + 12);
  EXPECT_EQ(LoadBe16(&d[0]), d.size() - 2);
  EXPECT_EQ(d[4] & 0x01, 0x01);  // LONGLBA
  EXPECT_EQ(LoadBe16(&d[6]), 16);
  EXPECT_EQ(LoadBe64(&d[8]), kBlocks);
  EXPECT_EQ(LoadBe32(&d[20]), kBlock);
  EXPECT_EQ(d[24], 0x0A);
  EXPECT_EQ(d[26] & 0x04, 0);  // D_SENSE=0: fixed format
}

TEST_F(EngineTest, ModeSenseWriteProtectBit) {
  AddLun(1, backing::NewRamStore(1 << 20), true);
  ClearPowerOn(nexus_, 1);
  Run({0x1A, 0, 0x3F, 0, 255, 0}, 1);
  ExpectGood();
  EXPECT_EQ(DataIn()[2] & 0x80, 0x80);
  Run({0x5A, 0, 0x3F, 0, 0, 0, 0, 0, 255, 0}, 1);
  ExpectGood();
  EXPECT_EQ(DataIn()[3] & 0x80, 0x80);
}

TEST_F(EngineTest, ModeSenseChangeableMarksOnlyWce) {
  Run({0x1A, 0x08, 0x48, 0, 255, 0});  // PC=01b, caching page
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 24u);
  EXPECT_EQ(d[4], 0x08);
  EXPECT_EQ(d[6], 0x04);  // WCE
  for (size_t i = 7; i < d.size(); ++i) EXPECT_EQ(d[i], 0) << i;
}

TEST_F(EngineTest, ModeSenseErrors) {
  Run({0x1A, 0, 0x19, 0, 255, 0});  // protocol specific port page: not offered
  ExpectInvalidField(2);
  Run({0x1A, 0, 0x08, 0x01, 255, 0});  // subpage
  ExpectInvalidField(3);
  Run({0x1A, 0, 0xC8, 0, 255, 0});  // saved values
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kSavingParametersNotSupported);
}

TEST_F(EngineTest, ModeSenseTruncates) {
  Run({0x1A, 0, 0x3F, 0, 4, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0], 4 + 8 + 72 - 1);  // MODE DATA LENGTH of the full data
}

}  // namespace engine_test
}  // namespace iscsigw::scsi
