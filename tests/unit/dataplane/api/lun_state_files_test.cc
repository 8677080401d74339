// LunStateFiles: atomic replacement of the per-LUN state files, and a persistent reservation made
// with APTPL=1 through the SCSI engine that survives a simulated restart (new files object, new
// Lun) on real files.
#include "dataplane/api/lun_state_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "base/endian.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/scsi/engine.h"

namespace iscsigw::api {
namespace lun_state_files_test {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class LunStateFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lun-state-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Completions run inline on the writer thread: the test waits for them.
  std::unique_ptr<LunStateFiles> Files() {
    return std::make_unique<LunStateFiles>(dir_ + "/lun-state",
                                           [](unsigned, std::function<void()> fn) { fn(); });
  }

  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    int err = -1;
    static void Done(void* ctx, int err) {
      auto* w = static_cast<Waiter*>(ctx);
      std::lock_guard lock(w->mu);
      w->done = true;
      w->err = err;
      w->cv.notify_all();
    }
    int Wait() {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return done; });
      return err;
    }
  };

  std::string dir_;
};

TEST_F(LunStateFilesTest, WritesReplacesAndRemovesAtomically) {
  const std::string path = dir_ + "/f";
  ASSERT_EQ(LunStateFiles::WriteAtomically(path, "one"), 0);
  EXPECT_EQ(ReadFile(path), "one");
  ASSERT_EQ(LunStateFiles::WriteAtomically(path, "two, longer"), 0);
  EXPECT_EQ(ReadFile(path), "two, longer");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(LunStateFiles::WriteAtomically(path, ""), 0);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(LunStateFiles::WriteAtomically(path, ""), 0);  // removing nothing is fine
  EXPECT_EQ(LunStateFiles::WriteAtomically(dir_ + "/missing/f", "x"), ENOENT);
}

TEST_F(LunStateFilesTest, NewerSeqWinsAndLoadReadsItBack) {
  auto files = Files();
  auto store = files->ForLun("iqn.2026-11.io.iscsigw:t", 3);
  EXPECT_EQ(store->Load(), "");
  Waiter w1, w2, w3;
  store->Save(2, "second", 0, backing::IoCompletion{Waiter::Done, &w2});
  store->Save(1, "first", 0, backing::IoCompletion{Waiter::Done, &w1});  // older: not written
  EXPECT_EQ(w2.Wait(), 0);
  EXPECT_EQ(w1.Wait(), 0);
  const std::string path = dir_ + "/lun-state/iqn.2026-11.io.iscsigw:t.lun3";
  EXPECT_EQ(ReadFile(path), "second");
  files->Stop();

  auto again = Files();
  auto reloaded = again->ForLun("iqn.2026-11.io.iscsigw:t", 3);
  EXPECT_EQ(reloaded->Load(), "second");
  reloaded->Save(1, "", 0, backing::IoCompletion{Waiter::Done, &w3});  // seqs restart per Load
  EXPECT_EQ(w3.Wait(), 0);
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(LunStateFilesTest, RemoveDeletesTheFileAndDropsLaterSaves) {
  auto files = Files();
  auto store = files->ForLun("iqn.2026-11.io.iscsigw:t", 4);
  const std::string path = dir_ + "/lun-state/iqn.2026-11.io.iscsigw:t.lun4";
  Waiter w1, w2;
  store->Save(1, "reservations", 0, backing::IoCompletion{Waiter::Done, &w1});
  files->Remove(store);  // queued after the save: the file is written, then removed
  store->Save(2, "late", 0, backing::IoCompletion{Waiter::Done, &w2});
  EXPECT_EQ(w1.Wait(), 0);
  EXPECT_EQ(w2.Wait(), 0);
  files->Stop();
  EXPECT_FALSE(fs::exists(path));
  // A new LUN under the same id starts empty.
  auto again = Files();
  EXPECT_EQ(again->ForLun("iqn.2026-11.io.iscsigw:t", 4)->Load(), "");
}

// One command through the engine on `lun`, waiting for a completion that may come from the writer
// thread.
struct Command {
  scsi::Task task;
  std::vector<uint8_t> buf = std::vector<uint8_t>(4096);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;

  void Run(const scsi::TargetInfo& target, scsi::Nexus& nexus, std::initializer_list<uint8_t> cdb,
           const std::vector<uint8_t>& out = {}) {
    task = scsi::Task{};
    std::copy(cdb.begin(), cdb.end(), task.cdb.begin());
    task.cdb_len = 16;
    task.nexus = &nexus;
    task.buf = buf.data();
    task.buf_cap = static_cast<uint32_t>(buf.size());
    task.expected_length = 4096;
    if (!out.empty()) std::memcpy(buf.data(), out.data(), out.size());
    task.data_out_len = static_cast<uint32_t>(out.size());
    done = false;
    task.complete = [](scsi::Task*, void* ctx) {
      auto* c = static_cast<Command*>(ctx);
      std::lock_guard lock(c->mu);
      c->done = true;
      c->cv.notify_all();
    };
    task.complete_ctx = this;
    scsi::Engine::Execute(target, task);
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
  }
};

scsi::TargetInfo MakeTarget(LunStateFiles& files) {
  scsi::TargetInfo t;
  t.name = "iqn.2026-11.io.iscsigw:t";
  t.relative_port_id = 1;
  scsi::LunConfig c;
  c.id = 0;
  c.block_size = 512;
  c.state_store = files.ForLun(t.name, 0);
  t.luns.push_back(std::make_shared<scsi::Lun>(c, backing::NewRamStore(1 << 20)));
  return t;
}

std::vector<uint8_t> ProutList(uint64_t rk, uint64_t sark, uint8_t flags) {
  std::vector<uint8_t> p(24, 0);
  StoreBe64(p.data(), rk);
  StoreBe64(p.data() + 8, sark);
  p[20] = flags;
  return p;
}

TEST_F(LunStateFilesTest, AptplReservationSurvivesRestartOnDisk) {
  scsi::Nexus a("iqn.1994-05.com.example:a,i,0x000000000001", 1);
  scsi::Nexus b("iqn.1994-05.com.example:b,i,0x000000000002", 1);
  {
    auto files = Files();
    auto target = MakeTarget(*files);
    Command c;
    c.Run(target, a, {0x00, 0, 0, 0, 0, 0});  // power-on unit attention
    c.Run(target, a, {0x5F, 0x00, 0, 0, 0, 0, 0, 0, 24, 0}, ProutList(0, 0xA1, 0x01));
    ASSERT_EQ(c.task.status, scsi::ScsiStatus::kGood);
    c.Run(target, a, {0x5F, 0x01, 0x03, 0, 0, 0, 0, 0, 24, 0}, ProutList(0xA1, 0, 0));
    ASSERT_EQ(c.task.status, scsi::ScsiStatus::kGood);
    files->Stop();
  }
  const std::string file = dir_ + "/lun-state/iqn.2026-11.io.iscsigw:t.lun0";
  EXPECT_NE(ReadFile(file).find("pr res type=3"), std::string::npos);

  auto files = Files();  // the restart
  auto target = MakeTarget(*files);
  Command c;
  c.Run(target, b, {0x00, 0, 0, 0, 0, 0});
  c.Run(target, b, {0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0});  // Exclusive Access held by a
  EXPECT_EQ(c.task.status, scsi::ScsiStatus::kReservationConflict);
  c.Run(target, b, {0x5E, 0x01, 0, 0, 0, 0, 0, 0, 64, 0});  // READ RESERVATION
  ASSERT_EQ(c.task.status, scsi::ScsiStatus::kGood);
  ASSERT_EQ(c.task.in_len, 24u);
  EXPECT_EQ(LoadBe64(c.task.in_segs[0].data + 8), 0xA1u);
  EXPECT_EQ(c.task.in_segs[0].data[21], 0x03);
}

}  // namespace lun_state_files_test
}  // namespace iscsigw::api
