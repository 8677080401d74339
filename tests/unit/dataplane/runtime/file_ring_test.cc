#include "dataplane/runtime/file_ring.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/runtime/buffer_pool.h"

namespace iscsigw::runtime {
namespace file_ring_test {

constexpr size_t kCache = 32u << 20;
constexpr size_t kArena = 4u << 20;

// One ring operation and its result.
struct Done : FileRing::Op {
  Done() {
    complete = [](FileRing::Op* op, int32_t result) {
      auto* d = static_cast<Done*>(op);
      d->res = result;
      ++d->calls;
    };
  }
  int calls = 0;
  int32_t res = 0;
};

void RunUntil(boost::asio::io_context& ioc, const Done& d) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (d.calls == 0 && std::chrono::steady_clock::now() < deadline) {
    ioc.restart();
    ioc.run_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(d.calls, 1);
}

class FileRingFixedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iscsigw-file-ring-XXXXXX";
    fd_ = ::mkstemp(tmpl);
    ASSERT_GE(fd_, 0);
    path_ = tmpl;
    ASSERT_EQ(::ftruncate(fd_, 1 << 20), 0);
  }
  void TearDown() override {
    ::close(fd_);
    ::unlink(path_.c_str());
  }

  // ioc's ring with pool_'s arena offered and registered, as for a direct store; null where
  // io_uring is refused.
  FileRing* RingWithArena(boost::asio::io_context& ioc) {
    FileRing::OfferFixedBuffers(ioc, pool_.arena());
    FileRing& ring = FileRing::For(ioc);
    if (!ring.error().empty()) return nullptr;
    ring.UseFixedBuffers();
    return &ring;
  }

  BufferPool pool_{kCache, kArena};
  int fd_ = -1;
  std::string path_;
};

TEST_F(FileRingFixedTest, PoolBuffersInTheArenaHaveAFixedIndexOthersDoNot) {
  boost::asio::io_context ioc;
  FileRing* ring = RingWithArena(ioc);
  if (ring == nullptr) GTEST_SKIP() << "io_uring unavailable: " << FileRing::For(ioc).error();
  if (ring->fixed_bytes() == 0) GTEST_SKIP() << "registration refused: " << ring->fixed_error();
  EXPECT_EQ(ring->fixed_bytes(), kArena);
  EXPECT_TRUE(ring->fixed_error().empty());

  uint32_t cap = 0;
  uint8_t* p = pool_.Get(8192, &cap);
  ASSERT_TRUE(pool_.InArena(p));
  EXPECT_EQ(ring->FixedIndex(p, cap), 0);
  EXPECT_EQ(ring->FixedIndex(p + 100, 10), 0);  // a piece inside a buffer
  pool_.Put(p, cap);

  const std::span<uint8_t> arena = pool_.arena();
  EXPECT_EQ(ring->FixedIndex(arena.data(), arena.size()), 0);
  EXPECT_EQ(ring->FixedIndex(arena.data() + arena.size() - 4096, 4097), -1);  // runs past the end
  EXPECT_EQ(ring->FixedIndex(arena.data() + arena.size(), 1), -1);
  EXPECT_EQ(ring->FixedIndex(arena.data() - 4096, 4096), -1);
  std::vector<uint8_t> heap(4096);
  EXPECT_EQ(ring->FixedIndex(heap.data(), heap.size()), -1);
}

TEST_F(FileRingFixedTest, FixedWriteAndReadMoveTheRightBytes) {
  boost::asio::io_context ioc;
  FileRing* ring = RingWithArena(ioc);
  if (ring == nullptr) GTEST_SKIP() << "io_uring unavailable: " << FileRing::For(ioc).error();
  if (ring->fixed_bytes() == 0) GTEST_SKIP() << "registration refused: " << ring->fixed_error();

  uint32_t cap = 0;
  uint8_t* out = pool_.Get(16384, &cap);
  for (uint32_t i = 0; i < cap; ++i) out[i] = static_cast<uint8_t>(i * 7 + 3);
  const int idx = ring->FixedIndex(out, cap);
  ASSERT_EQ(idx, 0);
  Done w;
  io_uring_sqe* sqe = ring->Prepare(&w);
  ASSERT_NE(sqe, nullptr);
  io_uring_prep_write_fixed(sqe, fd_, out, cap, 65536, idx);
  RunUntil(ioc, w);
  EXPECT_EQ(w.res, static_cast<int32_t>(cap));

  // What the kernel wrote is what the buffer held.
  std::vector<uint8_t> file(cap);
  ASSERT_EQ(::pread(fd_, file.data(), cap, 65536), static_cast<ssize_t>(cap));
  EXPECT_EQ(std::memcmp(file.data(), out, cap), 0);

  // And a fixed read lands in the right buffer, at the right place.
  uint32_t cap2 = 0;
  uint8_t* in = pool_.Get(16384, &cap2);
  ASSERT_NE(in, out);
  std::memset(in, 0, cap2);
  Done r;
  sqe = ring->Prepare(&r);
  ASSERT_NE(sqe, nullptr);
  io_uring_prep_read_fixed(sqe, fd_, in + 4096, 8192, 65536 + 4096, ring->FixedIndex(in, cap2));
  RunUntil(ioc, r);
  EXPECT_EQ(r.res, 8192);
  EXPECT_EQ(std::memcmp(in + 4096, out + 4096, 8192), 0);
  EXPECT_EQ(in[0], 0);
  EXPECT_EQ(in[4096 + 8192], 0);
  pool_.Put(out, cap);
  pool_.Put(in, cap2);
}

// Only a direct store's request pins the arena: an offer alone registers nothing.
TEST_F(FileRingFixedTest, TheOfferIsRegisteredOnlyWhenUsed) {
  boost::asio::io_context ioc;
  FileRing& ring = FileRing::For(ioc);
  if (!ring.error().empty()) GTEST_SKIP() << "io_uring unavailable: " << ring.error();
  FileRing::OfferFixedBuffers(ioc, pool_.arena());
  EXPECT_EQ(ring.fixed_bytes(), 0u);
  ring.UseFixedBuffers();
  if (ring.fixed_bytes() == 0) GTEST_SKIP() << "registration refused: " << ring.fixed_error();
  EXPECT_EQ(ring.fixed_bytes(), kArena);
  ring.UseFixedBuffers();  // once only
  EXPECT_EQ(ring.fixed_bytes(), kArena);
}

TEST_F(FileRingFixedTest, WithoutAnOfferNothingIsFixed) {
  boost::asio::io_context ioc;
  FileRing& ring = FileRing::For(ioc);
  if (!ring.error().empty()) GTEST_SKIP() << "io_uring unavailable: " << ring.error();
  EXPECT_EQ(ring.fixed_bytes(), 0u);
  EXPECT_TRUE(ring.fixed_error().empty());
  uint32_t cap = 0;
  uint8_t* p = pool_.Get(4096, &cap);
  EXPECT_EQ(ring.FixedIndex(p, cap), -1);
  pool_.Put(p, cap);
}

// The memlock limit, as a process without CAP_IPC_LOCK meets it: the limit is lowered for the
// process and the capability dropped for one thread (capabilities are per thread; the kernel
// decides whether to charge the pinned pages from the thread that sets the ring up).
class MemlockLimit {
 public:
  explicit MemlockLimit(rlim_t bytes) {
    ok_ = ::getrlimit(RLIMIT_MEMLOCK, &old_) == 0;
    rlimit lower = old_;
    lower.rlim_cur = bytes;
    ok_ = ok_ && ::setrlimit(RLIMIT_MEMLOCK, &lower) == 0;
    __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct d[2]{};
    if (::syscall(SYS_capget, &h, d) == 0) {
      d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
      ok_ = ok_ && ::syscall(SYS_capset, &h, d) == 0;
    }
  }
  ~MemlockLimit() { ::setrlimit(RLIMIT_MEMLOCK, &old_); }
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  bool ok_ = false;
};

bool HasIpcLock() {
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[2]{};
  return ::syscall(SYS_capget, &h, d) == 0 &&
         (d[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))) != 0;
}

struct Registration {
  std::string ring_error;
  bool limited = false;
  size_t fixed_bytes = 0;
  std::string fixed_error;
  int index = -2;
  int32_t write_res = 0;
  std::vector<uint8_t> written;
};

// Sets up a ring with `arena` offered under a memlock limit of `limit` bytes, on a thread of its
// own, and writes 4 KiB from the front of the arena through it the way a file store would.
Registration UnderMemlockLimit(rlim_t limit, BufferPool& pool, int fd) {
  Registration out;
  std::thread t([&] {
    MemlockLimit lower(limit);
    out.limited = lower.ok();
    boost::asio::io_context ioc;
    FileRing::OfferFixedBuffers(ioc, pool.arena());
    FileRing& ring = FileRing::For(ioc);
    out.ring_error = ring.error();
    if (!out.ring_error.empty()) return;
    ring.UseFixedBuffers();
    out.fixed_bytes = ring.fixed_bytes();
    out.fixed_error = ring.fixed_error();
    uint32_t cap = 0;
    uint8_t* p = pool.Get(4096, &cap);
    std::memset(p, 0xC3, cap);
    out.index = ring.FixedIndex(p, cap);
    Done w;
    io_uring_sqe* sqe = ring.Prepare(&w);
    if (out.index >= 0) {
      io_uring_prep_write_fixed(sqe, fd, p, cap, 0, out.index);
    } else {
      io_uring_prep_write(sqe, fd, p, cap, 0);
    }
    RunUntil(ioc, w);
    out.write_res = w.res;
    pool.Put(p, cap);
    out.written.resize(cap);
    (void)!::pread(fd, out.written.data(), cap, 0);
  });
  t.join();
  return out;
}

TEST_F(FileRingFixedTest, RegistrationRefusedByTheMemlockLimitLeavesPlainIo) {
  const Registration r = UnderMemlockLimit(256 << 10, pool_, fd_);
  if (!r.ring_error.empty()) GTEST_SKIP() << "io_uring unavailable: " << r.ring_error;
  ASSERT_TRUE(r.limited);
  EXPECT_EQ(r.fixed_bytes, 0u);
  EXPECT_NE(r.fixed_error.find("failed"), std::string::npos) << r.fixed_error;
  EXPECT_NE(r.fixed_error.find("RLIMIT_MEMLOCK 256 KiB"), std::string::npos) << r.fixed_error;
  EXPECT_EQ(r.index, -1);
  EXPECT_EQ(r.write_res, 4096);  // the ring still works, with plain writes
  EXPECT_EQ(r.written, std::vector<uint8_t>(4096, 0xC3));
}

TEST_F(FileRingFixedTest, ALowMemlockLimitRegistersTheFrontOfTheArena) {
  // Without the capability the rings of the other tests were charged too, and a ring's pages are
  // uncharged some time after it is gone: the sizes that fit would not be known.
  if (!HasIpcLock()) GTEST_SKIP() << "needs CAP_IPC_LOCK to start from nothing charged";
  // 3 MiB: 4 MiB is refused, its front 2 MiB fits.
  const Registration r = UnderMemlockLimit(3 << 20, pool_, fd_);
  if (!r.ring_error.empty()) GTEST_SKIP() << "io_uring unavailable: " << r.ring_error;
  ASSERT_TRUE(r.limited);
  EXPECT_EQ(r.fixed_bytes, 2u << 20);
  EXPECT_NE(r.fixed_error.find("registered 2 MiB of 4 MiB"), std::string::npos) << r.fixed_error;
  EXPECT_EQ(r.index, 0);  // the pool hands out the front first
  EXPECT_EQ(r.write_res, 4096);
  EXPECT_EQ(r.written, std::vector<uint8_t>(4096, 0xC3));
}

}  // namespace file_ring_test
}  // namespace iscsigw::runtime
