// RbdStore against a throwaway one-node Ceph cluster (scripts/ceph-test-cluster.sh), started once
// for this binary in a temp dir and stopped after: open and create, reads and writes at depth with
// every completion on the reactor thread, FUA and flush, discard reading back zeros, provisioning
// from the object map, COMPARE AND WRITE on the cluster and through the gate, online growth, and
// the errors that name a missing cluster, pool or image.
#include "dataplane/backing/rbd/rbd_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/dataplane/backing/record_completion.h"

namespace iscsigw::backing {
namespace rbd_store_test {

namespace fs = std::filesystem;

std::string Shell(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

// The cluster of this binary: started by the first test that needs it, stopped at exit.
class Cluster : public ::testing::Environment {
 public:
  static std::string conf;  // empty: no cluster, and every test fails with `error`
  static std::string error;
  static std::string dir;
  void SetUp() override {
    // The README's test command installs the Ceph daemons: without them these tests fail rather
    // than skip, so that a broken install cannot pass for a tested rbd store.
    if (Shell("command -v ceph-mon ceph-osd").empty()) {
      error = "the Ceph daemons (ceph-mon, ceph-osd) are not installed: scripts/install-deps.sh";
      return;
    }
    char tmpl[] = "/tmp/iscsigw-rbd-store-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      error = "mkdtemp /tmp/iscsigw-rbd-store-XXXXXX failed";
      return;
    }
    dir = tmpl;
    const std::string script = std::string(ISCSIGW_SOURCE_DIR) + "/scripts/ceph-test-cluster.sh";
    const std::string out = Shell("bash " + script + " start " + dir + " 2>" + dir + "/start.err");
    // The conf path is the last line of start's output.
    std::string last = out;
    while (!last.empty() && last.back() == '\n') last.pop_back();
    last = last.substr(last.find_last_of('\n') + 1);
    if (!last.empty() && fs::exists(last)) {
      conf = last;
    } else {
      error =
          "scripts/ceph-test-cluster.sh start failed: " + Shell("tail -n 20 " + dir + "/start.err");
    }
  }
  void TearDown() override {
    if (dir.empty()) return;
    const std::string script = std::string(ISCSIGW_SOURCE_DIR) + "/scripts/ceph-test-cluster.sh";
    Shell("bash " + script + " stop " + dir + " 2>/dev/null");
    fs::remove_all(dir);
  }
};
std::string Cluster::conf;
std::string Cluster::error;
std::string Cluster::dir;

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new Cluster);

class RbdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Cluster::conf.empty()) GTEST_FAIL() << "no Ceph test cluster: " << Cluster::error;
    image_ = std::string("t-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  void TearDown() override {
    store_.reset();
    if (!Cluster::conf.empty()) {
      Shell("rbd -c " + Cluster::conf + " rm rbd/" + image_ + " >/dev/null 2>&1");
    }
  }

  RbdStoreOptions Options(uint64_t size, bool create = true) {
    RbdStoreOptions o;
    o.pool = "rbd";
    o.image = image_;
    o.conf = Cluster::conf;
    o.create = create;
    o.size_bytes = size;
    return o;
  }
  // Options naming a cluster whose only mon is at a closed port, with a 1 s mount timeout.
  RbdStoreOptions DeadClusterOptions(const std::string& conf_name) {
    const std::string dead = Cluster::dir + "/" + conf_name;
    std::ofstream(dead) << "[global]\nmon host = [v2:127.0.0.1:9]\nauth client required = none\n"
                           "client mount timeout = 1\nlog file = /dev/null\n";
    RbdStoreOptions o = Options(kMiB, false);
    o.conf = dead;
    return o;
  }

  void OpenOrDie(uint64_t size) {
    auto r = RbdStore::Open(Options(size), {&ioc_, &ioc_});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    store_ = std::move(r).value();
  }

  // Runs the io_context until every result has completed (bounded by a deadline).
  void Wait(std::initializer_list<const Result*> rs) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    auto all = [&] {
      for (const Result* r : rs) {
        if (r->calls == 0) return false;
      }
      return true;
    };
    while (!all() && std::chrono::steady_clock::now() < deadline) {
      ioc_.restart();
      ioc_.run_for(std::chrono::milliseconds(10));
    }
    for (const Result* r : rs) {
      ASSERT_EQ(r->calls, 1);
      EXPECT_EQ(r->thread, std::this_thread::get_id()) << "completion off the reactor thread";
    }
  }

  std::string image_;
  boost::asio::io_context ioc_;
  std::unique_ptr<RbdStore> store_;
};

TEST_F(RbdStoreTest, CreatesTheImageAndReportsItsSize) {
  OpenOrDie(16 * kMiB);
  EXPECT_EQ(store_->kind(), "rbd");
  EXPECT_EQ(store_->size_bytes(), 16 * kMiB);
  EXPECT_TRUE(store_->persistent());
  EXPECT_TRUE(store_->thin_provisioned());
  EXPECT_EQ(store_->unmap_granularity(), 4 * kMiB);
  EXPECT_EQ(store_->name(), "rbd/" + image_);
  // The image is there for the rbd CLI too.
  EXPECT_NE(Shell("rbd -c " + Cluster::conf + " info rbd/" + image_).find("16 MiB"),
            std::string::npos);
}

TEST_F(RbdStoreTest, MissingImageIsNotFoundUnlessCreated) {
  auto r = RbdStore::Open(Options(0, false), {&ioc_});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("image " + image_ + " does not exist in pool rbd"),
            std::string::npos)
      << r.status().message();
  auto no_size = RbdStore::Open(Options(0, true), {&ioc_});
  ASSERT_FALSE(no_size.ok());
  EXPECT_EQ(no_size.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(RbdStoreTest, MissingPoolIsNotFound) {
  RbdStoreOptions o = Options(kMiB);
  o.pool = "no-such-pool";
  auto r = RbdStore::Open(o, {&ioc_});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("pool no-such-pool does not exist"), std::string::npos)
      << r.status().message();
}

TEST_F(RbdStoreTest, MissingClusterFailsFastNamingIt) {
  // A conf whose mon nobody listens on, with the default mount timeout lowered by the file (the
  // conf's value wins over the store's 15 s).
  const std::string conf = Cluster::dir + "/dead.conf";
  {
    std::ofstream f(conf);
    f << "[global]\nmon host = [v2:127.0.0.1:9]\nauth client required = none\n"
         "client mount timeout = 3\nlog file = /dev/null\n";
  }
  RbdStoreOptions o = Options(kMiB);
  o.conf = conf;
  o.keyring = Cluster::dir + "/secret.keyring";
  const auto t0 = std::chrono::steady_clock::now();
  auto r = RbdStore::Open(o, {&ioc_});
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("Ceph cluster of " + conf), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("127.0.0.1:9"), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().find("secret.keyring"), std::string::npos)
      << "the keyring path leaked: " << r.status().message();
  EXPECT_LT(took, std::chrono::seconds(20));

  o.conf = Cluster::dir + "/no-such.conf";
  auto bad = RbdStore::Open(o, {&ioc_});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("ceph conf " + o.conf), std::string::npos)
      << bad.status().message();
}

TEST_F(RbdStoreTest, WritesAndReadsAtDepthCompleteOnTheReactor) {
  OpenOrDie(16 * kMiB);
  constexpr int kDepth = 48;
  constexpr size_t kLen = 16384;
  std::vector<std::vector<uint8_t>> data;
  std::vector<Result> w(kDepth);
  for (int i = 0; i < kDepth; ++i) data.push_back(Pattern(kLen, static_cast<uint8_t>(i)));
  for (int i = 0; i < kDepth; ++i) {
    store_->Write(i % 2, uint64_t(i) * 256 * 1024, data[i], i % 3 == 0, Record(&w[i]));
  }
  EXPECT_EQ(store_->in_flight(0) + store_->in_flight(1), uint32_t(kDepth));
  for (auto& r : w) Wait({&r});
  for (auto& r : w) ASSERT_EQ(r.err, 0);
  Result f;
  store_->Flush(0, Record(&f));
  Wait({&f});
  ASSERT_EQ(f.err, 0);

  std::vector<std::vector<uint8_t>> back(kDepth, std::vector<uint8_t>(kLen));
  std::vector<Result> rd(kDepth);
  for (int i = 0; i < kDepth; ++i) {
    store_->Read(i % 2, uint64_t(i) * 256 * 1024, back[i], Record(&rd[i]));
  }
  for (auto& r : rd) Wait({&r});
  for (int i = 0; i < kDepth; ++i) {
    ASSERT_EQ(rd[i].err, 0);
    ASSERT_EQ(back[i], data[i]) << "block " << i;
  }
  EXPECT_EQ(store_->in_flight(0) + store_->in_flight(1), 0u);
  // The records are reused: one chunk per slot covers this depth.
  EXPECT_EQ(store_->op_records(0), 64u);
  EXPECT_EQ(store_->op_records(1), 64u);
  // What the rbd CLI reads is what was written.
  const std::string file = Cluster::dir + "/" + image_ + ".export";
  Shell("rbd -c " + Cluster::conf + " export rbd/" + image_ + " " + file + " >/dev/null 2>&1");
  std::ifstream in(file, std::ios::binary);
  std::vector<uint8_t> exported((std::istreambuf_iterator<char>(in)), {});
  fs::remove(file);
  ASSERT_EQ(exported.size(), 16 * kMiB);
  EXPECT_TRUE(std::equal(data[7].begin(), data[7].end(), exported.begin() + 7 * 256 * 1024));
}

TEST_F(RbdStoreTest, UnmapReadsBackZerosAndProvisioningFollowsTheObjectMap) {
  OpenOrDie(16 * kMiB);
  ASSERT_TRUE(store_->provisioning_from_object_map());
  const auto data = Pattern(8 * kMiB, 3);
  Result w;
  store_->Write(0, 0, data, false, Record(&w));
  Wait({&w});
  ASSERT_EQ(w.err, 0);

  BackingStore::Extent e;
  Result p;
  store_->GetProvisioning(0, 0, 16 * kMiB, &e, Record(&p));
  Wait({&p});
  ASSERT_EQ(p.err, 0);
  EXPECT_TRUE(e.mapped);
  EXPECT_EQ(e.len, 8 * kMiB);

  // A partial discard (inside the first object) zeroes; a whole object goes.
  Result u1, u2;
  store_->Unmap(0, 4096, 8192, Record(&u1));
  store_->Unmap(1, 4 * kMiB, 4 * kMiB, Record(&u2));
  Wait({&u1, &u2});
  ASSERT_EQ(u1.err, 0);
  ASSERT_EQ(u2.err, 0);
  std::vector<uint8_t> back(16384);
  Result r;
  store_->Read(0, 0, back, Record(&r));
  Wait({&r});
  ASSERT_EQ(r.err, 0);
  EXPECT_TRUE(std::equal(back.begin(), back.begin() + 4096, data.begin()));
  EXPECT_TRUE(std::all_of(back.begin() + 4096, back.begin() + 12288, [](uint8_t b) { return !b; }));
  EXPECT_TRUE(std::equal(back.begin() + 12288, back.end(), data.begin() + 12288));

  BackingStore::Extent e2;
  Result p2;
  store_->GetProvisioning(0, 4 * kMiB, 12 * kMiB, &e2, Record(&p2));
  Wait({&p2});
  ASSERT_EQ(p2.err, 0);
  EXPECT_FALSE(e2.mapped);
  EXPECT_EQ(e2.len, 12 * kMiB);
  BackingStore::Extent e3;
  Result p3;
  store_->GetProvisioning(0, 4096, 16 * kMiB, &e3, Record(&p3));
  Wait({&p3});
  EXPECT_TRUE(e3.mapped);
  EXPECT_EQ(e3.len, 4 * kMiB - 4096);
}

TEST_F(RbdStoreTest, CompareAndWriteOnTheClusterAndThroughTheGate) {
  OpenOrDie(8 * kMiB);
  const auto old = Pattern(8192, 1);
  Result w;
  store_->Write(0, 0, old, false, Record(&w));
  Wait({&w});
  ASSERT_EQ(w.err, 0);

  for (const size_t len : {size_t{512}, size_t{4096}}) {
    SCOPED_TRACE(len);
    const auto now = Pattern(len, static_cast<uint8_t>(len));
    std::vector<uint8_t> scratch(len);
    // Match: written.
    BackingStore::CompareWriteOp ok{std::span(old).first(len), now, scratch, true};
    Result c1;
    store_->CompareAndWrite(1, 0, &ok, Record(&c1));
    Wait({&c1});
    ASSERT_EQ(c1.err, 0);
    EXPECT_EQ(ok.miscompare, ok.kNoMiscompare);
    // Mismatch at byte 300: nothing written, the offset reported.
    auto wrong = now;
    wrong[300] ^= 0xff;
    const auto other = Pattern(len, 99);
    BackingStore::CompareWriteOp bad{wrong, other, scratch, false};
    Result c2;
    store_->CompareAndWrite(1, 0, &bad, Record(&c2));
    Wait({&c2});
    ASSERT_EQ(c2.err, 0);
    EXPECT_EQ(bad.miscompare, 300u);
    std::vector<uint8_t> back(len);
    Result r;
    store_->Read(0, 0, back, Record(&r));
    Wait({&r});
    EXPECT_EQ(back, now);
    // Restore for the next length.
    Result w2;
    store_->Write(0, 0, old, false, Record(&w2));
    Wait({&w2});
  }
  // The 512-byte ones were compared by librbd on the cluster; the 4096-byte ones in the gateway.
  EXPECT_EQ(store_->native_compare_writes(1), 2u);
}

// librbd's mismatch offset is image-wide (and, in Ceph 16, counted from the object's start):
// the store must turn it into the index within the compared range at any LBA.
TEST_F(RbdStoreTest, MiscompareOffsetIsWithinTheRangeAtAnyLba) {
  OpenOrDie(12 * kMiB);
  for (const uint64_t at :
       {uint64_t{4 * kMiB}, uint64_t{4 * kMiB + 8 * 512}, uint64_t{9 * kMiB + 512}}) {
    SCOPED_TRACE(at);
    const auto old = Pattern(512, static_cast<uint8_t>(at >> 9));
    Result w;
    store_->Write(0, at, old, false, Record(&w));
    Wait({&w});
    ASSERT_EQ(w.err, 0);
    auto wrong = old;
    wrong[100] ^= 0x5a;
    const auto data = Pattern(512, 7);
    std::vector<uint8_t> scratch(512);
    BackingStore::CompareWriteOp bad{wrong, data, scratch, false};
    Result c;
    store_->CompareAndWrite(0, at, &bad, Record(&c));
    Wait({&c});
    ASSERT_EQ(c.err, 0);
    EXPECT_EQ(bad.miscompare, 100u);
  }
  EXPECT_EQ(store_->native_compare_writes(0), 3u);
}

TEST_F(RbdStoreTest, OrWriteIsAReadModifyWrite) {
  OpenOrDie(4 * kMiB);
  std::vector<uint8_t> ones(4096, 0x0f);
  Result w;
  store_->Write(0, 8192, ones, false, Record(&w));
  Wait({&w});
  std::vector<uint8_t> scratch(4096);
  auto modify = [](void*, std::span<uint8_t> cur) -> std::span<const uint8_t> {
    for (auto& b : cur) b |= 0xf0;
    return cur;
  };
  Result m;
  store_->ReadModifyWrite(0, 8192, scratch, false, BackingStore::ModifyFn{modify, nullptr},
                          Record(&m));
  Wait({&m});
  ASSERT_EQ(m.err, 0);
  std::vector<uint8_t> back(4096);
  Result r;
  store_->Read(0, 8192, back, Record(&r));
  Wait({&r});
  EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0xff; }));
}

TEST_F(RbdStoreTest, AtomicWritesStayInsideOneStripeUnit) {
  OpenOrDie(12 * kMiB);
  // The default layout: one stripe unit is one 4 MiB object.
  EXPECT_EQ(store_->atomic_limits().max_bytes, 4 * kMiB);
  EXPECT_EQ(store_->atomic_limits().align_bytes, 4 * kMiB);
  const auto data = Pattern(4 * kMiB, 21);
  Result w, misaligned;
  store_->WriteAtomic(0, 4 * kMiB, data, true, Record(&w));
  store_->WriteAtomic(1, 4 * kMiB + 512, std::span(data).first(4096), false, Record(&misaligned));
  Wait({&w, &misaligned});
  EXPECT_EQ(w.err, 0);
  EXPECT_EQ(misaligned.err, EINVAL);
  std::vector<uint8_t> back(data.size());
  Result r;
  store_->Read(0, 4 * kMiB, back, Record(&r));
  Wait({&r});
  EXPECT_EQ(back, data);

  // librbd's write-back cache may write a range back in pieces: no atomic writes behind it.
  store_.reset();
  Shell("rbd -c " + Cluster::conf + " image-meta set rbd/" + image_ +
        " conf_rbd_cache_policy writeback");
  OpenOrDie(12 * kMiB);
  EXPECT_EQ(store_->atomic_limits().max_bytes, 0u);
  Result refused;
  store_->WriteAtomic(0, 0, std::span(data).first(4096), false, Record(&refused));
  Wait({&refused});
  EXPECT_EQ(refused.err, ENOTSUP);
}

TEST_F(RbdStoreTest, GrowsOnline) {
  OpenOrDie(4 * kMiB);
  ASSERT_EQ(store_->Grow(12 * kMiB), 0);
  EXPECT_EQ(store_->size_bytes(), 12 * kMiB);
  EXPECT_NE(Shell("rbd -c " + Cluster::conf + " info rbd/" + image_).find("12 MiB"),
            std::string::npos);
  const auto data = Pattern(4096, 5);
  Result w;
  store_->Write(0, 11 * kMiB, data, true, Record(&w));
  Wait({&w});
  EXPECT_EQ(w.err, 0);
}

TEST_F(RbdStoreTest, ReadOnlyRefusesWrites) {
  OpenOrDie(kMiB);
  store_.reset();
  RbdStoreOptions o = Options(0, false);
  o.read_only = true;
  auto r = RbdStore::Open(o, {&ioc_});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  store_ = std::move(r).value();
  std::vector<uint8_t> data(512, 1);
  Result w, u;
  store_->Write(0, 0, data, false, Record(&w));
  store_->Unmap(0, 0, 512, Record(&u));
  EXPECT_EQ(w.err, EROFS);
  EXPECT_EQ(u.err, EROFS);
}

// A writer of the image that is running, on this host: `rbd bench`, holding the exclusive lock.
class Writer {
 public:
  Writer(const std::string& conf, const std::string& image) {
    pid_ = std::stoi(Shell("rbd -c " + conf +
                           " bench --io-type write --io-size 4K --io-threads 1 "
                           "--io-total 1G rbd/" +
                           image + " >/dev/null 2>&1 & echo $!"));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (Shell("rbd -c " + conf + " lock ls rbd/" + image).find("auto") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~Writer() { Kill(); }
  void Kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      Shell("while kill -0 " + std::to_string(pid_) + " 2>/dev/null; do sleep 0.05; done");
    }
    pid_ = 0;
  }

 private:
  int pid_ = 0;
};

// Regression: after a writer on this host died (a gateway killed with -9 and restarted), the
// first write waited ~30 s for the OSDs to time the dead writer's watch out before librbd could
// take the exclusive lock.
TEST_F(RbdStoreTest, FirstWriteAfterADeadWriterDoesNotWaitForItsLock) {
  OpenOrDie(4 * kMiB);
  store_.reset();
  Writer writer(Cluster::conf, image_);
  ASSERT_NE(Shell("rbd -c " + Cluster::conf + " lock ls rbd/" + image_).find("auto"),
            std::string::npos);
  writer.Kill();
  OpenOrDie(4 * kMiB);
  const auto data = Pattern(4096, 3);
  Result w;
  const auto t0 = std::chrono::steady_clock::now();
  store_->Write(0, 0, data, true, Record(&w));
  Wait({&w});
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(w.err, 0);
  EXPECT_LT(took, std::chrono::seconds(5))
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
}

// A writer that is alive keeps its lock: opening the image breaks nothing.
TEST_F(RbdStoreTest, OpenLeavesALiveWritersLockAlone) {
  OpenOrDie(4 * kMiB);
  store_.reset();
  Writer writer(Cluster::conf, image_);
  const std::string before = Shell("rbd -c " + Cluster::conf + " lock ls rbd/" + image_);
  ASSERT_NE(before.find("auto"), std::string::npos);
  const std::string blocklist = "ceph -c " + Cluster::conf + " osd blocklist ls 2>/dev/null";
  const std::string blocked = Shell(blocklist);
  OpenOrDie(4 * kMiB);
  EXPECT_EQ(Shell("rbd -c " + Cluster::conf + " lock ls rbd/" + image_), before);
  EXPECT_EQ(Shell(blocklist), blocked);
  store_.reset();
  // Dead now: an open breaks its lock, which also drops its watch, so that TearDown's rbd rm does
  // not wait for it.
  writer.Kill();
  OpenOrDie(4 * kMiB);
}

// A LUN whose image is missing at start: NOT READY (ENOTCONN) until the retry opens the image,
// then the image's I/O on the reactor and the capacity it had to change announced.
TEST_F(RbdStoreTest, OfflineStoreComesOnlineWhenTheImageAppears) {
  RbdStoreOptions o = Options(0, false);
  auto first = RbdStore::Open(o, {&ioc_});
  ASSERT_FALSE(first.ok());
  OfflineRbdStore offline(o, {&ioc_}, 512, first.status().message());
  EXPECT_FALSE(offline.online());
  EXPECT_EQ(offline.size_bytes(), 512u);  // one block until the image's size is known
  EXPECT_NE(offline.offline_reason().find("does not exist"), std::string::npos);
  std::vector<uint8_t> buf(4096);
  Result r0;
  offline.Read(0, 0, buf, Record(&r0));
  EXPECT_EQ(r0.err, ENOTCONN);

  std::atomic<int> onlines{0};
  std::atomic<uint64_t> from{0}, to{0};
  offline.Start(
      [&](uint64_t a, uint64_t b) {
        from = a;
        to = b;
        ++onlines;
      },
      std::chrono::milliseconds(20), std::chrono::milliseconds(200));
  Shell("rbd -c " + Cluster::conf + " create rbd/" + image_ + " --size 2M >/dev/null 2>&1");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (onlines == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(onlines, 1);
  EXPECT_TRUE(offline.online());
  EXPECT_EQ(from, 512u);
  EXPECT_EQ(to, 2 * kMiB);
  EXPECT_EQ(offline.size_bytes(), 2 * kMiB);
  EXPECT_EQ(offline.offline_reason(), "");

  const auto data = Pattern(4096, 9);
  Result w, r;
  offline.Write(0, 8192, data, true, Record(&w));
  Wait({&w});
  EXPECT_EQ(w.err, 0);
  offline.Read(0, 8192, buf, Record(&r));
  Wait({&r});
  EXPECT_EQ(r.err, 0);
  EXPECT_EQ(buf, data);
}

// A cluster that is not there: the store stays offline, and destroying it does not wait long.
TEST_F(RbdStoreTest, OfflineStoreStaysOfflineWithoutACluster) {
  const RbdStoreOptions o = DeadClusterOptions("dead-offline.conf");
  std::atomic<int> onlines{0};
  const auto t0 = std::chrono::steady_clock::now();
  {
    OfflineRbdStore offline(o, {&ioc_}, 512, "down");
    offline.Start([&](uint64_t, uint64_t) { ++onlines; }, std::chrono::milliseconds(10),
                  std::chrono::milliseconds(50));
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (offline.offline_reason() == "down" && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_NE(offline.offline_reason().find("127.0.0.1:9"), std::string::npos)
        << offline.offline_reason();
    EXPECT_EQ(offline.size_bytes(), kMiB);
    std::vector<uint8_t> data(512, 1);
    Result w;
    offline.Write(0, 0, data, false, Record(&w));
    EXPECT_EQ(w.err, ENOTCONN);
  }
  EXPECT_EQ(onlines, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

// Destroyed on its reactor (the last task of a removed LUN), an offline store does not wait for
// its retry thread there; the thread ends on its own and shutdown joins it.
TEST_F(RbdStoreTest, OfflineStoreDestroyedOnItsReactorLeavesNoThreadBehind) {
  const RbdStoreOptions o = DeadClusterOptions("dead-retired.conf");
  (void)OfflineRbdStore::JoinRetiredRetries();
  auto offline = std::make_unique<OfflineRbdStore>(o, std::vector<boost::asio::io_context*>{&ioc_},
                                                   512, "down");
  offline->Start(nullptr, std::chrono::milliseconds(1), std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // an attempt is under way
  const auto t0 = std::chrono::steady_clock::now();
  boost::asio::post(ioc_, [&] { offline.reset(); });
  ioc_.restart();
  ioc_.run_one();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500))
      << "the reactor waited for the connect attempt";
  EXPECT_EQ(offline, nullptr);
  EXPECT_EQ(OfflineRbdStore::JoinRetiredRetries(), 1u);
  EXPECT_EQ(OfflineRbdStore::JoinRetiredRetries(), 0u);
}

}  // namespace rbd_store_test
}  // namespace iscsigw::backing
