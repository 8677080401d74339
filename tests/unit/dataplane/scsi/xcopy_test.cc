// EXTENDED COPY (LID1), RECEIVE COPY RESULTS and the Third-party Copy VPD page through
// Engine::Execute on RAM logical units: copies within and between logical units (overlapping
// ranges included), every parameter-list error SPC-4 6.4 names, the COPY ABORTED cases, and the
// results the copy manager holds per I_T nexus.
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <memory>
#include <vector>

#include "base/endian.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/scsi/engine.h"
#include "dataplane/scsi/sense.h"
#include "dataplane/scsi/task.h"
#include "tests/unit/dataplane/scsi/engine_runner.h"

namespace iscsigw::scsi {
namespace xcopy_test {

constexpr uint32_t kBlock = 512;
constexpr uint64_t kBlocks = 8192;  // 4 MiB per LUN
constexpr uint64_t kNaa[] = {0x6001405000000001ull, 0x6001405000000002ull, 0x6001405000000003ull};

struct Seg {
  uint16_t src;
  uint16_t dst;
  uint16_t blocks;
  uint64_t src_lba;
  uint64_t dst_lba;
  uint8_t type = 0x02;  // block to block
};

struct Cscd {
  uint64_t naa;
  uint8_t byte1 = 0;  // LU ID TYPE, NUL, PERIPHERAL DEVICE TYPE
  uint8_t type = 0xE4;
};

// An EXTENDED COPY (LID1) parameter list (SPC-4 6.4.3).
std::vector<uint8_t> Params(uint8_t list_id, uint8_t usage, const std::vector<Cscd>& cscds,
                            const std::vector<Seg>& segs) {
  std::vector<uint8_t> p(16, 0);
  p[0] = list_id;
  p[1] = static_cast<uint8_t>(usage << 3);
  for (const Cscd& c : cscds) {
    uint8_t d[32] = {};
    d[0] = c.type;
    d[1] = c.byte1;
    d[4] = 0x01;  // binary
    d[5] = 0x03;  // association LU, NAA
    d[7] = 16;
    StoreBe64(d + 8, c.naa);
    StoreBe24(d + 29, kBlock);
    p.insert(p.end(), d, d + 32);
  }
  StoreBe16(&p[2], static_cast<uint16_t>(32 * cscds.size()));
  for (const Seg& s : segs) {
    uint8_t d[28] = {};
    d[0] = s.type;
    StoreBe16(d + 2, 0x18);
    StoreBe16(d + 4, s.src);
    StoreBe16(d + 6, s.dst);
    StoreBe16(d + 10, s.blocks);
    StoreBe64(d + 12, s.src_lba);
    StoreBe64(d + 20, s.dst_lba);
    p.insert(p.end(), d, d + 28);
  }
  StoreBe32(&p[8], static_cast<uint32_t>(28 * segs.size()));
  return p;
}

// n descriptors naming LUN 0, and n one-block segments within it.
std::vector<Cscd> ManyCscds(size_t n) { return std::vector<Cscd>(n, Cscd{kNaa[0]}); }
std::vector<Seg> ManySegs(size_t n) { return std::vector<Seg>(n, Seg{0, 0, 1, 0, 1}); }

class XcopyTest : public ::testing::Test {
 protected:
  XcopyTest() : nexus_("iqn.test,i,0x1", 1) {
    target_.name = "iqn.2026-11.io.iscsigw:t1";
    for (uint64_t id = 0; id < 3; ++id) {
      stores_.emplace_back(backing::NewRamStore(kBlocks * kBlock));
      LunConfig c;
      c.id = id;
      c.block_size = kBlock;
      c.naa_id = kNaa[id];
      c.read_only = id == 2;
      target_.luns.push_back(std::make_shared<Lun>(c, stores_.back()));
    }
    runner_ = std::make_unique<Runner>(target_, nexus_);
    for (uint64_t id = 0; id < 3; ++id) {  // consume the power-on unit attentions
      runner_->SetLun(id);
      Run({0x00});
    }
    runner_->SetLun(0);
  }

  Task& Run(std::initializer_list<uint8_t> cdb, uint32_t expected = 0,
            const std::vector<uint8_t>& data_out = {}) {
    return runner_->Run(cdb, expected, data_out);
  }
  static uint8_t B(uint64_t v, int shift) { return static_cast<uint8_t>(v >> shift); }

  Task& Xcopy(const std::vector<uint8_t>& params, uint32_t plen) {
    return Run(
        {0x83, 0, 0, 0, 0, 0, 0, 0, 0, 0, B(plen, 24), B(plen, 16), B(plen, 8), B(plen, 0), 0, 0},
        plen, params);
  }
  Task& Xcopy(const std::vector<uint8_t>& params) {
    return Xcopy(params, static_cast<uint32_t>(params.size()));
  }
  Task& ReceiveCopyResults(uint8_t sa, uint8_t list_id) {
    return Run({0x84, sa, list_id, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0}, 1024);
  }

  void Write(uint64_t lun, uint64_t lba, const std::vector<uint8_t>& data) {
    runner_->SetLun(lun);
    const uint16_t n = static_cast<uint16_t>(data.size() / kBlock);
    Task& t = Run({0x2A, 0, B(lba, 24), B(lba, 16), B(lba, 8), B(lba, 0), 0, B(n, 8), B(n, 0), 0},
                  static_cast<uint32_t>(data.size()), data);
    EXPECT_EQ(t.status, ScsiStatus::kGood);
    runner_->SetLun(0);
  }
  std::vector<uint8_t> Read(uint64_t lun, uint64_t lba, uint16_t n) {
    runner_->SetLun(lun);
    Task& t = Run({0x28, 0, B(lba, 24), B(lba, 16), B(lba, 8), B(lba, 0), 0, B(n, 8), B(n, 0), 0},
                  n * kBlock);
    EXPECT_EQ(t.status, ScsiStatus::kGood);
    runner_->SetLun(0);
    return runner_->DataIn();
  }
  // Blocks whose bytes all hold (first + index) & 0xFF, so a misplaced block shows.
  static std::vector<uint8_t> Pattern(uint16_t blocks, uint8_t first) {
    std::vector<uint8_t> v(size_t{blocks} * kBlock);
    for (size_t i = 0; i < blocks; ++i) {
      std::memset(&v[i * kBlock], static_cast<uint8_t>(first + i), kBlock);
    }
    return v;
  }

  void ExpectCheck(SenseKey key, Asc asc) { ExpectSense(runner_->task(), key, asc); }
  // COPY ABORTED for segment `index`, segment pointer at `field`.
  void ExpectCopyAborted(Asc asc, uint32_t index, uint16_t field) {
    ExpectCheck(SenseKey::kCopyAborted, asc);
    const Task& t = runner_->task();
    EXPECT_EQ(LoadBe32(&t.sense[8]), index);
    EXPECT_EQ(t.sense[15], 0xA0);
    EXPECT_EQ(LoadBe16(&t.sense[16]), field);
  }
  void ExpectGood() {
    EXPECT_EQ(runner_->task().status, ScsiStatus::kGood);
    EXPECT_EQ(runner_->task().sense_len, 0);
  }

  TargetInfo target_;
  std::vector<std::shared_ptr<backing::RamStore>> stores_;
  Nexus nexus_;
  std::unique_ptr<Runner> runner_;
};

TEST_F(XcopyTest, CopiesBlocksWithinALogicalUnit) {
  const auto data = Pattern(64, 1);
  Write(0, 10, data);
  Xcopy(Params(1, 0b10, {{kNaa[0]}}, {{0, 0, 64, 10, 5000}}));
  ExpectGood();
  EXPECT_EQ(Read(0, 5000, 64), data);
  EXPECT_EQ(Read(0, 10, 64), data);  // the source is untouched
}

TEST_F(XcopyTest, CopiesBetweenLogicalUnitsInSeveralSegments) {
  const auto a = Pattern(3000, 7);  // more than one bounce-buffer piece
  Write(0, 0, std::vector<uint8_t>(a.begin(), a.begin() + 2000 * kBlock));
  Write(0, 2000, std::vector<uint8_t>(a.begin() + 2000 * kBlock, a.end()));
  Xcopy(Params(2, 0b10, {{kNaa[0]}, {kNaa[1]}}, {{0, 1, 3000, 0, 100}, {1, 1, 3000, 100, 4000}}));
  ExpectGood();
  auto got = Read(1, 100, 2000);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), a.begin()));
  got = Read(1, 6000, 1000);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), a.begin() + 2000 * kBlock));
  got = Read(1, 4000, 2000);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), a.begin()));
}

TEST_F(XcopyTest, OverlappingRangesCopyEveryBlockBeforeOverwritingIt) {
  const auto a = Pattern(4000, 3);
  Write(0, 0, std::vector<uint8_t>(a.begin(), a.begin() + 2000 * kBlock));
  Write(0, 2000, std::vector<uint8_t>(a.begin() + 2000 * kBlock, a.end()));
  // Destination after the source, overlapping it, larger than one bounce-buffer piece.
  Xcopy(Params(0, 0b11, {{kNaa[0]}}, {{0, 0, 4000, 0, 100}}));
  ExpectGood();
  auto got = Read(0, 100, 2000);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), a.begin()));
  got = Read(0, 2100, 2000);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), a.begin() + 2000 * kBlock));
  // Destination before the source.
  Xcopy(Params(0, 0b11, {{kNaa[0]}}, {{0, 0, 4000, 100, 50}}));
  ExpectGood();
  got = Read(0, 50, 2000);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), a.begin()));
}

TEST_F(XcopyTest, ParameterListLengthErrors) {
  const auto p = Params(1, 0, {{kNaa[0]}}, {{0, 0, 16, 0, 100}});
  Xcopy(p, 0);  // SPC-4 6.4.1: nothing to do, not an error
  ExpectGood();
  Xcopy(std::vector<uint8_t>(p.begin(), p.begin() + 47), 47);  // ends inside the CSCD list
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
  Xcopy(std::vector<uint8_t>(p.begin(), p.end() - 1), static_cast<uint32_t>(p.size() - 1));
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
  Xcopy(std::vector<uint8_t>(p.begin(), p.begin() + 8), 8);  // shorter than the header
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
  // Descriptor lists longer than MAXIMUM DESCRIPTOR LIST LENGTH (368).
  auto big = Params(1, 0, ManyCscds(9), ManySegs(4));
  Xcopy(big);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kParameterListLengthError);
  // Inline data is not accepted (MAXIMUM INLINE DATA LENGTH 0).
  auto inl = p;
  inl.resize(p.size() + 4);
  StoreBe32(&inl[12], 4);
  Xcopy(inl);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInlineDataLengthExceeded);
}

TEST_F(XcopyTest, DescriptorCountAndTypeErrors) {
  Xcopy(Params(1, 0, ManyCscds(9), {{0, 0, 1, 0, 1}}));
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kTooManyTargetDescriptors);
  Xcopy(Params(1, 0, {{kNaa[0]}}, ManySegs(5)));
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kTooManySegmentDescriptors);
  Xcopy(Params(1, 0, {{kNaa[0], 0, 0xE0}}, {{0, 0, 1, 0, 1}}));  // Fibre Channel N_Port_Name
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kUnsupportedTargetDescriptorType);
  EXPECT_EQ(LoadBe16(&runner_->task().sense[16]), 16);
  auto stream = Params(1, 0, {{kNaa[0]}}, {{0, 0, 1, 0, 1, 0x03}});  // stream to stream
  Xcopy(stream);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kUnsupportedSegmentDescriptorType);
  Xcopy(Params(1, 0, {{kNaa[0], 0x80}}, {{0, 0, 1, 0, 1}}));  // reserved LU ID TYPE
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInParameterList);
  Xcopy(Params(1, 0, {{kNaa[0], 0x01}}, {{0, 0, 1, 0, 1}}));  // sequential-access device
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInParameterList);
  Xcopy(Params(1, 0b01, {{kNaa[0]}}, {{0, 0, 1, 0, 1}}));  // reserved LIST ID USAGE
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInParameterList);
  Xcopy(Params(1, 0b11, {{kNaa[0]}}, {{0, 0, 1, 0, 1}}));  // no list id, but one given
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInParameterList);
  // A reserved CDB byte and an unknown service action.
  Run({0x83, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);
  EXPECT_EQ(LoadBe16(&runner_->task().sense[16]), 5);  // the byte that is set
  Run({0x83, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);
}

TEST_F(XcopyTest, SegmentErrorsAbortTheCopyAfterEarlierSegments) {
  Write(0, 0, Pattern(8, 9));
  // Segment 1 names CSCD 2, which does not exist; segment 0 has been copied by then.
  Xcopy(Params(1, 0, {{kNaa[0]}, {kNaa[1]}}, {{0, 1, 8, 0, 0}, {0, 2, 8, 0, 0}}));
  ExpectCopyAborted(Asc::kUnreachableCopyTarget, 1, 6);
  EXPECT_EQ(Read(1, 0, 8), Pattern(8, 9));
  // A designator that names no logical unit of this target, and a NUL descriptor.
  Xcopy(Params(2, 0, {{0x6001405000000099ull}}, {{0, 0, 8, 0, 100}}));
  ExpectCopyAborted(Asc::kUnreachableCopyTarget, 0, 4);
  Xcopy(Params(3, 0, {{kNaa[0], 0x20}}, {{0, 0, 8, 0, 100}}));
  ExpectCopyAborted(Asc::kUnreachableCopyTarget, 0, 4);
  // Beyond the end of the destination and of the source.
  Xcopy(Params(4, 0, {{kNaa[0]}}, {{0, 0, 8, 0, kBlocks - 1}}));
  ExpectCopyAborted(Asc::kNoAdditionalSenseInformation, 0, 20);
  Xcopy(Params(5, 0, {{kNaa[0]}}, {{0, 0, 8, kBlocks - 4, 0}}));
  ExpectCopyAborted(Asc::kNoAdditionalSenseInformation, 0, 12);
  // A read-only destination.
  Xcopy(Params(6, 0, {{kNaa[0]}, {kNaa[2]}}, {{0, 1, 8, 0, 0}}));
  ExpectCopyAborted(Asc::kWriteProtected, 0, 6);
  EXPECT_EQ(Read(2, 0, 8), std::vector<uint8_t>(8 * kBlock, 0));
  // A destination in sanitize failure mode.
  ASSERT_TRUE(target_.luns[1]->sanitize().TryBegin(false));
  target_.luns[1]->sanitize().End(false);
  Xcopy(Params(7, 0, {{kNaa[0]}, {kNaa[1]}}, {{0, 1, 8, 0, 0}}));
  ExpectCopyAborted(kAscSanitizeInProgress, 0, 6);
}

TEST_F(XcopyTest, CopyStatusIsHeldPerListIdentifier) {
  ReceiveCopyResults(0x00, 1);  // nothing with list id 1 on this nexus
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);
  Write(0, 0, Pattern(16, 1));
  Xcopy(Params(1, 0b00, {{kNaa[0]}}, {{0, 0, 16, 0, 100}, {0, 0, 16, 0, 200}}));
  ExpectGood();
  ReceiveCopyResults(0x00, 1);
  ExpectGood();
  auto d = runner_->DataIn();
  ASSERT_EQ(d.size(), 12u);
  EXPECT_EQ(LoadBe32(&d[0]), 8u);
  EXPECT_EQ(d[4], 0x01);  // completed without errors
  EXPECT_EQ(LoadBe16(&d[5]), 2);
  EXPECT_EQ(d[7], 0x00);  // bytes
  EXPECT_EQ(LoadBe32(&d[8]), 2 * 16 * kBlock);
  ReceiveCopyResults(0x00, 1);  // reported once, then discarded
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);

  // LIST ID USAGE 10b: nothing held.
  Xcopy(Params(2, 0b10, {{kNaa[0]}}, {{0, 0, 16, 0, 100}}));
  ExpectGood();
  ReceiveCopyResults(0x00, 2);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);

  // A failed copy: COPY STATUS says so, FAILED SEGMENT DETAILS returns its sense data once.
  Xcopy(Params(3, 0b00, {{kNaa[0]}}, {{0, 0, 16, 0, 100}, {0, 0, 16, 0, kBlocks}}));
  ExpectCopyAborted(Asc::kNoAdditionalSenseInformation, 1, 20);
  ReceiveCopyResults(0x00, 3);
  ExpectGood();
  d = runner_->DataIn();
  ASSERT_EQ(d.size(), 12u);
  EXPECT_EQ(d[4], 0x02);  // completed with errors
  EXPECT_EQ(LoadBe16(&d[5]), 1);
  ReceiveCopyResults(0x04, 3);
  ExpectGood();
  d = runner_->DataIn();
  ASSERT_EQ(d.size(), 60u + 18u);
  EXPECT_EQ(LoadBe32(&d[0]), d.size() - 4);
  EXPECT_EQ(d[56], 0x02);  // CHECK CONDITION
  EXPECT_EQ(LoadBe16(&d[58]), 18);
  EXPECT_EQ(d[60 + 2] & 0x0F, static_cast<uint8_t>(SenseKey::kCopyAborted));
  ReceiveCopyResults(0x04, 3);
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);

  // Another I_T nexus has its own list identifiers.
  Xcopy(Params(4, 0b00, {{kNaa[0]}}, {{0, 0, 1, 0, 100}}));
  ExpectGood();
  Nexus other("iqn.other,i,0x2", 1);
  Runner r2(target_, other);
  r2.Run({0x00});  // power-on unit attention
  r2.Run({0x84, 0x00, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0}, 1024);
  EXPECT_EQ(r2.task().status, ScsiStatus::kCheckCondition);
}

TEST_F(XcopyTest, OperatingParametersAndVpdPageDescribeTheCopyManager) {
  ReceiveCopyResults(0x03, 0);
  ExpectGood();
  auto d = runner_->DataIn();
  ASSERT_EQ(d.size(), 46u);
  EXPECT_EQ(LoadBe32(&d[0]), 42u);
  EXPECT_EQ(d[4] & 0x01, 1);          // SNLID
  EXPECT_EQ(LoadBe16(&d[8]), 8);      // MAXIMUM CSCD DESCRIPTOR COUNT
  EXPECT_EQ(LoadBe16(&d[10]), 4);     // MAXIMUM SEGMENT DESCRIPTOR COUNT
  EXPECT_EQ(LoadBe32(&d[12]), 368u);  // MAXIMUM DESCRIPTOR LIST LENGTH
  EXPECT_EQ(LoadBe32(&d[16]), 16u << 20);
  EXPECT_EQ(d[37], 9);  // DATA SEGMENT GRANULARITY: 512-byte blocks
  EXPECT_EQ(d[43], 2);
  EXPECT_EQ(d[44], 0x02);
  EXPECT_EQ(d[45], 0xE4);
  ReceiveCopyResults(0x03, 1);  // LIST IDENTIFIER is reserved for this service action
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);
  ReceiveCopyResults(0x01, 0);  // RECEIVE DATA: no data is ever held
  ExpectCheck(SenseKey::kIllegalRequest, Asc::kInvalidFieldInCdb);

  // INQUIRY: 3PC, and VPD 8Fh listed and built of the LID1 descriptors.
  Run({0x12, 0, 0, 0, 96, 0}, 96);
  EXPECT_EQ(runner_->DataIn()[5] & 0x08, 0x08);
  Run({0x12, 1, 0x00, 0, 255, 0}, 255);
  d = runner_->DataIn();
  EXPECT_NE(std::find(d.begin() + 4, d.end(), 0x8F), d.end());
  Run({0x12, 1, 0x8F, 1, 0, 0}, 256);
  ExpectGood();
  d = runner_->DataIn();
  ASSERT_GE(d.size(), 4u);
  EXPECT_EQ(d[1], 0x8F);
  ASSERT_EQ(LoadBe16(&d[2]) + 4u, d.size());
  std::vector<uint16_t> types;
  for (size_t off = 4; off + 4 <= d.size(); off += 4 + LoadBe16(&d[off + 2])) {
    types.push_back(LoadBe16(&d[off]));
    EXPECT_EQ(LoadBe16(&d[off + 2]) % 4, 0) << "descriptor at " << off;
    if (types.back() == 0x0001) {  // Supported Commands: 83h {00h}, 84h {00h, 03h, 04h}
      const std::vector<uint8_t> want = {0x83, 1, 0x00, 0x84, 3, 0x00, 0x03, 0x04};
      ASSERT_EQ(d[off + 4], want.size());
      EXPECT_TRUE(std::equal(want.begin(), want.end(), d.begin() + off + 5));
    }
  }
  EXPECT_EQ(types, (std::vector<uint16_t>{0x0001, 0x0004, 0x0008, 0x000C, 0x8001}));
}

}  // namespace xcopy_test
}  // namespace iscsigw::scsi
