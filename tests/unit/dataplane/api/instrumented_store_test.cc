#include "dataplane/api/instrumented_store.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "dataplane/backing/ram_store.h"
#include "tests/unit/dataplane/backing/record_completion.h"

namespace iscsigw::api {
namespace instrumented_store_test {

using backing::BackingStore;
using backing::IoCompletion;
using runtime::StoreOp;

using backing::kMiB;
using backing::Record;
using backing::Result;

// Completes writes only when the test says so, with the error it chooses; reads at once.
class FakeStore final : public BackingStore {
 public:
  std::string_view kind() const override { return "fake"; }
  uint64_t size_bytes() const override { return 8 * kMiB; }
  bool persistent() const override { return true; }
  uint64_t allocated_bytes() const override { return 3 * kMiB; }
  void Read(unsigned, uint64_t, std::span<uint8_t>, IoCompletion done) override { done(0); }
  void Write(unsigned, uint64_t, std::span<const uint8_t>, bool, IoCompletion done) override {
    pending.push_back(done);
  }
  void Flush(unsigned, IoCompletion done) override { done(EIO); }
  std::vector<IoCompletion> pending;
};

uint64_t Calls(const runtime::LunShard& s, StoreOp op) {
  uint64_t n = 0;
  for (const auto& b : s.store_latency[static_cast<size_t>(op)]) n += runtime::Get(b);
  return n;
}

class InstrumentedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    stats_.Configure(2);
    lun_ = stats_.ForLun("iqn.2026-11.io.iscsigw:s", 3);
  }
  runtime::Stats stats_;
  runtime::LunStats* lun_ = nullptr;
};

TEST_F(InstrumentedStoreTest, TimesEveryDataCallOnTheCallersSlot) {
  InstrumentedStore store(std::make_shared<backing::RamStore>(4 * kMiB), lun_);
  EXPECT_EQ(store.kind(), "ram");
  EXPECT_EQ(store.size_bytes(), 4 * kMiB);
  EXPECT_TRUE(store.thin_provisioned());

  std::vector<uint8_t> data(4096, 0x5A);
  Result w;
  store.Write(1, 0, data, false, Record(&w));
  ASSERT_EQ(w.calls, 1);  // a ram store completes inline, and so does its wrapper
  EXPECT_EQ(w.err, 0);
  EXPECT_EQ(store.allocated_bytes(), kMiB);  // one chunk
  Result r;
  store.Read(0, 0, data, Record(&r));
  EXPECT_EQ(r.err, 0);
  Result f;
  store.Flush(0, Record(&f));
  Result u;
  store.Unmap(1, 0, kMiB, Record(&u));
  EXPECT_EQ(u.err, 0);
  EXPECT_EQ(store.allocated_bytes(), 0u);
  // Zero-copy mapping and provisioning queries move no data: not timed.
  backing::Segment segs[1];
  EXPECT_EQ(store.MapRead(0, 512, segs), 1u);
  BackingStore::Extent e;
  Result p;
  store.GetProvisioning(0, 0, kMiB, &e, Record(&p));
  EXPECT_EQ(p.calls, 1);

  const runtime::LunShard& s0 = lun_->shard_at(0);
  const runtime::LunShard& s1 = lun_->shard_at(1);
  EXPECT_EQ(Calls(s1, StoreOp::kWrite), 1u);
  EXPECT_EQ(Calls(s0, StoreOp::kWrite), 0u);
  EXPECT_EQ(Calls(s0, StoreOp::kRead), 1u);
  EXPECT_EQ(Calls(s0, StoreOp::kFlush), 1u);
  EXPECT_EQ(Calls(s1, StoreOp::kUnmap), 1u);
  EXPECT_EQ(Calls(s0, StoreOp::kReadModifyWrite) + Calls(s1, StoreOp::kReadModifyWrite), 0u);
  EXPECT_EQ(runtime::Get(s0.store_errors) + runtime::Get(s1.store_errors), 0u);
}

TEST_F(InstrumentedStoreTest, CountsErrorsButNotUnsupportedCalls) {
  auto fake = std::make_shared<FakeStore>();
  InstrumentedStore store(fake, lun_);
  EXPECT_EQ(store.allocated_bytes(), 3 * kMiB);
  Result f;
  store.Flush(0, Record(&f));
  EXPECT_EQ(f.err, EIO);
  Result u;
  store.Unmap(0, 0, 4096, Record(&u));  // BackingStore's default: ENOTSUP
  EXPECT_EQ(u.err, ENOTSUP);
  EXPECT_EQ(runtime::Get(lun_->shard_at(0).store_errors), 1u);
  EXPECT_EQ(Calls(lun_->shard_at(0), StoreOp::kUnmap), 1u);
}

TEST_F(InstrumentedStoreTest, AsynchronousCompletionsReachTheirCallersAndRecordsAreReused) {
  auto fake = std::make_shared<FakeStore>();
  InstrumentedStore store(fake, lun_);
  std::vector<uint8_t> data(512);
  Result a, b, c;
  store.Write(1, 0, data, false, Record(&a));
  store.Write(1, 512, data, false, Record(&b));
  store.Write(1, 1024, data, false, Record(&c));
  ASSERT_EQ(fake->pending.size(), 3u);
  EXPECT_EQ(store.RecordsForTest(1), 3u);
  fake->pending[1](EIO);  // out of order
  fake->pending[2](0);
  fake->pending[0](0);
  EXPECT_EQ(a.calls, 1);
  EXPECT_EQ(a.err, 0);
  EXPECT_EQ(b.err, EIO);
  EXPECT_EQ(c.err, 0);
  EXPECT_EQ(Calls(lun_->shard_at(1), StoreOp::kWrite), 3u);
  EXPECT_EQ(runtime::Get(lun_->shard_at(1).store_errors), 1u);

  // The steady state allocates nothing: the next calls take the records back.
  fake->pending.clear();
  for (int i = 0; i < 3; ++i) store.Write(1, 0, data, false, Record(&a));
  EXPECT_EQ(store.RecordsForTest(1), 3u);
  for (auto& done : fake->pending) done(0);
  EXPECT_EQ(Calls(lun_->shard_at(1), StoreOp::kWrite), 6u);
}

TEST_F(InstrumentedStoreTest, UntimedStoreCountsErrorsOnly) {
  auto fake = std::make_shared<FakeStore>();
  InstrumentedStore store(fake, lun_, /*timed=*/false);
  std::vector<uint8_t> data(512);
  Result r, f;
  store.Read(0, 0, data, Record(&r));
  store.Flush(0, Record(&f));
  EXPECT_EQ(r.err, 0);
  EXPECT_EQ(f.err, EIO);
  EXPECT_EQ(Calls(lun_->shard_at(0), StoreOp::kRead), 0u);
  EXPECT_EQ(Calls(lun_->shard_at(0), StoreOp::kFlush), 0u);
  EXPECT_EQ(runtime::Get(lun_->shard_at(0).store_errors), 1u);
}

TEST_F(InstrumentedStoreTest, SlotBeyondTheShardsIsForwardedUnrecorded) {
  InstrumentedStore store(std::make_shared<backing::RamStore>(kMiB), lun_);
  std::vector<uint8_t> data(512, 1);
  Result w;
  store.Write(7, 0, data, false, Record(&w));
  EXPECT_EQ(w.calls, 1);
  EXPECT_EQ(w.err, 0);
  EXPECT_EQ(Calls(lun_->shard_at(0), StoreOp::kWrite) + Calls(lun_->shard_at(1), StoreOp::kWrite),
            0u);
}

TEST_F(InstrumentedStoreTest, AClosedStoreRefusesEveryCallAndKeepsWhatTheLunReports) {
  auto ram = std::make_shared<backing::RamStore>(4 * kMiB);
  InstrumentedStore store(ram, lun_);
  std::vector<uint8_t> data(4096, 0x3C);
  Result w;
  store.Write(0, 0, data, false, Record(&w));
  ASSERT_EQ(w.err, 0);

  store.Close("reopening");
  EXPECT_TRUE(store.closed());
  EXPECT_EQ(store.ready(), ENOTCONN);
  EXPECT_EQ(store.offline_reason(), "reopening");
  EXPECT_EQ(store.size_bytes(), 4 * kMiB);  // the capacity the LUN reports does not move
  EXPECT_TRUE(store.thin_provisioned());
  std::vector<uint8_t> back(4096, 0);
  Result r, w2, f, u, a;
  store.Read(0, 0, back, Record(&r));
  store.Write(0, 0, data, true, Record(&w2));
  store.Flush(0, Record(&f));
  store.Unmap(0, 0, 4096, Record(&u));
  store.WriteAtomic(0, 0, data, false, Record(&a));
  for (const Result* x : {&r, &w2, &f, &u, &a}) {
    EXPECT_EQ(x->calls, 1);
    EXPECT_EQ(x->err, ENOTCONN);
  }
  backing::Segment segs[4];
  EXPECT_EQ(store.MapRead(0, 4096, segs), 0u);  // the caller falls back to Read: ENOTCONN
  EXPECT_EQ(store.Grow(8 * kMiB), ENOTCONN);

  // The same medium back, as a ram LUN's reopen does: the data is there.
  EXPECT_EQ(store.TakeInner(), ram);
  store.Install(ram);
  EXPECT_FALSE(store.closed());
  EXPECT_EQ(store.ready(), 0);
  Result r2;
  store.Read(0, 0, back, Record(&r2));
  EXPECT_EQ(r2.err, 0);
  EXPECT_EQ(back, data);
}

}  // namespace instrumented_store_test
}  // namespace iscsigw::api
