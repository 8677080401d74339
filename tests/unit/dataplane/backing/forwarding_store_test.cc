// ForwardingStore hands every call of BackingStore to its inner store, arguments and answers
// unchanged, and so do the wrappers built on it for what they do not override (FaultStore).
#include "dataplane/backing/forwarding_store.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/backing/fault_store.h"
#include "tests/unit/dataplane/backing/record_completion.h"

namespace iscsigw::backing {
namespace forwarding_store_test {

// Answers every call with a value no default gives, and records which calls reached it and the
// slot and offset they named.
class SpyStore final : public BackingStore {
 public:
  std::string_view kind() const override { return "spy"; }
  uint64_t size_bytes() const override { return 7 * kMiB; }
  bool persistent() const override { return true; }
  int ready() const override { return ENOTCONN; }
  std::string offline_reason() const override { return "away"; }
  bool preferred() const override { return false; }
  bool thin_provisioned() const override { return true; }
  uint64_t allocated_bytes() const override { return 3 * kMiB; }
  uint64_t unmap_granularity() const override { return 65536; }
  AtomicLimits atomic_limits() const override { return {8192, 4096}; }
  void Unmap(unsigned slot, uint64_t offset, uint64_t, IoCompletion done) override {
    Saw("Unmap", slot, offset, done);
  }
  void GetProvisioning(unsigned slot, uint64_t offset, uint64_t, Extent* out,
                       IoCompletion done) override {
    *out = Extent{false, 512};
    Saw("GetProvisioning", slot, offset, done);
  }
  void ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t>, bool, ModifyFn,
                       IoCompletion done) override {
    Saw("ReadModifyWrite", slot, offset, done);
  }
  void CompareAndWrite(unsigned slot, uint64_t offset, CompareWriteOp*,
                       IoCompletion done) override {
    Saw("CompareAndWrite", slot, offset, done);
  }
  void WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t>, bool,
                   IoCompletion done) override {
    Saw("WriteAtomic", slot, offset, done);
  }
  void Prefetch(uint64_t offset, uint64_t) override { calls.push_back("Prefetch@" + Of(offset)); }
  size_t MapRead(uint64_t offset, uint64_t, std::span<Segment>) override {
    calls.push_back("MapRead@" + Of(offset));
    return 3;
  }
  void Read(unsigned slot, uint64_t offset, std::span<uint8_t>, IoCompletion done) override {
    Saw("Read", slot, offset, done);
  }
  void Write(unsigned slot, uint64_t offset, std::span<const uint8_t>, bool,
             IoCompletion done) override {
    Saw("Write", slot, offset, done);
  }
  void Flush(unsigned slot, IoCompletion done) override { Saw("Flush", slot, 0, done); }
  int Grow(uint64_t new_size_bytes) override {
    calls.push_back("Grow@" + Of(new_size_bytes));
    return EFBIG;
  }

  std::vector<std::string> calls;

 private:
  static std::string Of(uint64_t v) { return std::to_string(v); }
  // Completes with an errno of its own, so that the caller sees this store's answer.
  void Saw(const char* name, unsigned slot, uint64_t offset, IoCompletion done) {
    calls.push_back(std::string(name) + "@" + Of(slot) + ":" + Of(offset));
    done(EXDEV);
  }
};

// Every call of BackingStore through `store`, which wraps `spy`.
void ExpectEveryCallForwarded(BackingStore& store, const SpyStore& spy) {
  EXPECT_EQ(store.kind(), "spy");
  EXPECT_EQ(store.size_bytes(), 7 * kMiB);
  EXPECT_TRUE(store.persistent());
  EXPECT_EQ(store.ready(), ENOTCONN);
  EXPECT_EQ(store.offline_reason(), "away");
  EXPECT_FALSE(store.preferred());
  EXPECT_TRUE(store.thin_provisioned());
  EXPECT_EQ(store.allocated_bytes(), 3 * kMiB);
  EXPECT_EQ(store.unmap_granularity(), 65536u);
  EXPECT_EQ(store.atomic_limits().max_bytes, 8192u);
  EXPECT_EQ(store.atomic_limits().align_bytes, 4096u);
  EXPECT_EQ(store.Grow(9 * kMiB), EFBIG);

  std::vector<uint8_t> buf(512);
  Segment segs[4];
  EXPECT_EQ(store.MapRead(4096, 512, segs), 3u);
  store.Prefetch(8192, 512);

  Result r[8];
  store.Read(1, 512, buf, Record(&r[0]));
  store.Write(2, 1024, buf, false, Record(&r[1]));
  store.Flush(3, Record(&r[2]));
  store.WriteAtomic(1, 4096, buf, true, Record(&r[3]));
  store.Unmap(2, 8192, 4096, Record(&r[4]));
  BackingStore::Extent extent;
  store.GetProvisioning(3, 0, kMiB, &extent, Record(&r[5]));
  store.ReadModifyWrite(1, 1536, buf, false, {}, Record(&r[6]));
  BackingStore::CompareWriteOp op;
  op.compare = buf;
  op.data = buf;
  op.scratch = buf;
  store.CompareAndWrite(2, 2048, &op, Record(&r[7]));
  for (const Result& each : r) {
    EXPECT_EQ(each.calls, 1);
    EXPECT_EQ(each.err, EXDEV);  // the spy's answer, not a default's
  }
  EXPECT_FALSE(extent.mapped);
  EXPECT_EQ(extent.len, 512u);
  // CompareAndWrite reaches the spy's own, not the default's ReadModifyWrite.
  EXPECT_EQ(spy.calls,
            (std::vector<std::string>{"Grow@9437184", "MapRead@4096", "Prefetch@8192", "Read@1:512",
                                      "Write@2:1024", "Flush@3:0", "WriteAtomic@1:4096",
                                      "Unmap@2:8192", "GetProvisioning@3:0",
                                      "ReadModifyWrite@1:1536", "CompareAndWrite@2:2048"}));
}

TEST(ForwardingStoreTest, ForwardsEveryCallAndItsAnswer) {
  auto spy = std::make_shared<SpyStore>();
  ForwardingStore store(spy);
  EXPECT_EQ(store.inner(), spy);
  ExpectEveryCallForwarded(store, *spy);
}

TEST(ForwardingStoreTest, FaultStoreWithoutFaultsForwardsEveryCall) {
  auto spy = std::make_shared<SpyStore>();
  FaultStore store(spy, FaultSpec{}, nullptr);
  ExpectEveryCallForwarded(store, *spy);
  EXPECT_EQ(store.failures(), 0u);
}

TEST(ForwardingStoreTest, FaultStoreFailsOnlyWhatItOverrides) {
  auto spy = std::make_shared<SpyStore>();
  FaultSpec spec;
  spec.error = EIO;
  FaultStore store(spy, spec, nullptr);
  Result write, provisioning;
  std::vector<uint8_t> buf(512);
  store.Write(0, 0, buf, false, Record(&write));
  BackingStore::Extent extent;
  store.GetProvisioning(0, 0, kMiB, &extent, Record(&provisioning));
  EXPECT_EQ(write.err, EIO);                 // failed, never reached the spy
  EXPECT_EQ(provisioning.err, EXDEV);        // not a data call of the faults: forwarded
  EXPECT_EQ(store.MapRead(0, 512, {}), 0u);  // reads are judged through Read
  EXPECT_EQ(spy->calls, std::vector<std::string>{"GetProvisioning@0:0"});
  EXPECT_EQ(store.failures(), 1u);
}

}  // namespace forwarding_store_test
}  // namespace iscsigw::backing
