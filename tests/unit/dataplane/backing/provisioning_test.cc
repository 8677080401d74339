// Thin provisioning and atomic read-modify-write of the RAM, null and file stores: Unmap releases
// or punches, GetProvisioning reports it, ReadModifyWrite excludes concurrent writers.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <span>
#include <thread>
#include <vector>

#include "dataplane/backing/file/file_store.h"
#include "dataplane/backing/null_store.h"
#include "dataplane/backing/ram_store.h"
#include "tests/unit/dataplane/backing/record_completion.h"

namespace iscsigw::backing {
namespace provisioning_test {

void WriteOrDie(BackingStore& s, uint64_t offset, const std::vector<uint8_t>& data) {
  Result r;
  s.Write(0, offset, data, false, Record(&r));
  ASSERT_EQ(r.calls, 1);
  ASSERT_EQ(r.err, 0);
}

std::vector<uint8_t> ReadOrDie(BackingStore& s, uint64_t offset, size_t n) {
  std::vector<uint8_t> out(n, 0xEE);
  Result r;
  s.Read(0, offset, out, Record(&r));
  EXPECT_EQ(r.calls, 1);
  return out;
}

BackingStore::Extent Provisioning(BackingStore& s, uint64_t offset, uint64_t max_len) {
  BackingStore::Extent e;
  Result r;
  s.GetProvisioning(0, offset, max_len, &e, Record(&r));
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(r.err, 0);
  return e;
}

TEST(RamStoreProvisioning, UnmapOfWholeChunksReleasesAndReadsZeros) {
  RamStore store(4 * kMiB);
  EXPECT_TRUE(store.thin_provisioned());
  EXPECT_EQ(store.unmap_granularity(), kMiB);
  WriteOrDie(store, 0, std::vector<uint8_t>(3 * kMiB, 0xAB));
  EXPECT_EQ(store.allocated_bytes(), 3 * kMiB);

  // Keep a zero-copy view of chunk 1 across the unmap: it must stay readable (zeros after).
  Segment segs[2];
  ASSERT_EQ(store.MapRead(kMiB, 4096, segs), 1u);
  EXPECT_EQ(segs[0].data[0], 0xAB);

  Result r;
  store.Unmap(0, kMiB, 2 * kMiB, Record(&r));
  ASSERT_EQ(r.calls, 1);
  EXPECT_EQ(r.err, 0);
  EXPECT_EQ(store.allocated_bytes(), kMiB);
  EXPECT_EQ(segs[0].data[0], 0);  // the memory is still valid and now reads zeros
  EXPECT_EQ(ReadOrDie(store, kMiB, 2 * kMiB), std::vector<uint8_t>(2 * kMiB, 0));
  EXPECT_EQ(ReadOrDie(store, 0, 16), std::vector<uint8_t>(16, 0xAB));

  auto e = Provisioning(store, 0, 4 * kMiB);
  EXPECT_TRUE(e.mapped);
  EXPECT_EQ(e.len, kMiB);
  e = Provisioning(store, kMiB, 3 * kMiB);
  EXPECT_FALSE(e.mapped);
  EXPECT_EQ(e.len, 3 * kMiB);  // unmapped chunks 1, 2 and never-written chunk 3

  // Writing again maps the chunk again; untouched bytes of it read as zeros.
  WriteOrDie(store, kMiB + 512, std::vector<uint8_t>(512, 0x11));
  EXPECT_EQ(store.allocated_bytes(), 2 * kMiB);
  EXPECT_TRUE(Provisioning(store, kMiB, kMiB).mapped);
  auto back = ReadOrDie(store, kMiB, 1024);
  EXPECT_EQ(back[0], 0);
  EXPECT_EQ(back[511], 0);
  EXPECT_EQ(back[512], 0x11);
}

TEST(RamStoreProvisioning, PartialUnmapZerosButStaysMapped) {
  RamStore store(2 * kMiB);
  WriteOrDie(store, 0, std::vector<uint8_t>(kMiB, 0x5A));
  Result r;
  store.Unmap(0, 100, 10000, Record(&r));  // ragged on both ends, spans whole pages
  ASSERT_EQ(r.err, 0);
  auto back = ReadOrDie(store, 0, 20000);
  for (size_t i = 0; i < back.size(); ++i) {
    ASSERT_EQ(back[i], (i >= 100 && i < 10100) ? 0 : 0x5A) << "byte " << i;
  }
  EXPECT_TRUE(Provisioning(store, 0, 2 * kMiB).mapped);
  EXPECT_EQ(store.allocated_bytes(), kMiB);
}

TEST(RamStoreProvisioning, ReadModifyWriteSeesCurrentDataAndWrites) {
  RamStore store(2 * kMiB);
  WriteOrDie(store, kMiB - 2, {1, 2, 3, 4});  // spans two chunks
  std::vector<uint8_t> scratch(4);
  struct Ctx {
    std::vector<uint8_t> seen;
    std::vector<uint8_t> out{9, 8, 7, 6};
  } ctx;
  BackingStore::ModifyFn fn{[](void* c, std::span<uint8_t> cur) -> std::span<const uint8_t> {
                              auto* x = static_cast<Ctx*>(c);
                              x->seen.assign(cur.begin(), cur.end());
                              return x->out;
                            },
                            &ctx};
  Result r;
  store.ReadModifyWrite(0, kMiB - 2, scratch, false, fn, Record(&r));
  ASSERT_EQ(r.err, 0);
  EXPECT_EQ(ctx.seen, (std::vector<uint8_t>{1, 2, 3, 4}));
  EXPECT_EQ(ReadOrDie(store, kMiB - 2, 4), (std::vector<uint8_t>{9, 8, 7, 6}));
}

// A writer thread keeps filling a 256 KiB range that straddles two chunks with one byte value;
// read-modify-write operations on other threads must never see a mix (a write half landed) and
// their own writes must land whole. (One writer: two overlapping ordinary writes may legitimately
// interleave with each other, which would look the same.)
TEST(RamStoreProvisioning, ReadModifyWriteIsAtomicAgainstWritersOnOtherThreads) {
  constexpr size_t kLen = 256 * 1024;
  RamStore store(4 * kMiB);
  WriteOrDie(store, kMiB - kLen / 2, std::vector<uint8_t>(kLen, 1));
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < 1; ++w) {
    threads.emplace_back([&, w] {
      std::vector<uint8_t> data(kLen, static_cast<uint8_t>(10 + w));
      while (!stop.load()) {
        Result r;
        store.Write(w, kMiB - kLen / 2, data, false, Record(&r));
      }
    });
  }
  for (unsigned m = 0; m < 2; ++m) {
    threads.emplace_back([&, m] {
      std::vector<uint8_t> scratch(kLen);
      std::vector<uint8_t> mine(kLen, static_cast<uint8_t>(100 + m));
      struct Ctx {
        std::atomic<int>* torn;
        std::vector<uint8_t>* mine;
      } ctx{&torn, &mine};
      BackingStore::ModifyFn fn{[](void* c, std::span<uint8_t> cur) -> std::span<const uint8_t> {
                                  auto* x = static_cast<Ctx*>(c);
                                  for (uint8_t b : cur) {
                                    if (b != cur[0]) {
                                      x->torn->fetch_add(1);
                                      break;
                                    }
                                  }
                                  return *x->mine;
                                },
                                &ctx};
      for (int i = 0; i < 300; ++i) {
        Result r;
        store.ReadModifyWrite(2 + m, kMiB - kLen / 2, scratch, false, fn, Record(&r));
        ASSERT_EQ(r.err, 0);
      }
    });
  }
  threads[1].join();
  threads[2].join();
  stop = true;
  threads[0].join();
  EXPECT_EQ(torn.load(), 0);
  auto back = ReadOrDie(store, kMiB - kLen / 2, kLen);
  for (uint8_t b : back) ASSERT_EQ(b, back[0]);
}

TEST(NullStoreProvisioning, EverythingIsDeallocated) {
  NullStore store(8 * kMiB);
  EXPECT_TRUE(store.thin_provisioned());
  EXPECT_EQ(store.allocated_bytes(), 0u);
  Result r;
  store.Unmap(0, 0, 8 * kMiB, Record(&r));
  EXPECT_EQ(r.err, 0);
  auto e = Provisioning(store, kMiB, 16 * kMiB);
  EXPECT_FALSE(e.mapped);
  EXPECT_EQ(e.len, 7 * kMiB);
}

class FileStoreProvisioningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iscsigw-prov-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto r = FileStore::Open(FileStoreOptions{dir_ + "/lun.img", 8 * kMiB, false}, {&ioc_});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    store_ = std::move(r).value();
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Wait(const Result& r) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (r.calls == 0 && std::chrono::steady_clock::now() < deadline) {
      ioc_.restart();
      ioc_.run_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(r.calls, 1);
  }
  uint64_t AllocatedBytes() {
    struct stat st {};
    EXPECT_EQ(::stat((dir_ + "/lun.img").c_str(), &st), 0);
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }

  std::string dir_;
  boost::asio::io_context ioc_;
  std::unique_ptr<FileStore> store_;
};

TEST_F(FileStoreProvisioningTest, UnmapPunchesAHoleThatReadsZeros) {
  EXPECT_TRUE(store_->thin_provisioned());
  std::vector<uint8_t> data(2 * kMiB, 0xC3);
  Result w;
  store_->Write(0, 0, data, false, Record(&w));
  Wait(w);
  ASSERT_EQ(w.err, 0);
  const uint64_t before = AllocatedBytes();
  EXPECT_GE(before, 2 * kMiB);
  EXPECT_EQ(store_->allocated_bytes(), before);  // what metrics report: st_blocks * 512

  Result u;
  store_->Unmap(0, 0, kMiB, Record(&u));
  EXPECT_EQ(u.calls, 0);  // on the pool; completes on the slot's io_context
  Wait(u);
  ASSERT_EQ(u.err, 0);
  EXPECT_LE(AllocatedBytes() + kMiB, before);
  EXPECT_EQ(store_->allocated_bytes(), AllocatedBytes());

  std::vector<uint8_t> back(2 * kMiB);
  Result r;
  store_->Read(0, 0, back, Record(&r));
  Wait(r);
  EXPECT_EQ(std::vector<uint8_t>(back.begin(), back.begin() + kMiB), std::vector<uint8_t>(kMiB, 0));
  EXPECT_EQ(back[kMiB], 0xC3);

  BackingStore::Extent e;
  Result p;
  store_->GetProvisioning(0, 0, 8 * kMiB, &e, Record(&p));
  Wait(p);
  ASSERT_EQ(p.err, 0);
  EXPECT_FALSE(e.mapped);
  EXPECT_EQ(e.len, kMiB);
  Result p2;
  store_->GetProvisioning(0, kMiB, 7 * kMiB, &e, Record(&p2));
  Wait(p2);
  EXPECT_TRUE(e.mapped);
  EXPECT_EQ(e.len, kMiB);
}

TEST_F(FileStoreProvisioningTest, ReadModifyWriteOnThePool) {
  Result w;
  std::vector<uint8_t> data(4096, 0x01);
  store_->Write(0, 8192, data, false, Record(&w));
  Wait(w);
  std::vector<uint8_t> scratch(4096);
  BackingStore::ModifyFn fn{[](void*, std::span<uint8_t> cur) -> std::span<const uint8_t> {
                              for (auto& b : cur) b |= 0x80;
                              return cur;
                            },
                            nullptr};
  Result m;
  store_->ReadModifyWrite(0, 8192, scratch, true, fn, Record(&m));
  Wait(m);
  ASSERT_EQ(m.err, 0);
  std::vector<uint8_t> back(4096);
  Result r;
  store_->Read(0, 8192, back, Record(&r));
  Wait(r);
  EXPECT_EQ(back, std::vector<uint8_t>(4096, 0x81));
}

}  // namespace provisioning_test
}  // namespace iscsigw::backing
