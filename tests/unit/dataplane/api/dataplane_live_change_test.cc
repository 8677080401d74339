// A live LUN whose store settings change (read_only, direct, fault): the same LUN goes on, with
// what every I_T nexus holds in it, and its store is reopened without two ever serving at once
// (docs/live-lun-changes.md). End to end: a real Dataplane, a file or ram LUN, and the hand-built
// initiator of the connection tests.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/api/dataplane.h"
#include "dataplane/backing/file/allowed_paths.h"
#include "tests/unit/dataplane/iscsi/test_initiator.h"

namespace iscsigw::api {
namespace {

using namespace std::chrono_literals;
using iscsi::test::Pdu;
using iscsi::test::Read10Cdb;
using iscsi::test::RecvStatus;
using iscsi::test::TestInitiator;
using iscsi::test::TestUnitReadyCdb;
using iscsi::test::Write10Cdb;
using pdu::Opcode;

constexpr char kTarget[] = "iqn.2026-12.io.iscsigw:live";
constexpr char kInitiator[] = "iqn.2026-12.io.iscsigw:host-a";
constexpr char kInitiator2[] = "iqn.2026-12.io.iscsigw:host-b";
constexpr uint64_t kLunBytes = 1u << 20;
constexpr uint32_t kBlock = 512;
constexpr uint64_t kKey = 0xabcdef0123456789ull;

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
  return v;
}

std::array<uint8_t, 16> ProutCdb(uint8_t action, uint8_t type) {
  std::array<uint8_t, 16> c{};
  c[0] = 0x5f;
  c[1] = action;
  c[2] = type;
  c[8] = 24;  // parameter list length
  return c;
}

std::vector<uint8_t> ProutParams(uint64_t key, uint64_t sa_key) {
  std::vector<uint8_t> p(24, 0);
  for (int i = 0; i < 8; ++i) {
    p[i] = static_cast<uint8_t>(key >> (56 - 8 * i));
    p[8 + i] = static_cast<uint8_t>(sa_key >> (56 - 8 * i));
  }
  return p;  // APTPL 0: the registration lives only in the LUN's memory
}

std::array<uint8_t, 16> PrinCdb(uint8_t action) {
  std::array<uint8_t, 16> c{};
  c[0] = 0x5e;
  c[1] = action;
  c[8] = 255;  // allocation length
  return c;
}

class LiveLunChangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/iscsigw-live-lun-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Options o;
    o.portals = {"127.0.0.1:0"};
    o.reactors = 2;
    auto paths = backing::AllowedPaths::Make({dir_});
    ASSERT_TRUE(paths.ok()) << paths.status().message();
    o.backing.paths = paths.value();
    auto r = Dataplane::Start(o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    dp_ = std::move(r.value());
    portal_ = dp_->portals().at(0);
  }
  void TearDown() override {
    if (dp_) dp_->Stop();
    std::filesystem::remove_all(dir_);
  }

  LunSpec FileLun() const {
    LunSpec l;
    l.backing = BackingKind::kFile;
    l.path = dir_ + "/lun0.img";
    l.create = true;
    l.size_bytes = kLunBytes;
    l.block_size = kBlock;
    return l;
  }
  static LunSpec RamLun() {
    LunSpec l;
    l.backing = BackingKind::kRam;
    l.size_bytes = kLunBytes;
    l.block_size = kBlock;
    return l;
  }

  Status Apply(const LunSpec& lun) {
    Config c;
    TargetSpec t;
    t.name = kTarget;
    t.allow_any_initiator = true;
    t.luns.push_back(lun);
    c.targets.push_back(t);
    return dp_->Apply(c);
  }

  // Applies `lun` (a fault needs a test build), logs `ini` in and writes `data` at `lba`.
  void StartWriting(const LunSpec& lun, TestInitiator& ini, uint32_t lba,
                    const std::vector<uint8_t>& data) {
    ASSERT_NO_FATAL_FAILURE(ExpectApplied(lun));
    ASSERT_NO_FATAL_FAILURE(Login(ini));
    ASSERT_EQ(Command(ini, Write10Cdb(lba, static_cast<uint16_t>(data.size() / kBlock)), data)
                  .scsi_status(),
              0);
  }
  void ExpectApplied(const LunSpec& lun) {
    const Status s = Apply(lun);
    if (!s.ok() && s.message().find("no fault injection") != std::string::npos) {
      GTEST_FAIL() << "needs a build with -DISCSIGW_FAULT_INJECTION=ON (scripts/test.sh)";
    }
    ASSERT_TRUE(s.ok()) << s.message();
  }

  void Login(TestInitiator& ini, const char* name = kInitiator) {
    ASSERT_TRUE(ini.Connect(portal_));
    auto r = ini.Login({{"InitiatorName", name},
                        {"TargetName", kTarget},
                        {"SessionType", "Normal"},
                        {"HeaderDigest", "None"},
                        {"DataDigest", "None"},
                        {"ImmediateData", "Yes"},
                        {"InitialR2T", "No"},
                        {"FirstBurstLength", "65536"},
                        {"MaxRecvDataSegmentLength", "65536"},
                        {"ErrorRecoveryLevel", "0"}});
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->login_status(), 0);
    EXPECT_EQ(SenseOf(Command(ini, TestUnitReadyCdb())), (iscsi::test::Sense{0x6, 0x29, 0x00}));
  }

  // Sends a command (its data as immediate data) and returns its SCSI Response; the Data-In of a
  // read lands in *in.
  Pdu Command(TestInitiator& ini, const std::array<uint8_t, 16>& cdb,
              const std::vector<uint8_t>& out = {}, uint32_t in_len = 0,
              std::vector<uint8_t>* in = nullptr) {
    const uint32_t itt = Send(ini, cdb, out, in_len);
    return Response(ini, itt, in);
  }
  uint32_t Send(TestInitiator& ini, const std::array<uint8_t, 16>& cdb,
                const std::vector<uint8_t>& out = {}, uint32_t in_len = 0) {
    const uint32_t itt = ini.NextItt();
    const uint32_t edtl = out.empty() ? in_len : static_cast<uint32_t>(out.size());
    EXPECT_TRUE(ini.Send(ini.ScsiCommand(cdb, edtl, in_len > 0, !out.empty(), itt), out));
    return itt;
  }
  Pdu Response(TestInitiator& ini, uint32_t itt, std::vector<uint8_t>* in = nullptr) {
    for (int i = 0; i < 1000; ++i) {
      Pdu p;
      if (ini.Recv(&p, 10s) != RecvStatus::kOk) break;
      EXPECT_EQ(p.itt(), itt);
      if (p.opcode() == Opcode::kDataIn) {
        if (in != nullptr) {
          if (in->size() < p.buffer_offset() + p.data.size()) {
            in->resize(p.buffer_offset() + p.data.size());
          }
          std::copy(p.data.begin(), p.data.end(), in->begin() + p.buffer_offset());
        }
        if ((p.flags() & 0x01) == 0) continue;
      }
      return p;  // SCSI Response, or Data-In with status
    }
    ADD_FAILURE() << "no status for itt " << itt;
    Pdu none;
    none.bhs.fill(0xff);
    return none;
  }
  static std::optional<iscsi::test::Sense> SenseOf(const Pdu& p) {
    if (p.scsi_status() == 0) return iscsi::test::Sense{0, 0, 0};
    return iscsi::test::ParseSense(p);
  }

  std::vector<uint8_t> ReadBlocks(TestInitiator& ini, uint32_t lba, uint16_t blocks) {
    std::vector<uint8_t> data;
    const Pdu p = Command(ini, Read10Cdb(lba, blocks), {}, blocks * kBlock, &data);
    EXPECT_EQ(p.scsi_status(), 0);
    return data;
  }
  std::vector<uint64_t> Keys(TestInitiator& ini) {
    std::vector<uint8_t> d;
    const Pdu p = Command(ini, PrinCdb(0x00), {}, 255, &d);
    EXPECT_EQ(p.scsi_status(), 0);
    std::vector<uint64_t> keys;
    if (d.size() < 8) return keys;
    const uint32_t len = (uint32_t{d[4]} << 24) | (d[5] << 16) | (d[6] << 8) | d[7];
    for (size_t off = 8; off + 8 <= d.size() && off < 8 + len; off += 8) {
      uint64_t k = 0;
      for (int i = 0; i < 8; ++i) k = (k << 8) | d[off + i];
      keys.push_back(k);
    }
    return keys;
  }
  std::vector<uint8_t> FileBytes(const std::string& path, size_t off, size_t n) {
    std::vector<uint8_t> v(n);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::pread(fd, v.data(), n, static_cast<off_t>(off)), static_cast<ssize_t>(n));
    ::close(fd);
    return v;
  }

  std::string dir_;
  std::unique_ptr<Dataplane> dp_;
  std::string portal_;
};

// Before: a second LUN beside the old one, without the registration and the reservation (READ
// KEYS empty), its I_T nexus never told that the medium became write protected.
TEST_F(LiveLunChangeTest, ReadOnlyChangesKeepTheRegistrationsAndTheData) {
  LunSpec lun = FileLun();
  TestInitiator ini;
  const auto data = Pattern(8 * kBlock, 3);
  ASSERT_NO_FATAL_FAILURE(StartWriting(lun, ini, 16, data));
  ASSERT_EQ(Command(ini, ProutCdb(0x00, 0), ProutParams(0, kKey)).scsi_status(), 0);
  ASSERT_EQ(Command(ini, ProutCdb(0x01, 0x01), ProutParams(kKey, 0)).scsi_status(), 0);

  lun.read_only = true;
  const Status s = Apply(lun);
  ASSERT_TRUE(s.ok()) << s.message();
  // SPC-4 5.14: the mode parameter header's WP bit changed under the nexus.
  EXPECT_EQ(SenseOf(Command(ini, TestUnitReadyCdb())), (iscsi::test::Sense{0x6, 0x2a, 0x01}));
  EXPECT_EQ(Keys(ini), std::vector<uint64_t>{kKey});
  EXPECT_EQ(ReadBlocks(ini, 16, 8), data);
  // The reservation holder's write: WRITE PROTECTED, not RESERVATION CONFLICT and not GOOD.
  EXPECT_EQ(SenseOf(Command(ini, Write10Cdb(40, 1), Pattern(kBlock, 9))),
            (iscsi::test::Sense{0x7, 0x27, 0x00}));
  // What was acknowledged before the change is in the file.
  EXPECT_EQ(FileBytes(lun.path, 16 * kBlock, data.size()), data);

  lun.read_only = false;
  ASSERT_TRUE(Apply(lun).ok());
  EXPECT_EQ(SenseOf(Command(ini, TestUnitReadyCdb())), (iscsi::test::Sense{0x6, 0x2a, 0x01}));
  EXPECT_EQ(Keys(ini), std::vector<uint64_t>{kKey});
  const auto more = Pattern(kBlock, 11);
  EXPECT_EQ(Command(ini, Write10Cdb(40, 1), more).scsi_status(), 0);
  EXPECT_EQ(ReadBlocks(ini, 40, 1), more);
}

// Before: the change answered at once beside the old store, whose delayed write landed on the
// file afterwards; no command was ever answered NOT READY.
TEST_F(LiveLunChangeTest, TheOldStoreEndsItsWritesBeforeTheNewOneServes) {
  LunSpec lun = FileLun();
  lun.fault.delay = 1500ms;  // writes only, for a window in which the change must wait
  lun.fault.reads = false;
  lun.fault.flushes = false;
  ASSERT_NO_FATAL_FAILURE(ExpectApplied(lun));
  TestInitiator writer;
  ASSERT_NO_FATAL_FAILURE(Login(writer));
  TestInitiator prober;
  ASSERT_NO_FATAL_FAILURE(Login(prober, kInitiator2));

  const auto data = Pattern(4 * kBlock, 5);
  const uint32_t itt = Send(writer, Write10Cdb(100, 4), data);
  // Commands of a session run in order: once a TEST UNIT READY sent after it is answered, the
  // write is in the store, waiting out its delay.
  ASSERT_EQ(Command(writer, TestUnitReadyCdb()).scsi_status(), 0);
  std::atomic<bool> applied{false};
  std::vector<uint8_t> at_return;
  Status changed = Status::Ok();
  lun.read_only = true;  // the file opened anew, O_RDONLY
  std::thread change([&] {
    changed = Apply(lun);
    at_return = FileBytes(lun.path, 100 * kBlock, data.size());
    applied = true;
  });
  // While the old store drains, the LUN answers NOT READY, BECOMING READY (retried by initiators).
  bool not_ready = false;
  while (!applied) {
    const auto sense = SenseOf(Command(prober, TestUnitReadyCdb()));
    if (sense == iscsi::test::Sense{0x2, 0x04, 0x01}) not_ready = true;
    std::this_thread::sleep_for(20ms);
  }
  change.join();
  ASSERT_TRUE(changed.ok()) << changed.message();
  EXPECT_EQ(Response(writer, itt).scsi_status(), 0);
  EXPECT_EQ(at_return, data) << "the change was answered before the old store's write landed";
  EXPECT_TRUE(not_ready);
}

// Before: a new ram store, all zeros.
TEST_F(LiveLunChangeTest, ARamLunKeepsItsDataThroughReadOnlyAndFaultChanges) {
  LunSpec lun = RamLun();
  TestInitiator ini;
  const auto data = Pattern(2 * kBlock, 21);
  ASSERT_NO_FATAL_FAILURE(StartWriting(lun, ini, 7, data));

  lun.read_only = true;
  ASSERT_TRUE(Apply(lun).ok());
  EXPECT_EQ(SenseOf(Command(ini, TestUnitReadyCdb())), (iscsi::test::Sense{0x6, 0x2a, 0x01}));
  EXPECT_EQ(ReadBlocks(ini, 7, 2), data);

  lun.read_only = false;
  lun.fault.error = EIO;
  lun.fault.reads = false;
  lun.fault.flushes = false;
  ASSERT_NO_FATAL_FAILURE(ExpectApplied(lun));
  EXPECT_EQ(SenseOf(Command(ini, TestUnitReadyCdb())), (iscsi::test::Sense{0x6, 0x2a, 0x01}));
  EXPECT_EQ(ReadBlocks(ini, 7, 2), data);
  EXPECT_EQ(SenseOf(Command(ini, Write10Cdb(7, 1), Pattern(kBlock, 1))),
            (iscsi::test::Sense{0x3, 0x0c, 0x00}));  // the fault in place: WRITE ERROR

  lun.fault = {};
  ASSERT_TRUE(Apply(lun).ok());
  EXPECT_EQ(ReadBlocks(ini, 7, 2), data);
}

}  // namespace
}  // namespace iscsigw::api
