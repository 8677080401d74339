#include "dataplane/backing/ram_store.h"

#include <gtest/gtest.h>

#include <array>
#include <thread>
#include <vector>

#include "dataplane/backing/null_store.h"
#include "dataplane/backing/zero_buffer.h"
#include "tests/unit/dataplane/backing/record_completion.h"

namespace iscsigw::backing {
namespace ram_store_test {

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 9));
  return v;
}

std::vector<uint8_t> Gather(std::span<const Segment> segs) {
  std::vector<uint8_t> out;
  for (const Segment& s : segs) out.insert(out.end(), s.data, s.data + s.len);
  return out;
}

TEST(RamStore, ReportsKindAndSize) {
  RamStore store(10 * kMiB + 512);
  EXPECT_EQ(store.kind(), "ram");
  EXPECT_EQ(store.size_bytes(), 10 * kMiB + 512);
  EXPECT_FALSE(store.persistent());
  EXPECT_EQ(store.allocated_bytes(), 0u);
}

TEST(RamStore, UnwrittenReadsZeroWithoutAllocating) {
  RamStore store(8 * kMiB);
  std::vector<uint8_t> buf(4096, 0xEE);
  Result r;
  store.Read(0, 3 * kMiB - 100, buf, Record(&r));
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(r.err, 0);
  EXPECT_EQ(buf, std::vector<uint8_t>(4096, 0));
  std::array<Segment, 4> segs;
  ASSERT_EQ(store.MapRead(0, 4096, segs), 1u);
  EXPECT_EQ(segs[0].data, ZeroBuffer());
  EXPECT_EQ(segs[0].len, 4096u);
  EXPECT_EQ(store.allocated_bytes(), 0u);
}

TEST(RamStore, AllocatesOnlyChunksThatAreWritten) {
  RamStore store(8 * kMiB);
  const auto data = Pattern(4096, 1);
  Result r;
  store.Write(0, 5 * kMiB + 8192, data, false, Record(&r));
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(r.err, 0);
  EXPECT_EQ(store.allocated_bytes(), kMiB);
  store.Write(0, 5 * kMiB, data, false, Record(&r));  // same chunk: nothing new
  EXPECT_EQ(store.allocated_bytes(), kMiB);
  store.Write(1, 2 * kMiB - 10, data, true, Record(&r));  // straddles chunks 1 and 2
  EXPECT_EQ(r.err, 0);
  EXPECT_EQ(store.allocated_bytes(), 3 * kMiB);
}

TEST(RamStore, PartialLastChunkAllocatesOnlyItsSize) {
  RamStore store(kMiB + 4096);
  const auto data = Pattern(512, 2);
  Result r;
  store.Write(0, kMiB + 1024, data, false, Record(&r));
  EXPECT_EQ(r.err, 0);
  EXPECT_EQ(store.allocated_bytes(), 4096u);
}

TEST(RamStore, WriteThenReadRoundTrip) {
  RamStore store(4 * kMiB);
  const auto data = Pattern(3 * kMiB, 7);
  Result w, rd;
  store.Write(0, 512 * 3, data, false, Record(&w));
  ASSERT_EQ(w.err, 0);
  std::vector<uint8_t> back(data.size());
  store.Read(0, 512 * 3, back, Record(&rd));
  ASSERT_EQ(rd.err, 0);
  EXPECT_EQ(back, data);
}

TEST(RamStore, AtomicWriteLandsWholeWithinItsLimits) {
  RamStore store(4 * kMiB);
  EXPECT_EQ(store.atomic_limits().max_bytes, BackingStore::kAtomicWriteMaxBytes);
  EXPECT_EQ(store.atomic_limits().align_bytes, 0u);
  const auto data = Pattern(kMiB, 9);
  Result w, rd;
  store.WriteAtomic(0, 3 * kMiB - 4096, data, false, Record(&w));  // across chunks
  ASSERT_EQ(w.calls, 1);
  ASSERT_EQ(w.err, 0);
  std::vector<uint8_t> back(data.size());
  store.Read(0, 3 * kMiB - 4096, back, Record(&rd));
  EXPECT_EQ(back, data);
}

TEST(RamStore, MapReadCrossesChunkBoundaryZeroCopy) {
  RamStore store(4 * kMiB);
  const auto data = Pattern(8192, 3);
  Result r;
  store.Write(0, kMiB - 4096, data, false, Record(&r));  // last 4 KiB of chunk 0, first of chunk 1
  std::array<Segment, 4> segs;
  ASSERT_EQ(store.MapRead(kMiB - 4096, 8192, segs), 2u);
  EXPECT_EQ(segs[0].len, 4096u);
  EXPECT_EQ(segs[1].len, 4096u);
  EXPECT_EQ(Gather(std::span(segs.data(), 2)), data);
  // The pieces point into store memory: a later write is visible through them.
  std::vector<uint8_t> one(1, 0x99);
  store.Write(0, kMiB, one, false, Record(&r));
  EXPECT_EQ(segs[1].data[0], 0x99);
}

TEST(RamStore, MapReadMixesWrittenAndZeroChunks) {
  RamStore store(4 * kMiB);
  const auto data = Pattern(512, 4);
  Result r;
  store.Write(0, 2 * kMiB, data, false, Record(&r));
  std::array<Segment, 4> segs;
  ASSERT_EQ(store.MapRead(kMiB, 2 * kMiB, segs), 2u);
  EXPECT_EQ(segs[0].data, ZeroBuffer());
  EXPECT_EQ(segs[0].len, kMiB);
  EXPECT_NE(segs[1].data, ZeroBuffer());
  auto all = Gather(std::span(segs.data(), 2));
  EXPECT_EQ(std::vector<uint8_t>(all.begin() + kMiB, all.begin() + kMiB + 512), data);
}

TEST(RamStore, MapReadRefusesWhenSegmentsRunOut) {
  RamStore store(4 * kMiB);
  std::array<Segment, 2> segs;
  EXPECT_EQ(store.MapRead(100, 3 * kMiB, segs), 0u);  // needs 4 pieces
  EXPECT_EQ(store.MapRead(0, 0, segs), 0u);
  EXPECT_EQ(store.MapRead(3 * kMiB, 2 * kMiB, segs), 0u);  // beyond the end
}

TEST(RamStore, ConcurrentFirstWritesToOneChunkAllocateOnce) {
  RamStore store(2 * kMiB);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&store, t] {
      std::vector<uint8_t> block(512, static_cast<uint8_t>(t + 1));
      Result r;
      store.Write(static_cast<unsigned>(t), static_cast<uint64_t>(t) * 512, block, false,
                  Record(&r));
      EXPECT_EQ(r.err, 0);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(store.allocated_bytes(), kMiB);
  std::vector<uint8_t> back(4 * 512);
  Result r;
  store.Read(0, 0, back, Record(&r));
  for (int t = 0; t < 4; ++t) EXPECT_EQ(back[static_cast<size_t>(t) * 512], t + 1);
}

TEST(RamStore, FlushCompletesInline) {
  RamStore store(kMiB);
  Result r;
  store.Flush(0, Record(&r));
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(r.err, 0);
}

TEST(NullStore, MapReadPointsAtZeroBufferInPieces) {
  NullStore store(uint64_t{1} << 40);
  EXPECT_EQ(store.kind(), "null");
  EXPECT_EQ(store.size_bytes(), uint64_t{1} << 40);
  std::array<Segment, 4> segs;
  ASSERT_EQ(store.MapRead(12345, 2 * kZeroBufferSize + 10, segs), 3u);
  EXPECT_EQ(segs[0].data, ZeroBuffer());
  EXPECT_EQ(segs[0].len, kZeroBufferSize);
  EXPECT_EQ(segs[1].len, kZeroBufferSize);
  EXPECT_EQ(segs[2].len, 10u);
  EXPECT_EQ(store.MapRead(0, 5 * kZeroBufferSize, segs), 0u);
}

TEST(NullStore, ReadZeroesWriteAndFlushSucceed) {
  NullStore store(kMiB);
  std::vector<uint8_t> buf(1000, 0x11);
  Result r;
  store.Read(0, 0, buf, Record(&r));
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(r.err, 0);
  EXPECT_EQ(buf, std::vector<uint8_t>(1000, 0));
  Result w;
  store.Write(0, 0, Pattern(512, 1), true, Record(&w));
  EXPECT_EQ(w.calls, 1);
  EXPECT_EQ(w.err, 0);
  store.Read(0, 0, buf, Record(&r));
  EXPECT_EQ(buf, std::vector<uint8_t>(1000, 0));  // writes are dropped
  Result f;
  store.Flush(0, Record(&f));
  EXPECT_EQ(f.calls, 1);
  EXPECT_EQ(f.err, 0);
}

}  // namespace ram_store_test
}  // namespace iscsigw::backing
