// SPC state shared by I_T nexuses, through Engine::Execute: mode pages (MODE SENSE/SELECT),
// reservations (RESERVE/RELEASE, PERSISTENT RESERVE IN/OUT, the conflict table, APTPL across a
// restart), REPORT SUPPORTED OPERATION CODES / TASK MANAGEMENT FUNCTIONS, PREVENT ALLOW MEDIUM
// REMOVAL and the capacity-change unit attention.
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/endian.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/scsi/engine.h"
#include "dataplane/scsi/op_table.h"
#include "dataplane/scsi/sense.h"
#include "dataplane/scsi/task.h"

namespace iscsigw::scsi {
namespace spc_state_test {

constexpr uint32_t kBlock = 512;
constexpr uint64_t kBlocks = 2048;

// A RAM-backed store that records the FUA flag of the last write.
class RecordingStore final : public backing::BackingStore {
 public:
  explicit RecordingStore(uint64_t size) : data_(size, 0) {}
  std::string_view kind() const override { return "fake"; }
  uint64_t size_bytes() const override { return data_.size(); }
  bool persistent() const override { return true; }
  void Read(unsigned, uint64_t offset, std::span<uint8_t> buf,
            backing::IoCompletion done) override {
    std::memcpy(buf.data(), data_.data() + offset, buf.size());
    done(0);
  }
  void Write(unsigned, uint64_t offset, std::span<const uint8_t> buf, bool fua,
             backing::IoCompletion done) override {
    std::memcpy(data_.data() + offset, buf.data(), buf.size());
    last_fua = fua;
    ++writes;
    done(0);
  }
  void Flush(unsigned, backing::IoCompletion done) override { done(0); }
  // Always matches: writes op->data.
  void CompareAndWrite(unsigned, uint64_t offset, CompareWriteOp* op,
                       backing::IoCompletion done) override {
    std::memcpy(data_.data() + offset, op->data.data(), op->data.size());
    last_fua = op->fua;
    ++writes;
    done(0);
  }
  bool last_fua = false;
  int writes = 0;

 private:
  std::vector<uint8_t> data_;
};

// Keeps the newest blob in memory, as a state directory would on disk.
class FakeStateStore final : public LunStateStore {
 public:
  std::string Load() override {
    last_seq = 0;  // a new Lun numbers its saves from 1 again
    return blob;
  }
  void Save(uint64_t seq, std::string b, unsigned, backing::IoCompletion done) override {
    ++saves;
    if (err == 0 && seq > last_seq) {
      last_seq = seq;
      blob = std::move(b);
    }
    done(err);
  }
  std::string blob;
  uint64_t last_seq = 0;
  int saves = 0;
  int err = 0;
};

class FakeAborter final : public TaskAborter {
 public:
  void AbortTasks(uint64_t lun_id, const std::vector<NexusMatch>& who, const Nexus* except,
                  std::shared_ptr<void> until_ended) override {
    last_lun = lun_id;
    last_who = who;
    last_except = except;
    ++calls;
    if (keep_holds) holds.push_back(std::move(until_ended));
  }
  void ClearTaskSet(Lun&, std::shared_ptr<void>) override {
    ADD_FAILURE() << "no test here clears a task set";
  }
  // With keep_holds the aborted tasks are still in the store until the test clears holds.
  bool keep_holds = false;
  std::vector<std::shared_ptr<void>> holds;
  int calls = 0;
  uint64_t last_lun = ~uint64_t{0};
  std::vector<NexusMatch> last_who;
  const Nexus* last_except = nullptr;
};

constexpr char kPortA[] = "iqn.1994-05.com.example:a,i,0x00023d000001";
constexpr char kPortB[] = "iqn.1994-05.com.example:b,i,0x00023d000002";
constexpr char kPortC[] = "iqn.1994-05.com.example:c,i,0x00023d000003";

class SpcStateTest : public ::testing::Test {
 protected:
  SpcStateTest() {
    target_.name = "iqn.2026-11.io.iscsigw:t1";
    target_.relative_port_id = 1;
    store_ = std::make_shared<RecordingStore>(kBlocks * kBlock);
    state_ = std::make_shared<FakeStateStore>();
    aborter_ = std::make_shared<FakeAborter>();
    NewLun(/*with_state=*/false);
    buf_.resize(1 << 16);
  }

  // Replaces LUN 0 (a restart of the process, as far as the LUN can tell).
  void NewLun(bool with_state) {
    LunConfig c;
    c.id = 0;
    c.block_size = kBlock;
    c.serial = "S0";
    if (with_state) c.state_store = state_;
    c.task_aborter = aborter_;
    target_.luns.clear();
    target_.luns.push_back(std::make_shared<Lun>(c, store_));
  }
  Lun& lun() { return *target_.luns[0]; }

  void Run(Nexus& n, std::initializer_list<uint8_t> cdb, const std::vector<uint8_t>& out = {},
           uint32_t expected_length = 65536) {
    Run(n, std::vector<uint8_t>(cdb), out, expected_length);
  }
  void Run(Nexus& n, const std::vector<uint8_t>& cdb, const std::vector<uint8_t>& out = {},
           uint32_t expected_length = 65536) {
    Start(n, cdb, out, expected_length);
    ASSERT_EQ(completions_, 1);
  }
  // Executes the command; completions_ tells whether it has completed.
  void Start(Nexus& n, const std::vector<uint8_t>& cdb, const std::vector<uint8_t>& out,
             uint32_t expected_length = 65536) {
    task_ = Task{};
    std::copy(cdb.begin(), cdb.end(), task_.cdb.begin());
    task_.cdb_len = 16;
    task_.expected_length = expected_length;
    task_.nexus = &n;
    task_.buf = buf_.data();
    task_.buf_cap = static_cast<uint32_t>(buf_.size());
    if (!out.empty()) {
      std::memcpy(buf_.data(), out.data(), out.size());
      task_.data_out_len = static_cast<uint32_t>(out.size());
      task_.dir = DataDirection::kWrite;
    }
    completions_ = 0;
    task_.complete = [](Task*, void* ctx) { ++*static_cast<int*>(ctx); };
    task_.complete_ctx = &completions_;
    Engine::Execute(target_, task_);
  }
  // Clears the power-on unit attention of `n`.
  void Login(Nexus& n) {
    Run(n, {0x00, 0, 0, 0, 0, 0});
    Run(n, {0x00, 0, 0, 0, 0, 0});
    ASSERT_EQ(task_.status, ScsiStatus::kGood);
  }

  std::vector<uint8_t> DataIn() const {
    std::vector<uint8_t> v;
    for (uint32_t i = 0; i < task_.in_seg_count; ++i) {
      v.insert(v.end(), task_.in_segs[i].data, task_.in_segs[i].data + task_.in_segs[i].len);
    }
    return v;
  }
  void ExpectGood() {
    EXPECT_EQ(task_.status, ScsiStatus::kGood);
    EXPECT_EQ(task_.sense_len, 0);
  }
  void ExpectConflict() {
    EXPECT_EQ(task_.status, ScsiStatus::kReservationConflict);
    EXPECT_EQ(task_.sense_len, 0);
  }
  void ExpectCheck(SenseKey key, Asc asc) {
    ASSERT_EQ(task_.status, ScsiStatus::kCheckCondition);
    EXPECT_EQ(task_.sense[2] & 0x0F, static_cast<uint8_t>(key));
    EXPECT_EQ(task_.sense[12], asc.asc);
    EXPECT_EQ(task_.sense[13], asc.ascq);
  }
  // INVALID FIELD IN CDB (in_cdb) or IN PARAMETER LIST with the field (and bit) pointer.
  void ExpectInvalidField(bool in_cdb, uint16_t byte, int bit = -1) {
    ExpectCheck(SenseKey::kIllegalRequest,
                in_cdb ? Asc::kInvalidFieldInCdb : Asc::kInvalidFieldInParameterList);
    EXPECT_EQ(task_.sense[15] & 0x80, 0x80);  // SKSV
    EXPECT_EQ((task_.sense[15] & 0x40) != 0, in_cdb);
    EXPECT_EQ(LoadBe16(&task_.sense[16]), byte);
    if (bit >= 0) {
      EXPECT_EQ(task_.sense[15] & 0x0F, 0x08 | bit);
    } else {
      EXPECT_EQ(task_.sense[15] & 0x08, 0);
    }
  }
  // The next command on `n` reports `asc` as a unit attention (and clears it).
  void ExpectUa(Nexus& n, Asc asc) {
    Run(n, {0x00, 0, 0, 0, 0, 0});
    ExpectCheck(SenseKey::kUnitAttention, asc);
  }
  void ExpectNoUa(Nexus& n) {
    Run(n, {0x00, 0, 0, 0, 0, 0});
    ExpectGood();
  }

  // PERSISTENT RESERVE OUT with a 24-byte basic parameter list.
  void Prout(Nexus& n, uint8_t sa, uint8_t type, uint64_t rk, uint64_t sark, uint8_t flags = 0,
             uint8_t scope = 0) {
    Run(n, ProutCdb(sa, type, scope), ProutList(rk, sark, flags));
  }
  static std::vector<uint8_t> ProutCdb(uint8_t sa, uint8_t type, uint8_t scope = 0) {
    return {0x5F, sa, static_cast<uint8_t>((scope << 4) | type), 0, 0, 0, 0, 0, 24, 0};
  }
  static std::vector<uint8_t> ProutList(uint64_t rk, uint64_t sark, uint8_t flags = 0) {
    std::vector<uint8_t> p(24, 0);
    StoreBe64(p.data(), rk);
    StoreBe64(p.data() + 8, sark);
    p[20] = flags;
    return p;
  }
  std::vector<uint8_t> Prin(Nexus& n, uint8_t sa) {
    Run(n, {0x5E, sa, 0, 0, 0, 0, 0, 0x10, 0, 0});
    EXPECT_EQ(task_.status, ScsiStatus::kGood);
    return DataIn();
  }
  std::vector<uint64_t> Keys(Nexus& n) {
    auto d = Prin(n, 0);
    std::vector<uint64_t> keys;
    for (size_t i = 8; i + 8 <= d.size(); i += 8) keys.push_back(LoadBe64(&d[i]));
    return keys;
  }
  bool CanRead(Nexus& n) {
    Run(n, {0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0});
    EXPECT_TRUE(task_.status == ScsiStatus::kGood ||
                task_.status == ScsiStatus::kReservationConflict);
    return task_.status == ScsiStatus::kGood;
  }
  bool CanWrite(Nexus& n) {
    Run(n, {0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0}, std::vector<uint8_t>(kBlock, 0x5A));
    EXPECT_TRUE(task_.status == ScsiStatus::kGood ||
                task_.status == ScsiStatus::kReservationConflict);
    return task_.status == ScsiStatus::kGood;
  }

  TargetInfo target_;
  std::shared_ptr<RecordingStore> store_;
  std::shared_ptr<FakeStateStore> state_;
  std::shared_ptr<FakeAborter> aborter_;
  std::vector<uint8_t> buf_;
  Task task_;
  int completions_ = 0;
  Nexus a_{kPortA, 1};
  Nexus b_{kPortB, 1};
  Nexus c_{kPortC, 1};

  void SetUp() override {
    Login(a_);
    Login(b_);
    Login(c_);
  }
};

// ------------------------------------------------------------------------------------------------
// REPORT SUPPORTED OPERATION CODES, REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS

struct Descriptor {
  uint8_t op;
  uint16_t sa;
  bool servactv;
  bool ctdp;
  uint16_t cdb_len;
};

std::vector<Descriptor> ParseAll(const std::vector<uint8_t>& d, bool rctd) {
  std::vector<Descriptor> out;
  const size_t end = 4 + LoadBe32(d.data());
  EXPECT_EQ(end, d.size());
  for (size_t i = 4; i + 8 <= end;) {
    Descriptor x{d[i], LoadBe16(&d[i + 2]), (d[i + 5] & 0x01) != 0, (d[i + 5] & 0x02) != 0,
                 LoadBe16(&d[i + 6])};
    out.push_back(x);
    i += 8;
    if (x.ctdp) {
      EXPECT_TRUE(rctd);
      EXPECT_EQ(LoadBe16(&d[i]), 0x0A);  // timeouts descriptor length
      i += 12;
    }
  }
  return out;
}

TEST_F(SpcStateTest, ReportLunsClearsReportedLunsDataChangedForItsNexusOnly) {
  Nexus a("iqn.a,i,0x1", 1), b("iqn.b,i,0x2", 1);
  Login(a);
  Login(b);
  lun().RaiseUnitAttention(UnitAttention{0x3F, 0x0E}, nullptr);
  lun().RaiseUnitAttention(UnitAttention{0x2A, 0x09}, nullptr);
  Run(a, {0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0});  // REPORT LUNS: no unit attention reported
  ExpectGood();
  Run(a, {0x00, 0, 0, 0, 0, 0});  // only CAPACITY DATA HAS CHANGED is left for a
  ASSERT_EQ(task_.status, ScsiStatus::kCheckCondition);
  EXPECT_EQ(task_.sense[12], 0x2A);
  EXPECT_EQ(task_.sense[13], 0x09);
  Run(a, {0x00, 0, 0, 0, 0, 0});
  ExpectGood();
  Run(b, {0x00, 0, 0, 0, 0, 0});  // b has not asked: it still learns of the change
  ASSERT_EQ(task_.status, ScsiStatus::kCheckCondition);
  EXPECT_EQ(task_.sense[12], 0x3F);
  EXPECT_EQ(task_.sense[13], 0x0E);
}

TEST_F(SpcStateTest, RsocAllListsEveryCommandOfTheTable) {
  Run(a_, {0xA3, 0x0C, 0x00, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0});
  ExpectGood();
  const auto ds = ParseAll(DataIn(), false);
  size_t expected = 0;
  const auto& table = internal::OpTable();
  for (unsigned op = 0; op < 256; ++op) {
    if (table[op].handler == nullptr) continue;
    // WRITE ATOMIC(16) only where the store writes atomically (this one does not).
    if (op == 0x9C && store_->atomic_limits().max_bytes == 0) continue;
    expected += internal::HasServiceActionField(static_cast<uint8_t>(op)) ? table[op].sa_count : 1;
  }
  EXPECT_EQ(ds.size(), expected);
  std::map<std::pair<int, int>, Descriptor> by;
  for (const auto& d : ds) by[{d.op, d.servactv ? d.sa : -1}] = d;
  const std::pair<int, int> read10{0x28, -1}, read16{0x88, -1};
  ASSERT_TRUE(by.count(read10));
  EXPECT_EQ(by[read10].cdb_len, 10);
  EXPECT_FALSE(by[read10].ctdp);
  EXPECT_EQ(by[read16].cdb_len, 16);
  EXPECT_TRUE(by.count(std::pair<int, int>{0x9E, 0x10}));
  EXPECT_TRUE(by.count(std::pair<int, int>{0xA3, 0x0A}));
  EXPECT_TRUE(by.count(std::pair<int, int>{0xA3, 0x0C}));
  EXPECT_TRUE(by.count(std::pair<int, int>{0xA3, 0x0D}));
  for (int sa = 0; sa <= 3; ++sa) EXPECT_TRUE(by.count(std::pair<int, int>{0x5E, sa})) << sa;
  for (int sa = 0; sa <= 7; ++sa) EXPECT_TRUE(by.count(std::pair<int, int>{0x5F, sa})) << sa;
  EXPECT_TRUE(by.count(std::pair<int, int>{0x15, -1}));
  EXPECT_TRUE(by.count(std::pair<int, int>{0x16, -1}));
  EXPECT_FALSE(by.count(std::pair<int, int>{0x01, -1}));
  EXPECT_FALSE(
      by.count(std::pair<int, int>{0x9E, -1}));  // service-action opcodes only appear with SERVACTV
}

TEST_F(SpcStateTest, RsocRctdAddsTimeoutsDescriptors) {
  Run(a_, {0xA3, 0x0C, 0x80, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0});
  ExpectGood();
  const auto ds = ParseAll(DataIn(), true);
  ASSERT_FALSE(ds.empty());
  for (const auto& d : ds) EXPECT_TRUE(d.ctdp) << int(d.op);
}

TEST_F(SpcStateTest, RsocOneCommand) {
  Run(a_, {0xA3, 0x0C, 0x01, 0x28, 0, 0, 0, 0, 1, 0, 0, 0});  // READ(10)
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 4u + 10);
  EXPECT_EQ(d[1], 0x03);  // SUPPORT 011b, CTDP=0
  EXPECT_EQ(LoadBe16(&d[2]), 10);
  EXPECT_EQ(d[4], 0x28);
  EXPECT_EQ(d[5] & 0x18, 0x18);  // DPO and FUA evaluated (libiscsi's DpoFua tests read this)
  EXPECT_EQ(d[13], 0x07);

  Run(a_, {0xA3, 0x0C, 0x81, 0x2A, 0, 0, 0, 0, 1, 0, 0, 0});  // WRITE(10) with RCTD
  ExpectGood();
  d = DataIn();
  ASSERT_EQ(d.size(), 4u + 10 + 12);
  EXPECT_EQ(d[1], 0x83);
  EXPECT_EQ(LoadBe16(&d[14]), 0x0A);

  Run(a_, {0xA3, 0x0C, 0x02, 0x9E, 0, 0x10, 0, 0, 1, 0, 0, 0});  // READ CAPACITY(16)
  ExpectGood();
  d = DataIn();
  ASSERT_EQ(d.size(), 4u + 16);
  EXPECT_EQ(d[4], 0x9E);
  EXPECT_EQ(d[5], 0x10);

  Run(a_, {0xA3, 0x0C, 0x03, 0x5E, 0, 0x03, 0, 0, 1, 0, 0, 0});  // option 3, PRIN READ FULL
  ExpectGood();
  EXPECT_EQ(DataIn()[1], 0x03);

  Run(a_, {0xA3, 0x0C, 0x01, 0x01, 0, 0, 0, 0, 1, 0, 0, 0});  // unsupported opcode
  ExpectGood();
  d = DataIn();
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[1], 0x01);  // SUPPORT 001b: not supported
  EXPECT_EQ(LoadBe16(&d[2]), 0);

  Run(a_, {0xA3, 0x0C, 0x02, 0x9E, 0, 0x15, 0, 0, 1, 0, 0, 0});  // unsupported service action
  ExpectGood();
  EXPECT_EQ(DataIn()[1], 0x01);
}

TEST_F(SpcStateTest, RsocErrors) {
  Run(a_, {0xA3, 0x0C, 0x01, 0x9E, 0, 0, 0, 0, 1, 0, 0, 0});  // has service actions
  ExpectInvalidField(true, 3);
  Run(a_, {0xA3, 0x0C, 0x02, 0x28, 0, 0, 0, 0, 1, 0, 0, 0});  // has none
  ExpectInvalidField(true, 3);
  Run(a_, {0xA3, 0x0C, 0x04, 0x28, 0, 0, 0, 0, 1, 0, 0, 0});  // reporting option 100b
  ExpectInvalidField(true, 2, 2);
  Run(a_, {0xA3, 0x0C, 0x08, 0, 0, 0, 0, 0, 1, 0, 0, 0});  // reserved bit
  ExpectInvalidField(true, 2);
  Run(a_, {0xA3, 0x1F, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0});  // unknown MAINTENANCE IN action
  ExpectInvalidField(true, 1, 4);
}

TEST_F(SpcStateTest, ReportSupportedTaskManagementFunctions) {
  Run(a_, {0xA3, 0x0D, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0});
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 4u);
  // ABORT TASK, ABORT TASK SET, CLEAR TASK SET, LOGICAL UNIT RESET, TARGET RESET; no CLEAR ACA,
  // no QUERY TASK, no WAKEUP.
  EXPECT_EQ(d[0], 0x80 | 0x40 | 0x10 | 0x08 | 0x02);
  EXPECT_EQ(d[1], 0);
  Run(a_, {0xA3, 0x0D, 0x80, 0, 0, 0, 0, 0, 0, 16, 0, 0});  // REPD
  ExpectGood();
  d = DataIn();
  ASSERT_EQ(d.size(), 16u);
  EXPECT_EQ(d[3], 0x0C);
  Run(a_, {0xA3, 0x0D, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0});  // allocation length below 4
  ExpectInvalidField(true, 6);
  Run(a_, {0xA3, 0x0D, 0x01, 0, 0, 0, 0, 0, 0, 4, 0, 0});
  ExpectInvalidField(true, 2);
}

TEST_F(SpcStateTest, PreventAllowMediumRemoval) {
  Run(a_, {0x1E, 0, 0, 0, 1, 0});
  ExpectGood();
  Run(a_, {0x1E, 0, 0, 0, 0, 0});
  ExpectGood();
  Run(a_, {0x1E, 0, 0, 0, 2, 0});  // obsolete PREVENT value
  ExpectInvalidField(true, 4, 1);
  Run(a_, {0x1E, 1, 0, 0, 0, 0});
  ExpectInvalidField(true, 1);
  Run(a_, {0x1E, 0, 0, 0, 0x80, 0});
  ExpectInvalidField(true, 4);
}

TEST_F(SpcStateTest, CapacityChangedReachesEveryNexus) {
  Engine::CapacityChanged(lun());
  ExpectUa(a_, Asc::kCapacityDataChanged);
  ExpectUa(b_, Asc::kCapacityDataChanged);
  ExpectNoUa(a_);
}

// ------------------------------------------------------------------------------------------------
// MODE SENSE / MODE SELECT

// MODE SELECT(6) parameter list: a 4-byte header and the caching page with `wce`.
std::vector<uint8_t> CachingSelect6(bool wce) {
  std::vector<uint8_t> p(4 + 20, 0);
  p[4] = 0x08;
  p[5] = 0x12;
  p[6] = wce ? 0x04 : 0x00;
  return p;
}

TEST_F(SpcStateTest, ModeSelectTurnsWriteCacheOffAndWritesGoThrough) {
  EXPECT_TRUE(lun().mode_pages().write_cache_enabled());
  ASSERT_TRUE(CanWrite(a_));
  EXPECT_FALSE(store_->last_fua);

  Run(a_, {0x15, 0x10, 0, 0, 24, 0}, CachingSelect6(false));
  ExpectGood();
  EXPECT_FALSE(lun().mode_pages().write_cache_enabled());
  Run(a_, {0x1A, 0x08, 0x08, 0, 255, 0});
  ExpectGood();
  EXPECT_EQ(DataIn()[6] & 0x04, 0);  // current WCE=0
  Run(a_, {0x1A, 0x08, 0x88, 0, 255, 0});
  ExpectGood();
  EXPECT_EQ(DataIn()[6] & 0x04, 0x04);  // default WCE=1

  // SPC-4 6.9: the other nexuses are told, the issuer is not.
  ExpectNoUa(a_);
  ExpectUa(b_, Asc::kModeParametersChanged);

  ASSERT_TRUE(CanWrite(a_));
  EXPECT_TRUE(store_->last_fua);  // WCE=0: every WRITE behaves as FUA

  // Selecting the same values again changes nothing and raises nothing.
  Run(a_, {0x15, 0x10, 0, 0, 24, 0}, CachingSelect6(false));
  ExpectGood();
  ExpectNoUa(b_);
}

// SBC-3 6.4.5: with WCE=0 no write completes before its data is on the medium, whatever the
// command: WRITE SAME and COMPARE AND WRITE reach the store as FUA writes too.
TEST_F(SpcStateTest, WriteCacheOffMakesWriteSameAndCompareAndWriteFua) {
  const std::vector<uint8_t> block(kBlock, 0x11);
  std::vector<uint8_t> caw(2 * kBlock, 0);  // compare zeros (a fresh store), write zeros
  auto write_same = [&] { Run(a_, {0x41, 0, 0, 0, 0, 8, 0, 0, 4, 0}, block, kBlock); };
  auto compare_and_write = [&] {
    Run(a_, {0x89, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 1, 0, 0}, caw, 2 * kBlock);
  };
  ASSERT_TRUE(CanWrite(a_));
  write_same();
  ExpectGood();
  EXPECT_FALSE(store_->last_fua);
  compare_and_write();
  ExpectGood();
  EXPECT_FALSE(store_->last_fua);

  Run(a_, {0x15, 0x10, 0, 0, 24, 0}, CachingSelect6(false));
  ExpectGood();
  ExpectNoUa(a_);
  const int before = store_->writes;
  write_same();
  ExpectGood();
  EXPECT_GT(store_->writes, before);
  EXPECT_TRUE(store_->last_fua);
  store_->last_fua = false;
  compare_and_write();
  ExpectGood();
  EXPECT_TRUE(store_->last_fua);
}

TEST_F(SpcStateTest, ModeSelect10WithBlockDescriptor) {
  std::vector<uint8_t> p(8 + 8 + 20, 0);
  StoreBe16(&p[6], 8);
  StoreBe32(&p[8], 0);  // NUMBER OF LOGICAL BLOCKS 0: unchanged
  StoreBe24(&p[13], kBlock);
  p[16] = 0x08;
  p[17] = 0x12;
  Run(a_, {0x55, 0x10, 0, 0, 0, 0, 0, 0, static_cast<uint8_t>(p.size()), 0}, p);
  ExpectGood();
  EXPECT_FALSE(lun().mode_pages().write_cache_enabled());

  StoreBe24(&p[13], 4096);  // another block length: not changeable
  Run(a_, {0x55, 0x10, 0, 0, 0, 0, 0, 0, static_cast<uint8_t>(p.size()), 0}, p);
  ExpectInvalidField(false, 8 + 5);
}

TEST_F(SpcStateTest, ModeSelectRejectsUnchangeableAndMalformedData) {
  // Control page with QUEUE ALGORITHM MODIFIER changed (byte 3 of the page).
  std::vector<uint8_t> ctl(4 + 12, 0);
  ctl[4] = 0x0A;
  ctl[5] = 0x0A;
  ctl[6] = 0x02;
  ctl[7] = 0x00;  // current 0x10
  Run(a_, {0x15, 0x10, 0, 0, 16, 0}, ctl);
  ExpectInvalidField(false, 4 + 3, 4);

  auto p = CachingSelect6(false);
  p[4] |= 0x80;  // PS is reserved in MODE SELECT
  Run(a_, {0x15, 0x10, 0, 0, 24, 0}, p);
  ExpectInvalidField(false, 4, 7);

  p = CachingSelect6(false);
  p[5] = 0x10;  // wrong page length
  Run(a_, {0x15, 0x10, 0, 0, 24, 0}, p);
  ExpectInvalidField(false, 5);

  p = CachingSelect6(false);
  p[4] = 0x19;  // a page we do not have
  Run(a_, {0x15, 0x10, 0, 0, 24, 0}, p);
  ExpectInvalidField(false, 4);

  p = CachingSelect6(false);
  p[6] |= 0x01;  // RCD: not changeable
  Run(a_, {0x15, 0x10, 0, 0, 24, 0}, p);
  ExpectInvalidField(false, 6, 0);

  p = CachingSelect6(false);
  p[1] = 0x05;  // MEDIUM TYPE
  Run(a_, {0x15, 0x10, 0, 0, 24, 0}, p);
  ExpectInvalidField(false, 1);

  Run(a_, {0x15, 0x10, 0, 0, 14, 0}, CachingSelect6(false));  // the page runs past the list
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kParameterListLengthError);

  Run(a_, {0x15, 0x00, 0, 0, 24, 0}, CachingSelect6(false));  // PF=0
  ExpectInvalidField(true, 1, 4);
  Run(a_, {0x15, 0x11, 0, 0, 24, 0}, CachingSelect6(false));  // SP=1 without a state store
  ExpectInvalidField(true, 1, 0);
  Run(a_, {0x15, 0x10, 1, 0, 24, 0}, CachingSelect6(false));  // reserved CDB byte
  ExpectInvalidField(true, 2);

  EXPECT_TRUE(lun().mode_pages().write_cache_enabled());  // nothing applied
  ExpectNoUa(b_);
  Run(a_, {0x15, 0x10, 0, 0, 0, 0});  // empty list: nothing to do
  ExpectGood();
}

TEST_F(SpcStateTest, ModeSenseSubpagesAndPageControl) {
  Run(a_, {0x1A, 0x08, 0x0A, 0x01, 255, 0});  // control extension
  ExpectGood();
  auto d = DataIn();
  ASSERT_EQ(d.size(), 4u + 32);
  EXPECT_EQ(d[4], 0x4A);  // SPF=1, page 0Ah
  EXPECT_EQ(d[5], 0x01);
  EXPECT_EQ(LoadBe16(&d[6]), 0x1C);
  Run(a_, {0x1A, 0x08, 0x3F, 0xFF, 255, 0});  // all pages and subpages
  ExpectGood();
  EXPECT_EQ(DataIn().size(), 4u + 12 + 16 + 20 + 12 + 32 + 12);
  Run(a_, {0x1A, 0x08, 0x0A, 0xFF, 255, 0});  // control with its subpages
  ExpectGood();
  EXPECT_EQ(DataIn().size(), 4u + 12 + 32);
  Run(a_, {0x1A, 0x08, 0x3F, 0x05, 255, 0});
  ExpectInvalidField(true, 3);
  Run(a_, {0x1A, 0x01, 0x3F, 0, 255, 0});  // reserved bit in byte 1
  ExpectInvalidField(true, 1);
  Run(a_, {0x1A, 0x08, 0xC8, 0, 255, 0});  // saved values without a state store
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kSavingParametersNotSupported);
}

TEST_F(SpcStateTest, SavedModeValuesSurviveARestart) {
  NewLun(true);
  Login(a_);
  Run(a_, {0x1A, 0x08, 0x08, 0, 255, 0});
  ExpectGood();
  EXPECT_EQ(DataIn()[4] & 0x80, 0x80);  // PS=1: savable

  Run(a_, {0x15, 0x11, 0, 0, 24, 0}, CachingSelect6(false));  // SP=1
  ExpectGood();
  EXPECT_EQ(state_->saves, 1);
  EXPECT_NE(state_->blob.find("mode wce=0"), std::string::npos);
  Run(a_, {0x1A, 0x08, 0xC8, 0, 255, 0});  // saved values
  ExpectGood();
  EXPECT_EQ(DataIn()[6] & 0x04, 0);

  NewLun(true);  // restart: current values start from the saved ones
  Login(a_);
  EXPECT_FALSE(lun().mode_pages().write_cache_enabled());
  Run(a_, {0x1A, 0x08, 0x88, 0, 255, 0});
  ExpectGood();
  EXPECT_EQ(DataIn()[6] & 0x04, 0x04);  // defaults unchanged

  state_->err = EIO;  // a save that fails is reported
  Run(a_, {0x15, 0x11, 0, 0, 24, 0}, CachingSelect6(true));
  ExpectCheck(SenseKey::kHardwareError, Asc::kInternalTargetFailure);
}

// ------------------------------------------------------------------------------------------------
// RESERVE / RELEASE (SPC-2)

TEST_F(SpcStateTest, Reserve6BlocksOtherNexuses) {
  Run(a_, {0x16, 0, 0, 0, 0, 0});
  ExpectGood();
  EXPECT_TRUE(lun().reservations().active());
  Run(a_, {0x16, 0, 0, 0, 0, 0});  // again by the holder
  ExpectGood();
  Run(b_, {0x16, 0, 0, 0, 0, 0});
  ExpectConflict();
  Run(b_, {0x1A, 0, 0x3F, 0, 255, 0});  // MODE SENSE conflicts
  ExpectConflict();
  EXPECT_FALSE(CanRead(b_));
  EXPECT_FALSE(CanWrite(b_));
  Run(b_, {0x12, 0, 0, 0, 36, 0});  // INQUIRY does not
  ExpectGood();
  Run(b_, {0x5E, 0, 0, 0, 0, 0, 0, 0, 64, 0});  // PERSISTENT RESERVE IN does not
  ExpectGood();
  Prout(b_, 0x00, 0, 0, 0x1234);  // PERSISTENT RESERVE OUT does
  ExpectConflict();
  Run(b_, {0x17, 0, 0, 0, 0, 0});  // RELEASE by another nexus: no-op
  ExpectGood();
  EXPECT_TRUE(CanWrite(a_));
  Run(a_, {0x17, 0, 0, 0, 0, 0});
  ExpectGood();
  EXPECT_FALSE(lun().reservations().active());
  Run(b_, {0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0});  // RESERVE(10)
  ExpectGood();
  EXPECT_FALSE(CanRead(a_));
  Run(b_, {0x57, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  ExpectGood();
  EXPECT_TRUE(CanRead(a_));
}

TEST_F(SpcStateTest, Reserve6ReleasedByLunResetAndNexusLoss) {
  Run(a_, {0x16, 0, 0, 0, 0, 0});
  ExpectGood();
  Engine::ResetLun(lun(), nullptr);
  ExpectUa(b_, Asc::kBusDeviceReset);
  EXPECT_TRUE(CanWrite(b_));

  auto gone = std::make_unique<Nexus>(kPortC, 1);
  Login(*gone);
  Run(*gone, {0x16, 0, 0, 0, 0, 0});
  ExpectGood();
  EXPECT_FALSE(CanWrite(b_));
  gone.reset();  // I_T nexus loss
  EXPECT_TRUE(CanWrite(b_));
  EXPECT_FALSE(lun().reservations().active());
}

TEST_F(SpcStateTest, ReserveRefusesThirdPartyAndPersistentState) {
  Run(a_, {0x16, 0x01, 0, 0, 0, 0});
  ExpectInvalidField(true, 1);
  Run(a_, {0x56, 0x10, 0, 0, 0, 0, 0, 0, 0, 0});  // 3RDPTY
  ExpectInvalidField(true, 1);
  Prout(b_, 0x00, 0, 0, 0xB);  // a registration
  ExpectGood();
  Run(a_, {0x16, 0, 0, 0, 0, 0});  // SPC-4 5.13.3: conflicts with persistent state
  ExpectConflict();
}

// ------------------------------------------------------------------------------------------------
// PERSISTENT RESERVE IN / OUT

TEST_F(SpcStateTest, RegisterAndReadKeys) {
  auto d = Prin(a_, 0x00);
  ASSERT_EQ(d.size(), 8u);
  EXPECT_EQ(LoadBe32(&d[0]), 0u);  // PRGENERATION
  Prout(a_, 0x00, 0, 0, 0xAAAA);
  ExpectGood();
  Prout(b_, 0x06, 0, 0x9999, 0xBBBB);  // REGISTER AND IGNORE EXISTING KEY
  ExpectGood();
  d = Prin(a_, 0x00);
  EXPECT_EQ(LoadBe32(&d[0]), 2u);
  EXPECT_EQ((std::vector<uint64_t>{0xAAAA, 0xBBBB}), Keys(a_));
  EXPECT_FALSE(lun().reservations().active());  // registrations alone: fast path untouched

  Prout(a_, 0x00, 0, 0x1111, 0xCCCC);  // wrong key
  ExpectConflict();
  Prout(c_, 0x00, 0, 0x1111, 0xCCCC);  // unregistered with a non-zero key
  ExpectConflict();
  Prout(c_, 0x00, 0, 0, 0);  // unregistered, key 0: nothing happens
  ExpectGood();
  Prout(a_, 0x00, 0, 0xAAAA, 0xA2);  // change the key
  ExpectGood();
  Prout(b_, 0x06, 0, 0, 0xB2);  // replace, ignoring the old one
  ExpectGood();
  EXPECT_EQ((std::vector<uint64_t>{0xA2, 0xB2}), Keys(a_));
  Prout(a_, 0x00, 0, 0xA2, 0);  // unregister
  ExpectGood();
  EXPECT_EQ((std::vector<uint64_t>{0xB2}), Keys(a_));
  EXPECT_EQ(LoadBe32(&Prin(a_, 0x00)[0]), 5u);
}

TEST_F(SpcStateTest, ProutValidatesCdbAndParameterList) {
  Prout(a_, 0x00, 0, 0, 0xA, 0x08);  // SPEC_I_PT: not offered
  ExpectInvalidField(false, 20, 3);
  Prout(a_, 0x00, 0, 0, 0xA, 0x01);  // APTPL without a state store (PTPL_C=0)
  ExpectInvalidField(false, 20, 0);
  Prout(a_, 0x00, 0, 0, 0xA, 0x02);  // reserved bit
  ExpectInvalidField(false, 20);
  Prout(a_, 0x00, 0, 0, 0xA);
  ExpectGood();
  Prout(a_, 0x01, 0x2, 0xA, 0);  // TYPE 2 is obsolete
  ExpectInvalidField(true, 2, 3);
  Prout(a_, 0x01, 0x1, 0xA, 0, 0, 0x2);  // element scope
  ExpectInvalidField(true, 2, 7);
  Prout(a_, 0x08, 0x1, 0xA, 0);  // no such service action
  ExpectInvalidField(true, 1, 4);
  std::vector<uint8_t> p(20, 0);
  Run(a_, {0x5F, 0x00, 0, 0, 0, 0, 0, 0, 20, 0}, p);  // short list
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
  Run(a_, {0x5E, 0x04, 0, 0, 0, 0, 0, 0, 64, 0});  // PRIN service action 4
  ExpectInvalidField(true, 1, 4);
  Run(a_, {0x5E, 0x00, 1, 0, 0, 0, 0, 0, 64, 0});
  ExpectInvalidField(true, 2);
}

TEST_F(SpcStateTest, ReserveReadReservationAndRelease) {
  Prout(a_, 0x00, 0, 0, 0xA);
  Prout(b_, 0x00, 0, 0, 0xB);
  Prout(c_, 0x01, kPrWriteExclusive, 0, 0);  // unregistered
  ExpectConflict();
  Prout(a_, 0x01, kPrWriteExclusive, 0xB, 0);  // someone else's key
  ExpectConflict();
  Prout(a_, 0x01, kPrWriteExclusive, 0xA, 0);
  ExpectGood();
  EXPECT_TRUE(lun().reservations().active());
  auto d = Prin(a_, 0x01);
  ASSERT_EQ(d.size(), 24u);
  EXPECT_EQ(LoadBe32(&d[4]), 16u);
  EXPECT_EQ(LoadBe64(&d[8]), 0xAu);
  EXPECT_EQ(d[21], kPrWriteExclusive);
  Prout(a_, 0x01, kPrWriteExclusive, 0xA, 0);  // same again: no-op
  ExpectGood();
  Prout(a_, 0x01, kPrExclusiveAccess, 0xA, 0);  // another type
  ExpectConflict();
  Prout(b_, 0x01, kPrWriteExclusive, 0xB, 0);  // another holder
  ExpectConflict();
  Prout(b_, 0x02, kPrWriteExclusive, 0xB, 0);  // release by a non-holder: no-op
  ExpectGood();
  EXPECT_TRUE(lun().reservations().active());
  Prout(a_, 0x02, kPrExclusiveAccess, 0xA, 0);  // wrong type
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidReleaseOfPersistentReservation);
  Prout(a_, 0x02, kPrWriteExclusive, 0xA, 0);
  ExpectGood();
  EXPECT_FALSE(lun().reservations().active());
  EXPECT_EQ(Prin(a_, 0x01).size(), 8u);
  ExpectNoUa(b_);  // releasing a Write Exclusive reservation tells nobody
}

TEST_F(SpcStateTest, AllRegistrantsReservationKeyIsZero) {
  Prout(a_, 0x00, 0, 0, 0xA);
  Prout(a_, 0x01, kPrExclusiveAccessAllRegistrants, 0xA, 0);
  ExpectGood();
  auto d = Prin(a_, 0x01);
  ASSERT_EQ(d.size(), 24u);
  EXPECT_EQ(LoadBe64(&d[8]), 0u);
  EXPECT_EQ(d[21], kPrExclusiveAccessAllRegistrants);
  Prout(b_, 0x00, 0, 0, 0xB);  // a new registrant holds it too
  EXPECT_TRUE(CanWrite(b_));
  Prout(a_, 0x00, 0, 0xA, 0);  // the first holder leaves: the reservation stays
  ExpectGood();
  EXPECT_FALSE(CanRead(a_));
  Prout(b_, 0x00, 0, 0xB, 0);  // the last one leaves: it goes
  EXPECT_FALSE(lun().reservations().active());
}

// SPC-4 5.13.1 table 63 / SBC-3 table 13, as libiscsi's ProutReserve.Access* tests read it:
// access of a registered non-holder (B) and of an unregistered nexus (C).
struct AccessCase {
  uint8_t type;
  bool reg_read, reg_write, unreg_read, unreg_write;
};

TEST_F(SpcStateTest, AccessByReservationType) {
  const AccessCase cases[] = {
      {kPrWriteExclusive, true, false, true, false},
      {kPrExclusiveAccess, false, false, false, false},
      {kPrWriteExclusiveRegistrantsOnly, true, true, true, false},
      {kPrExclusiveAccessRegistrantsOnly, true, true, false, false},
      {kPrWriteExclusiveAllRegistrants, true, true, true, false},
      {kPrExclusiveAccessAllRegistrants, true, true, false, false},
  };
  for (const AccessCase& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.type));
    Prout(a_, 0x06, 0, 0, 0xA);
    Prout(b_, 0x06, 0, 0, 0xB);
    Prout(a_, 0x01, c.type, 0xA, 0);
    ExpectGood();
    EXPECT_TRUE(CanRead(a_));
    EXPECT_TRUE(CanWrite(a_));
    EXPECT_EQ(CanRead(b_), c.reg_read);
    EXPECT_EQ(CanWrite(b_), c.reg_write);
    EXPECT_EQ(CanRead(c_), c.unreg_read);
    EXPECT_EQ(CanWrite(c_), c.unreg_write);
    // Commands every reservation allows, and ones none does (for a non-registrant).
    Run(c_, {0x12, 0, 0, 0, 36, 0});
    ExpectGood();
    Run(c_, {0x00, 0, 0, 0, 0, 0});
    ExpectGood();
    Run(c_, {0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0});
    ExpectGood();
    Run(c_, {0xA0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0});
    ExpectGood();
    Run(c_, {0x1A, 0, 0x3F, 0, 255, 0});
    ExpectConflict();
    Run(c_, {0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0});  // SYNCHRONIZE CACHE
    ExpectConflict();
    Run(c_, {0x1E, 0, 0, 0, 1, 0});  // PREVENT: conflicts; ALLOW does not
    ExpectConflict();
    Run(c_, {0x1E, 0, 0, 0, 0, 0});
    ExpectGood();
    Run(c_, {0x1B, 0, 0, 0, 0x01, 0});  // START: allowed; STOP: conflicts
    ExpectGood();
    Run(c_, {0x1B, 0, 0, 0, 0x00, 0});
    ExpectConflict();
    Run(c_, {0x16, 0, 0, 0, 0, 0});  // RESERVE(6)
    ExpectConflict();
    Run(c_, {0x17, 0, 0, 0, 0, 0});  // RELEASE(6) from a non-registrant
    ExpectConflict();
    Prout(a_, 0x03, 0, 0xA, 0);  // CLEAR
    ExpectGood();
    EXPECT_FALSE(lun().reservations().active());
    Login(b_);  // RESERVATIONS PREEMPTED from CLEAR
  }
}

TEST_F(SpcStateTest, ReleasingRegistrantsOnlyReservationTellsRegistrants) {
  Prout(a_, 0x00, 0, 0, 0xA);
  Prout(b_, 0x00, 0, 0, 0xB);
  Prout(a_, 0x01, kPrWriteExclusiveRegistrantsOnly, 0xA, 0);
  ExpectGood();
  Prout(a_, 0x02, kPrWriteExclusiveRegistrantsOnly, 0xA, 0);
  ExpectGood();
  ExpectUa(b_, Asc::kReservationsReleased);
  ExpectNoUa(a_);
  ExpectNoUa(c_);  // not a registrant
}

TEST_F(SpcStateTest, UnregisteringHolderReleasesReservation) {
  Prout(a_, 0x00, 0, 0, 0xA);
  Prout(b_, 0x00, 0, 0, 0xB);
  Prout(a_, 0x01, kPrExclusiveAccessRegistrantsOnly, 0xA, 0);
  Prout(a_, 0x00, 0, 0xA, 0);
  ExpectGood();
  EXPECT_FALSE(lun().reservations().active());
  ExpectUa(b_, Asc::kReservationsReleased);
}

TEST_F(SpcStateTest, ClearRemovesEverythingAndTellsOthers) {
  Prout(a_, 0x00, 0, 0, 0xA);
  Prout(b_, 0x00, 0, 0, 0xB);
  Prout(a_, 0x01, kPrExclusiveAccess, 0xA, 0);
  Prout(c_, 0x03, 0, 0, 0);  // unregistered
  ExpectConflict();
  Prout(b_, 0x03, 0, 0xA, 0);  // wrong key
  ExpectConflict();
  Prout(b_, 0x03, 0, 0xB, 0);
  ExpectGood();
  EXPECT_TRUE(Keys(b_).empty());
  EXPECT_FALSE(lun().reservations().active());
  ExpectUa(a_, Asc::kReservationsPreempted);
  ExpectNoUa(b_);
}

TEST_F(SpcStateTest, PreemptTakesReservationFromHolder) {
  Prout(a_, 0x00, 0, 0, 0xA);
  Prout(b_, 0x00, 0, 0, 0xB);
  Prout(c_, 0x00, 0, 0, 0xC);
  Prout(a_, 0x01, kPrWriteExclusive, 0xA, 0);
  Prout(b_, 0x04, kPrExclusiveAccess, 0xB, 0xA);  // PREEMPT the holder, new type
  ExpectGood();
  auto d = Prin(b_, 0x01);
  ASSERT_EQ(d.size(), 24u);
  EXPECT_EQ(LoadBe64(&d[8]), 0xBu);
  EXPECT_EQ(d[21], kPrExclusiveAccess);
  EXPECT_EQ((std::vector<uint64_t>{0xB, 0xC}), Keys(b_));
  ExpectUa(a_, Asc::kRegistrationsPreempted);
  ExpectUa(c_, Asc::kReservationsReleased);  // the type changed
  EXPECT_FALSE(CanRead(a_));
  EXPECT_EQ(aborter_->calls, 0);  // PREEMPT does not abort
}

TEST_F(SpcStateTest, PreemptRegistrationsOnly) {
  Prout(a_, 0x00, 0, 0, 0xA);
  Prout(b_, 0x00, 0, 0, 0xB);
  Prout(a_, 0x04, kPrWriteExclusive, 0xA, 0x77);  // nobody has that key
  ExpectConflict();
  Prout(a_, 0x04, kPrWriteExclusive, 0xA, 0);  // key 0 without a reservation
  ExpectInvalidField(false, 8);
  Prout(a_, 0x04, kPrWriteExclusive, 0xA, 0xB);
  ExpectGood();
  EXPECT_EQ((std::vector<uint64_t>{0xA}), Keys(a_));
  EXPECT_FALSE(lun().reservations().active());  // no reservation was created
  ExpectUa(b_, Asc::kRegistrationsPreempted);
}

TEST_F(SpcStateTest, PreemptAndAbortAbortsThePreemptedNexuses) {
  Prout(a_, 0x00, 0, 0, 0xA);
  Prout(b_, 0x00, 0, 0, 0xB);
  Prout(b_, 0x01, kPrWriteExclusive, 0xB, 0);
  Prout(a_, 0x05, kPrWriteExclusive, 0xA, 0xB);
  ExpectGood();
  ASSERT_EQ(aborter_->calls, 1);
  EXPECT_EQ(aborter_->last_lun, 0u);
  ASSERT_EQ(aborter_->last_who.size(), 1u);
  EXPECT_TRUE(aborter_->last_who[0].Matches(b_));
  EXPECT_FALSE(aborter_->last_who[0].Matches(a_));
  EXPECT_EQ(aborter_->last_except, &a_);
  ExpectUa(b_, Asc::kRegistrationsPreempted);
  EXPECT_FALSE(CanWrite(b_));
}

// SPC-4 5.13.11.2.4, SAM-5 5.6: PREEMPT AND ABORT ends only once the tasks it aborted have ended,
// so that none of the preempted nexus's writes lands after its GOOD; with APTPL its state is
// saved after that.
TEST_F(SpcStateTest, PreemptAndAbortEndsOnceTheAbortedTasksHaveEnded) {
  for (const bool aptpl : {false, true}) {
    SCOPED_TRACE(aptpl ? "APTPL" : "no APTPL");
    NewLun(/*with_state=*/aptpl);
    Login(a_);
    Login(b_);
    const uint8_t flags = aptpl ? 0x01 : 0x00;
    Prout(a_, 0x00, 0, 0, 0xA, flags);
    Prout(b_, 0x00, 0, 0, 0xB, flags);
    Prout(b_, 0x01, kPrWriteExclusive, 0xB, 0);
    const int saves = state_->saves;
    aborter_->keep_holds = true;
    Start(a_, ProutCdb(0x05, kPrWriteExclusive), ProutList(0xA, 0xB, flags));
    EXPECT_EQ(completions_, 0) << "answered while an aborted task was in the store";
    EXPECT_EQ(state_->saves, saves);
    ASSERT_EQ(aborter_->holds.size(), 1u);
    aborter_->keep_holds = false;
    aborter_->holds.clear();  // the last aborted task has ended
    EXPECT_EQ(completions_, 1);
    ExpectGood();
    EXPECT_EQ(state_->saves, saves + (aptpl ? 1 : 0));
    ExpectUa(b_, Asc::kRegistrationsPreempted);
    EXPECT_FALSE(CanWrite(b_));
  }
}

TEST_F(SpcStateTest, PreemptAllRegistrantsWithKeyZero) {
  Prout(a_, 0x00, 0, 0, 0xA);
  Prout(b_, 0x00, 0, 0, 0xB);
  Prout(a_, 0x01, kPrWriteExclusiveAllRegistrants, 0xA, 0);
  Prout(a_, 0x04, kPrExclusiveAccess, 0xA, 0);
  ExpectGood();
  EXPECT_EQ((std::vector<uint64_t>{0xA}), Keys(a_));
  auto d = Prin(a_, 0x01);
  EXPECT_EQ(LoadBe64(&d[8]), 0xAu);
  EXPECT_EQ(d[21], kPrExclusiveAccess);
  ExpectUa(b_, Asc::kRegistrationsPreempted);
}

std::vector<uint8_t> MoveList(uint64_t rk, uint64_t sark, const std::string& port, bool unreg,
                              uint16_t rel = 1) {
  std::vector<uint8_t> tid(4, 0);
  tid[0] = 0x45;  // format 01b, iSCSI
  tid.insert(tid.end(), port.begin(), port.end());
  tid.push_back(0);
  while (tid.size() % 4 != 0) tid.push_back(0);
  StoreBe16(&tid[2], static_cast<uint16_t>(tid.size() - 4));
  std::vector<uint8_t> p(24, 0);
  StoreBe64(&p[0], rk);
  StoreBe64(&p[8], sark);
  p[17] = unreg ? 0x02 : 0;
  StoreBe16(&p[18], rel);
  StoreBe32(&p[20], static_cast<uint32_t>(tid.size()));
  p.insert(p.end(), tid.begin(), tid.end());
  return p;
}

TEST_F(SpcStateTest, RegisterAndMove) {
  Prout(a_, 0x00, 0, 0, 0xA);
  Prout(a_, 0x01, kPrExclusiveAccess, 0xA, 0);
  auto p = MoveList(0xA, 0xBB, kPortB, /*unreg=*/true);
  const uint8_t n = static_cast<uint8_t>(p.size());
  Run(b_, {0x5F, 0x07, kPrExclusiveAccess, 0, 0, 0, 0, 0, n, 0}, p);  // B is not the holder
  ExpectConflict();
  auto self = MoveList(0xA, 0xBB, kPortA, true);
  Run(a_, {0x5F, 0x07, kPrExclusiveAccess, 0, 0, 0, 0, 0, n, 0}, self);
  ExpectInvalidField(false, 24);
  auto bad_port = MoveList(0xA, 0xBB, kPortB, true, 7);
  Run(a_, {0x5F, 0x07, kPrExclusiveAccess, 0, 0, 0, 0, 0, n, 0}, bad_port);
  ExpectInvalidField(false, 18);
  Run(a_, {0x5F, 0x07, kPrExclusiveAccess, 0, 0, 0, 0, 0, n, 0}, p);
  ExpectGood();
  EXPECT_EQ((std::vector<uint64_t>{0xBB}), Keys(b_));  // A unregistered (UNREG=1)
  auto d = Prin(b_, 0x01);
  EXPECT_EQ(LoadBe64(&d[8]), 0xBBu);
  EXPECT_TRUE(CanWrite(b_));
  EXPECT_FALSE(CanRead(a_));
}

TEST_F(SpcStateTest, ReportCapabilitiesAndFullStatus) {
  auto d = Prin(a_, 0x02);
  ASSERT_EQ(d.size(), 8u);
  EXPECT_EQ(LoadBe16(&d[0]), 8);
  EXPECT_EQ(d[2], 0x10 | 0x04);  // CRH, ATP_C; no SIP_C, no PTPL_C without a state store
  EXPECT_EQ(d[3], 0x80 | 0x10);  // TMV, ALLOW COMMANDS 001b
  EXPECT_EQ(d[4], 0xEA);
  EXPECT_EQ(d[5], 0x01);

  Prout(a_, 0x00, 0, 0, 0xA, 0x04);  // ALL_TG_PT
  Prout(b_, 0x00, 0, 0, 0xB);
  Prout(b_, 0x01, kPrWriteExclusive, 0xB, 0);
  d = Prin(a_, 0x03);
  ASSERT_GE(d.size(), 8u);
  EXPECT_EQ(LoadBe32(&d[4]), d.size() - 8);
  size_t pos = 8;
  std::vector<std::string> ports;
  while (pos + 24 <= d.size()) {
    const uint64_t key = LoadBe64(&d[pos]);
    const uint32_t add = LoadBe32(&d[pos + 20]);
    const uint8_t* tid = &d[pos + 24];
    EXPECT_EQ(tid[0], 0x45);
    ports.emplace_back(reinterpret_cast<const char*>(tid + 4));
    if (key == 0xA) {
      EXPECT_EQ(d[pos + 12], 0x02);  // ALL_TG_PT, not the holder
    } else {
      EXPECT_EQ(d[pos + 12], 0x01);  // R_HOLDER
      EXPECT_EQ(d[pos + 13], kPrWriteExclusive);
      EXPECT_EQ(LoadBe16(&d[pos + 18]), 1);
    }
    pos += 24 + add;
  }
  EXPECT_EQ(pos, d.size());
  EXPECT_EQ((std::vector<std::string>{kPortA, kPortB}), ports);
}

TEST_F(SpcStateTest, AptplReservationSurvivesARestart) {
  NewLun(true);
  Login(a_);
  Login(b_);
  Login(c_);
  EXPECT_EQ(Prin(a_, 0x02)[2] & 0x01, 0x01);  // PTPL_C with a state store
  Prout(a_, 0x00, 0, 0, 0xA, 0x01);           // APTPL=1
  ExpectGood();
  Prout(b_, 0x00, 0, 0, 0xB, 0x01);
  Prout(a_, 0x01, kPrExclusiveAccessRegistrantsOnly, 0xA, 0);
  ExpectGood();
  EXPECT_EQ(state_->saves, 3);
  EXPECT_NE(state_->blob.find("pr res type=6"), std::string::npos);
  EXPECT_EQ(Prin(a_, 0x02)[3] & 0x01, 0x01);  // PTPL_A

  NewLun(true);  // restart
  Login(a_);
  Login(b_);
  Login(c_);
  EXPECT_EQ((std::vector<uint64_t>{0xA, 0xB}), Keys(c_));
  auto d = Prin(c_, 0x01);
  ASSERT_EQ(d.size(), 24u);
  EXPECT_EQ(LoadBe64(&d[8]), 0xAu);
  EXPECT_EQ(d[21], kPrExclusiveAccessRegistrantsOnly);
  EXPECT_EQ(LoadBe32(&d[0]), 2u);  // PRGENERATION kept
  EXPECT_FALSE(CanRead(c_));
  EXPECT_TRUE(CanWrite(b_));

  // APTPL=0 in a later registration: nothing is kept any more.
  Prout(a_, 0x00, 0, 0xA, 0xA, 0x00);
  ExpectGood();
  EXPECT_EQ(state_->blob, "");
  NewLun(true);
  Login(c_);
  EXPECT_TRUE(Keys(c_).empty());
}

TEST_F(SpcStateTest, WithoutAptplNothingIsSaved) {
  NewLun(true);
  Login(a_);
  Prout(a_, 0x00, 0, 0, 0xA);
  Prout(a_, 0x01, kPrWriteExclusive, 0xA, 0);
  ExpectGood();
  EXPECT_EQ(state_->saves, 0);
  NewLun(true);
  Login(a_);
  EXPECT_TRUE(Keys(a_).empty());
}

}  // namespace spc_state_test
}  // namespace iscsigw::scsi
