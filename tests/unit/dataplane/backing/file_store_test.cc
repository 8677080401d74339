#include "dataplane/backing/file/file_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/runtime/buffer_pool.h"
#include "dataplane/runtime/file_ring.h"
#include "tests/unit/dataplane/backing/record_completion.h"

namespace iscsigw::backing {
namespace file_store_test {

namespace fs = std::filesystem;

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iscsigw-file-store-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = (dir_ / "lun.img").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<FileStore> OpenOrDie(uint64_t size, bool read_only = false) {
    auto r = FileStore::Open(FileStoreOptions{path_, size, read_only}, {&ioc_});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return nullptr;
    return std::move(r).value();
  }

  // Runs the io_context until `r` has completed (bounded by a deadline).
  void Wait(const Result& r) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (r.calls == 0 && std::chrono::steady_clock::now() < deadline) {
      ioc_.restart();
      ioc_.run_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(r.calls, 1);
  }

  fs::path dir_;
  std::string path_;
  boost::asio::io_context ioc_;
};

TEST_F(FileStoreTest, CreatesFileOfRequestedSize) {
  auto store = OpenOrDie(8 << 20);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->kind(), "file");
  EXPECT_TRUE(store->persistent());
  EXPECT_EQ(store->size_bytes(), 8u << 20);
  EXPECT_EQ(fs::file_size(path_), 8u << 20);
}

TEST_F(FileStoreTest, WriteThenReadBackCompletesOnTheSlotThread) {
  auto store = OpenOrDie(4 << 20);
  ASSERT_NE(store, nullptr);
  const auto data = Pattern(256 * 1024, 5);
  Result w;
  store->Write(0, 4096 * 3, data, false, Record(&w));
  EXPECT_EQ(w.calls, 0);  // asynchronous: nothing until the io_context runs
  Wait(w);
  EXPECT_EQ(w.err, 0);
  EXPECT_EQ(w.thread, std::this_thread::get_id());

  std::vector<uint8_t> back(data.size());
  Result r;
  store->Read(0, 4096 * 3, back, Record(&r));
  Wait(r);
  EXPECT_EQ(r.err, 0);
  EXPECT_EQ(back, data);

  // Unwritten parts of the file read as zeros.
  std::vector<uint8_t> head(4096, 0xEE);
  Result h;
  store->Read(0, 0, head, Record(&h));
  Wait(h);
  EXPECT_EQ(head, std::vector<uint8_t>(4096, 0));
}

TEST_F(FileStoreTest, FuaWriteAndFlushSucceedAndPersist) {
  const auto data = Pattern(8192, 9);
  {
    auto store = OpenOrDie(1 << 20);
    ASSERT_NE(store, nullptr);
    Result w;
    store->Write(0, 65536, data, /*fua=*/true, Record(&w));
    Wait(w);
    EXPECT_EQ(w.err, 0);
    Result f;
    store->Flush(0, Record(&f));
    Wait(f);
    EXPECT_EQ(f.err, 0);
    EXPECT_EQ(f.thread, std::this_thread::get_id());  // posted back from the sync pool
  }
  // Reopen (existing file, size from the file) and read through plain POSIX.
  auto again = OpenOrDie(0);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->size_bytes(), 1u << 20);
  std::vector<uint8_t> back(data.size());
  const int fd = ::open(path_.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pread(fd, back.data(), back.size(), 65536), static_cast<ssize_t>(back.size()));
  ::close(fd);
  EXPECT_EQ(back, data);
}

// FUA writes through the page cache and flushes share group fdatasyncs: one in flight per slot,
// covering every request that was waiting when it began. Each request still completes once, with
// its data stable.
TEST_F(FileStoreTest, FuaWritesAndFlushesShareGroupSyncs) {
  auto store = OpenOrDie(1 << 20);
  ASSERT_NE(store, nullptr);
  if (!store->uses_ring(0)) {
    GTEST_SKIP() << "io_uring unavailable: syncs run on the fallback pool, one per request";
  }
  constexpr int kWrites = 32;
  constexpr int kFlushes = 4;
  std::vector<std::vector<uint8_t>> data;
  for (int i = 0; i < kWrites; ++i) data.push_back(Pattern(4096, static_cast<uint8_t>(i)));
  std::vector<Result> results(kWrites + kFlushes);
  for (int i = 0; i < kWrites; ++i) {
    store->Write(0, 4096u * i, data[i], /*fua=*/true, Record(&results[i]));
    if (i % (kWrites / kFlushes) == 0) {
      store->Flush(0, Record(&results[kWrites + i / (kWrites / kFlushes)]));
    }
  }
  for (const Result& r : results) {
    Wait(r);
    EXPECT_EQ(r.err, 0);
  }
  EXPECT_EQ(store->in_flight(0), 0u);
  const uint64_t syncs = store->group_syncs(0);
  EXPECT_GE(syncs, 1u);
  EXPECT_LT(syncs, static_cast<uint64_t>(kWrites + kFlushes) / 2) << "syncs were not grouped";
  // A flush with nothing else waiting gets an fdatasync of its own.
  Result f;
  store->Flush(0, Record(&f));
  Wait(f);
  EXPECT_EQ(f.err, 0);
  EXPECT_EQ(store->group_syncs(0), syncs + 1);
  std::vector<uint8_t> back(4096);
  const int fd = ::open(path_.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_EQ(::pread(fd, back.data(), back.size(), 4096 * i), 4096);
    EXPECT_EQ(back, data[i]) << "block " << i;
  }
  ::close(fd);
}

TEST_F(FileStoreTest, MultipleSlotsEachCompleteOnTheirOwnContext) {
  boost::asio::io_context other;
  auto opened = FileStore::Open(FileStoreOptions{path_, 1 << 20, false}, {&ioc_, &other});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto store = std::move(opened).value();
  const auto data = Pattern(4096, 1);
  Result w;
  store->Write(1, 0, data, false, Record(&w));
  ioc_.run_for(std::chrono::milliseconds(50));
  EXPECT_EQ(w.calls, 0);  // slot 1 belongs to `other`
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (w.calls == 0 && std::chrono::steady_clock::now() < deadline) {
    other.restart();
    other.run_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(w.calls, 1);
  EXPECT_EQ(w.err, 0);
}

// Each call is its own ring operation: calls made in one reactor turn reach the kernel together,
// in one submission, and each lands its own data. Their records come from a free list that grows
// only with the depth, never per call.
TEST_F(FileStoreTest, ConcurrentCallsReachTheKernelInOneSubmission) {
  auto store = OpenOrDie(4 << 20);
  ASSERT_NE(store, nullptr);
  if (!store->uses_ring(0)) GTEST_SKIP() << "io_uring unavailable: calls run on the fallback pool";
  runtime::FileRing& ring = runtime::FileRing::For(ioc_);
  EXPECT_EQ(store->op_records(0), 0u);  // an idle LUN holds none

  constexpr int kCalls = 16;
  std::vector<std::vector<uint8_t>> data;
  std::vector<Result> writes(kCalls);
  for (int i = 0; i < kCalls; ++i) data.push_back(Pattern(8192, static_cast<uint8_t>(i)));
  for (int i = 0; i < kCalls; ++i) {
    store->Write(0, uint64_t(i) * 8192, data[i], /*fua=*/i % 2 == 1, Record(&writes[i]));
  }
  EXPECT_EQ(store->in_flight(0), uint32_t{kCalls});
  uint64_t before = ring.submitted();
  EXPECT_EQ(ioc_.poll_one(), 1u);  // the turn's submission
  EXPECT_EQ(ring.submitted() - before, uint64_t{kCalls});
  for (auto& w : writes) {
    Wait(w);
    EXPECT_EQ(w.err, 0);
  }
  EXPECT_EQ(store->in_flight(0), 0u);

  std::vector<std::vector<uint8_t>> back(kCalls, std::vector<uint8_t>(8192));
  std::vector<Result> reads(kCalls);
  for (int i = 0; i < kCalls; ++i) store->Read(0, uint64_t(i) * 8192, back[i], Record(&reads[i]));
  for (int i = 0; i < kCalls; ++i) {
    Wait(reads[i]);
    EXPECT_EQ(reads[i].err, 0);
    EXPECT_EQ(back[i], data[i]) << "block " << i;
  }
  const uint32_t records = store->op_records(0);
  EXPECT_GE(records, uint32_t{kCalls});

  // Deeper than ever before: more records; the same depth again: none.
  constexpr int kDeep = 200;
  std::vector<uint8_t> sink(kDeep * 512);
  for (int round = 0; round < 2; ++round) {
    std::vector<Result> r(kDeep);
    for (int i = 0; i < kDeep; ++i) {
      store->Read(0, uint64_t(i) * 512, std::span(sink).subspan(i * 512, 512), Record(&r[i]));
    }
    EXPECT_EQ(store->in_flight(0), uint32_t{kDeep});
    for (auto& x : r) {
      Wait(x);
      EXPECT_EQ(x.err, 0);
    }
    EXPECT_GE(store->op_records(0), uint32_t{kDeep});
    if (round == 0) before = store->op_records(0);
  }
  EXPECT_EQ(store->op_records(0), before);
  EXPECT_GT(before, records);
}

// The ring waits for completions only while something is in flight: once the I/O is done the
// reactor's io_context runs out of work and run() returns, which is how a reactor stops.
TEST_F(FileStoreTest, AnIdleStoreLetsItsReactorStop) {
  auto store = OpenOrDie(1 << 20);
  ASSERT_NE(store, nullptr);
  auto data = Pattern(4096, 7);
  Result w;
  store->Write(0, 0, data, /*fua=*/true, Record(&w));
  auto finished = std::async(std::launch::async, [this] { return ioc_.run(); });
  const bool stopped = finished.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  if (!stopped) ioc_.stop();
  EXPECT_TRUE(stopped) << "the io_context kept running with nothing in flight";
  EXPECT_EQ(w.calls, 1);
  EXPECT_EQ(w.err, 0);
}

// direct: aligned reads and writes go through the O_DIRECT descriptor, anything else through the
// page cache, and both see the same data. In /var/tmp, which is on a disk (tmpfs had no O_DIRECT
// before Linux 6.6).
TEST_F(FileStoreTest, DirectStoreBypassesThePageCacheWhereAligned) {
  char tmpl[] = "/var/tmp/iscsigw-direct-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  const std::string path = (dir / "lun.img").string();
  FileStoreOptions o{path, 1 << 20, false};
  o.direct = true;
  auto opened = FileStore::Open(o, {&ioc_});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto store = std::move(opened).value();
  EXPECT_TRUE(store->direct());
  const uint32_t align = store->direct_offset_align();
  ASSERT_GT(align, 0u);
  ASSERT_LE(align, 4096u);
  ASSERT_GT(store->direct_mem_align(), 0u);

  // Aligned: 8 KiB from a page-aligned buffer at offset 8 KiB, FUA.
  auto pattern = Pattern(8192, 3);
  auto* aligned = static_cast<uint8_t*>(std::aligned_alloc(4096, 8192));
  std::memcpy(aligned, pattern.data(), 8192);
  Result w1;
  store->Write(0, 8192, std::span<const uint8_t>(aligned, 8192), /*fua=*/true, Record(&w1));
  Wait(w1);
  EXPECT_EQ(w1.err, 0);
  EXPECT_EQ(store->unaligned(0), 0u);

  // Not aligned: 100 bytes from an odd address at an odd offset.
  auto odd = Pattern(101, 9);
  Result w2;
  store->Write(0, 3, std::span<const uint8_t>(odd).subspan(1), /*fua=*/false, Record(&w2));
  Wait(w2);
  EXPECT_EQ(w2.err, 0);
  EXPECT_EQ(store->unaligned(0), 1u);

  // Read back both ways: direct (aligned) and through the page cache.
  std::memset(aligned, 0, 8192);
  Result r1;
  store->Read(0, 8192, std::span<uint8_t>(aligned, 8192), Record(&r1));
  Wait(r1);
  EXPECT_EQ(r1.err, 0);
  EXPECT_EQ(std::memcmp(aligned, pattern.data(), 8192), 0);
  EXPECT_EQ(store->unaligned(0), 1u);
  std::vector<uint8_t> back(100);
  Result r2;
  store->Read(0, 3, back, Record(&r2));
  Wait(r2);
  EXPECT_EQ(r2.err, 0);
  EXPECT_TRUE(std::equal(back.begin(), back.end(), odd.begin() + 1));
  // The page cache sees what went around it: another descriptor reads the direct write.
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> via_cache(8192);
  EXPECT_EQ(::pread(fd, via_cache.data(), 8192, 8192), 8192);
  ::close(fd);
  EXPECT_EQ(via_cache, pattern);
  Result f;
  store->Flush(0, Record(&f));
  Wait(f);
  EXPECT_EQ(f.err, 0);
  std::free(aligned);
  store.reset();
  fs::remove_all(dir);
}

// Without io_uring (refused by seccomp; here ISCSIGW_DISABLE_IO_URING) every call runs on the
// fallback pool and still completes on the slot's thread, with the same results. Before flushes
// were grouped there, eight at once ran eight fdatasyncs side by side (group_syncs stayed 0).
TEST_F(FileStoreTest, WithoutIoUringCallsRunOnThePool) {
  ::setenv("ISCSIGW_DISABLE_IO_URING", "1", 1);
  boost::asio::io_context ioc;  // its ring is set up now, and refused
  auto opened = FileStore::Open(FileStoreOptions{path_, 1 << 20, false}, {&ioc});
  ::unsetenv("ISCSIGW_DISABLE_IO_URING");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto store = std::move(opened).value();
  EXPECT_FALSE(runtime::FileRing::For(ioc).error().empty());
  auto wait = [&](const Result& r) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (r.calls == 0 && std::chrono::steady_clock::now() < deadline) {
      ioc.restart();
      ioc.run_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(r.calls, 1);
    EXPECT_EQ(r.thread, std::this_thread::get_id());
    EXPECT_EQ(r.err, 0);
  };
  auto data = Pattern(16384, 5);
  Result w, f, u, r;
  store->Write(0, 4096, data, /*fua=*/true, Record(&w));
  wait(w);
  store->Flush(0, Record(&f));
  wait(f);
  // One fdatasync at a time per slot here too (a writeback error is never split between two):
  // eight flushes at once take two, the first alone and the seven that waited for it together.
  const uint64_t syncs = store->group_syncs(0);
  std::vector<Result> flushes(8);
  for (Result& x : flushes) store->Flush(0, Record(&x));
  for (const Result& x : flushes) wait(x);
  EXPECT_EQ(store->group_syncs(0), syncs + 2);
  std::vector<uint8_t> back(16384);
  store->Read(0, 4096, back, Record(&r));
  wait(r);
  EXPECT_EQ(back, data);
  store->Unmap(0, 8192, 4096, Record(&u));
  wait(u);
  Result r2;
  store->Read(0, 8192, std::span(back).first(4096), Record(&r2));
  wait(r2);
  EXPECT_TRUE(std::all_of(back.begin(), back.begin() + 4096, [](uint8_t b) { return b == 0; }));
  EXPECT_EQ(store->in_flight(0), 0u);
}

TEST_F(FileStoreTest, ReadOnlyRefusesWrites) {
  { ASSERT_NE(OpenOrDie(1 << 20), nullptr); }
  auto store = OpenOrDie(0, /*read_only=*/true);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->read_only());
  Result w;
  store->Write(0, 0, Pattern(512, 1), false, Record(&w));
  Wait(w);
  EXPECT_EQ(w.err, EROFS);
}

TEST_F(FileStoreTest, OpenErrorsNameThePathAndReason) {
  const std::string missing = (dir_ / "nope" / "lun.img").string();
  auto r = FileStore::Open(FileStoreOptions{missing, 1 << 20, false}, {&ioc_});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(missing), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("No such file or directory"), std::string::npos)
      << r.status().message();

  auto ro = FileStore::Open(FileStoreOptions{path_, 0, true}, {&ioc_});  // does not exist
  ASSERT_FALSE(ro.ok());
  EXPECT_NE(ro.status().message().find(path_), std::string::npos);

  auto dir = FileStore::Open(FileStoreOptions{dir_.string(), 0, true}, {&ioc_});
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("not a regular file or block device"), std::string::npos)
      << dir.status().message();

  auto none = FileStore::Open(FileStoreOptions{path_, 1 << 20, false}, {});
  ASSERT_FALSE(none.ok());
  EXPECT_FALSE(fs::exists(path_));
}

TEST_F(FileStoreTest, ExistingFileSmallerThanRequestedSizeIsAnError) {
  { ASSERT_NE(OpenOrDie(1 << 20), nullptr); }
  auto r = FileStore::Open(FileStoreOptions{path_, 2 << 20, false}, {&ioc_});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("smaller than size_bytes"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(fs::file_size(path_), 1u << 20);  // left untouched
}

TEST_F(FileStoreTest, ReadPastTheEndOfAShrunkFileIsAnError) {
  auto store = OpenOrDie(1 << 20);
  ASSERT_NE(store, nullptr);
  fs::resize_file(path_, 4096);  // shrunk behind our back
  std::vector<uint8_t> buf(8192);
  Result r;
  store->Read(0, 512 * 1024, buf, Record(&r));
  Wait(r);
  EXPECT_EQ(r.err, EIO);
}

// Buffers of the reactor's pool lie in the arena its ring registers for a direct store: direct
// reads and writes on them go as fixed operations, any other buffer as a plain one, and the bytes
// are the same either way.
class FileStoreFixedTest : public FileStoreTest {
 protected:
  std::unique_ptr<FileStore> OpenWithArena(const std::string& path, bool direct) {
    runtime::FileRing::OfferFixedBuffers(ioc_, pool_.arena());  // as the reactor pool does
    FileStoreOptions o{path, 1 << 20, false};
    o.direct = direct;
    auto r = FileStore::Open(o, {&ioc_});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return nullptr;
    return std::move(r).value();
  }
  // Writes then reads back 16 KiB at offset 8 KiB from pool buffers and 4 KiB at 64 KiB from heap
  // buffers, through `store` on slot 0.
  void WriteAndReadBack(FileStore& store) {
    uint32_t cap = 0;
    uint8_t* out = pool_.Get(16384, &cap);
    const auto pattern = Pattern(16384, 11);
    std::memcpy(out, pattern.data(), pattern.size());
    Result w;
    store.Write(0, 8192, std::span<const uint8_t>(out, 16384), /*fua=*/true, Record(&w));
    Wait(w);
    EXPECT_EQ(w.err, 0);
    uint8_t* in = pool_.Get(16384, &cap);
    std::memset(in, 0, 16384);
    Result r;
    store.Read(0, 8192, std::span<uint8_t>(in, 16384), Record(&r));
    Wait(r);
    EXPECT_EQ(r.err, 0);
    EXPECT_EQ(std::memcmp(in, pattern.data(), pattern.size()), 0);
    pool_.Put(out, cap);
    pool_.Put(in, cap);

    auto* heap = static_cast<uint8_t*>(std::aligned_alloc(4096, 4096));
    std::memset(heap, 0x77, 4096);
    Result w2;
    store.Write(0, 65536, std::span<const uint8_t>(heap, 4096), false, Record(&w2));
    Wait(w2);
    EXPECT_EQ(w2.err, 0);
    std::memset(heap, 0, 4096);
    Result r2;
    store.Read(0, 65536, std::span<uint8_t>(heap, 4096), Record(&r2));
    Wait(r2);
    EXPECT_EQ(r2.err, 0);
    EXPECT_EQ(heap[0], 0x77);
    EXPECT_EQ(heap[4095], 0x77);
    std::free(heap);
  }
  // Skips where the ring or its registration is refused here.
  bool Registered() {
    runtime::FileRing& ring = runtime::FileRing::For(ioc_);
    if (!ring.error().empty() || ring.fixed_bytes() == 0) return false;
    return true;
  }

  // Static: the offered arena must outlive the io_context (ioc_, a member of the base).
  static inline runtime::BufferPool pool_{32u << 20, 4u << 20};
};

TEST_F(FileStoreFixedTest, ThroughThePageCacheNothingIsRegisteredOrFixed) {
  auto store = OpenWithArena(path_, false);
  ASSERT_NE(store, nullptr);
  runtime::FileRing& ring = runtime::FileRing::For(ioc_);
  if (!ring.error().empty()) GTEST_SKIP() << "io_uring unavailable: " << ring.error();
  EXPECT_EQ(ring.fixed_bytes(), 0u);  // only a direct store pins the arena
  WriteAndReadBack(*store);
  EXPECT_EQ(store->fixed(0), 0u);  // nothing to spare: buffered I/O pins nothing
  EXPECT_EQ(store->in_flight(0), 0u);
}

TEST_F(FileStoreFixedTest, PoolBuffersGoAsFixedReadsAndWritesWithDirect) {
  char tmpl[] = "/var/tmp/iscsigw-direct-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  auto store = OpenWithArena((dir / "lun.img").string(), true);
  ASSERT_NE(store, nullptr);
  if (!Registered()) {
    store.reset();
    fs::remove_all(dir);
    GTEST_SKIP() << "no fixed buffers here";
  }
  ASSERT_TRUE(store->direct());
  WriteAndReadBack(*store);
  EXPECT_EQ(store->fixed(0), 2u);      // the pool's write and read, not the heap's
  EXPECT_EQ(store->unaligned(0), 0u);  // all four went direct
  store.reset();
  fs::remove_all(dir);
}

TEST_F(FileStoreFixedTest, WithoutRegistrationPoolBuffersGoAsPlainReadsAndWrites) {
  // No offer: the ring has nothing registered.
  auto r = FileStore::Open(FileStoreOptions{path_, 1 << 20, false}, {&ioc_});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto store = std::move(r).value();
  WriteAndReadBack(*store);
  EXPECT_EQ(store->fixed(0), 0u);
}

}  // namespace file_store_test
}  // namespace iscsigw::backing
