#include "dataplane/backing/file/atomic_journal.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/unique_fd.h"
#include "dataplane/backing/file/file_store.h"
#include "tests/unit/dataplane/backing/record_completion.h"

namespace iscsigw::backing {
namespace atomic_journal_test {

namespace fs = std::filesystem;

constexpr uint64_t kLunBytes = 4 * kMiB;

std::vector<uint8_t> ReadRange(const std::string& path, uint64_t offset, size_t len) {
  std::vector<uint8_t> out(len);
  std::ifstream f(path, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(len));
  return out;
}

void WriteRange(const std::string& path, uint64_t offset, const std::vector<uint8_t>& data) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  ASSERT_EQ(::pwrite(fd.get(), data.data(), data.size(), static_cast<off_t>(offset)),
            static_cast<ssize_t>(data.size()));
}

// The journal files beside lun_path.
std::vector<std::string> JournalsOf(const std::string& lun_path) {
  std::vector<std::string> out;
  const fs::path lun(lun_path);
  for (const auto& e : fs::directory_iterator(lun.parent_path())) {
    if (AtomicJournal::IsJournalOf(e.path().filename().string(), lun.filename().string())) {
      out.push_back(e.path().string());
    }
  }
  return out;
}

// A journal write and its outcome.
struct Pending {
  AtomicJournal::Request request;
  std::atomic<int> err{-1};
  std::atomic<bool> done{false};

  Pending(uint64_t offset, std::span<const uint8_t> data) {
    request.offset = offset;
    request.data = data;
    request.ctx = this;
    request.finish = [](AtomicJournal::Request* r, int e) {
      auto* p = static_cast<Pending*>(r->ctx);
      p->err = e;
      p->done = true;
    };
  }
  int Wait() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(done);
    return err;
  }
};

bool WaitFor(const WriteGate& gate) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!gate.exclusive_active() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return gate.exclusive_active();
}

class AtomicJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iscsigw-atomic-journal-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    lun_ = (dir_ / "lun.img").string();
    old_ = Pattern(kLunBytes, 1);
    std::ofstream(lun_, std::ios::binary)
        .write(reinterpret_cast<const char*>(old_.data()), static_cast<std::streamsize>(kLunBytes));
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<uint8_t> Old(uint64_t offset, size_t len) const {
    return {old_.begin() + static_cast<ptrdiff_t>(offset),
            old_.begin() + static_cast<ptrdiff_t>(offset + len)};
  }

  // The LUN file and its journal as a crash would leave them once the record of an atomic write
  // of `data` at `offset` is durable and before any of it is written in place: the write is held
  // there (an ordinary write in flight keeps it from taking the gate) while its journal is copied,
  // then let go; afterwards the range gets its old bytes back and the journal copy its place.
  void CrashAfterRecord(uint64_t offset, const std::vector<uint8_t>& data) {
    const std::string at_crash = (dir_ / "journal-at-crash").string();
    std::string journal_path;
    {
      UniqueFd fd(::open(lun_.c_str(), O_RDWR | O_CLOEXEC));
      EXPECT_TRUE(fd.valid());
      WriteGate writes, reads;
      AtomicJournal journal(lun_, fd.get(), {writes, reads}, kMiB);
      EXPECT_TRUE(writes.TryEnterShared(0));
      Pending p(offset, data);
      journal.Submit(&p.request);
      EXPECT_TRUE(WaitFor(writes)) << "the write never reached its place";
      EXPECT_EQ(ReadRange(lun_, offset, data.size()), Old(offset, data.size()));
      journal_path = journal.path();
      fs::copy_file(journal_path, at_crash);
      writes.ExitShared(0);
      EXPECT_EQ(p.Wait(), 0);
      EXPECT_EQ(ReadRange(lun_, offset, data.size()), data);
    }
    EXPECT_TRUE(JournalsOf(lun_).empty());
    WriteRange(lun_, offset, Old(offset, data.size()));
    fs::rename(at_crash, journal_path);
  }

  // Recover finds nothing to replay: the LUN keeps its old bytes and no journal is left.
  void ExpectDiscarded() {
    auto r = Recover();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->found, AtomicJournal::Found::kDiscarded);
    EXPECT_EQ(ReadRange(lun_, 0, kLunBytes), old_);
    EXPECT_TRUE(JournalsOf(lun_).empty());
  }

  iscsigw::Result<AtomicJournal::Recovery> Recover(bool read_only = false) {
    UniqueFd fd(::open(lun_.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC));
    EXPECT_TRUE(fd.valid());
    return AtomicJournal::Recover(lun_, fd.get(), kLunBytes, read_only);
  }

  fs::path dir_;
  std::string lun_;
  std::vector<uint8_t> old_;
};

TEST_F(AtomicJournalTest, WriteLandsInPlaceAndRetiresItsRecord) {
  const auto data = Pattern(256 * 1024, 7);
  std::string journal_path;
  {
    UniqueFd fd(::open(lun_.c_str(), O_RDWR | O_CLOEXEC));
    WriteGate writes, reads;
    AtomicJournal journal(lun_, fd.get(), {writes, reads}, kMiB);
    Pending p(12288, data);
    journal.Submit(&p.request);
    ASSERT_EQ(p.Wait(), 0);
    EXPECT_EQ(ReadRange(lun_, 12288, data.size()), data);
    EXPECT_EQ(ReadRange(lun_, 0, 12288), Old(0, 12288));
    // The journal stays while its store is open, its record retired: nothing to replay.
    journal_path = journal.path();
    ASSERT_EQ(JournalsOf(lun_), std::vector<std::string>{journal_path});
    EXPECT_GE(fs::file_size(journal_path), AtomicJournal::kHeaderBytes + kMiB);
    fs::copy_file(journal_path, dir_ / "retired");
    const auto too_long = Pattern(kMiB + 512, 3);
    Pending refused(0, too_long);
    journal.Submit(&refused.request);
    EXPECT_EQ(refused.Wait(), EINVAL);
    // A live store's journal is not another open's to touch.
    auto r = Recover();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->found, AtomicJournal::Found::kNothing);
    EXPECT_TRUE(fs::exists(journal_path));
  }
  EXPECT_TRUE(JournalsOf(lun_).empty()) << "the journal outlived its store";
  // A retired record found at open (a crash after the write completed) is not replayed.
  fs::copy_file(dir_ / "retired", journal_path);
  WriteRange(lun_, 12288, Old(12288, data.size()));
  ExpectDiscarded();
}

TEST_F(AtomicJournalTest, NoJournalIsNothingToRecover) {
  auto r = Recover();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->found, AtomicJournal::Found::kNothing);
}

TEST_F(AtomicJournalTest, ACrashMidWriteIsCompletedAtTheNextOpen) {
  const uint64_t offset = 3 * kMiB + 4096;
  const auto data = Pattern(512 * 1024, 9);
  CrashAfterRecord(offset, data);
  // The in-place write was cut half way, as a crash during it leaves the range: torn.
  std::vector<uint8_t> torn = Old(offset, data.size());
  std::memcpy(torn.data(), data.data(), data.size() / 2);
  WriteRange(lun_, offset, torn);

  auto r = Recover();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->found, AtomicJournal::Found::kReplayed);
  EXPECT_EQ(r->replayed, 1);
  EXPECT_EQ(r->offset, offset);
  EXPECT_EQ(r->len, data.size());
  EXPECT_EQ(ReadRange(lun_, offset, data.size()), data) << "the range is still torn";
  EXPECT_EQ(ReadRange(lun_, 0, offset), Old(0, offset));
  EXPECT_TRUE(JournalsOf(lun_).empty());
}

TEST_F(AtomicJournalTest, ARecordNotWhollyDurableIsDiscardedAndTheRangeKeepsItsOldBytes) {
  const auto data = Pattern(64 * 1024, 11);
  CrashAfterRecord(8192, data);
  // The last bytes of the record never reached the disk: its write had not been acknowledged,
  // nor had anything been written in place.
  const std::string journal = JournalsOf(lun_).at(0);
  WriteRange(journal, AtomicJournal::kHeaderBytes + data.size() - 512, std::vector<uint8_t>(512));

  ExpectDiscarded();
}

TEST_F(AtomicJournalTest, ARecordOfAnotherFileOfTheSameNameIsDiscarded) {
  const auto data = Pattern(64 * 1024, 23);
  CrashAfterRecord(0, data);
  // The LUN was removed and a new one made at its path before any open: the journal left beside
  // it is the old file's, and none of its data may reach the new one.
  const std::string journal = JournalsOf(lun_).at(0);
  const std::string kept = (dir_ / "kept").string();
  fs::rename(journal, kept);
  fs::remove(lun_);
  std::ofstream(lun_, std::ios::binary)
      .write(reinterpret_cast<const char*>(old_.data()), static_cast<std::streamsize>(kLunBytes));
  fs::rename(kept, journal);

  ExpectDiscarded();
}

TEST_F(AtomicJournalTest, AReadOnlyOpenRefusesAnUnfinishedWriteAndChangesNothing) {
  const auto data = Pattern(4096, 13);
  CrashAfterRecord(0, data);
  auto r = Recover(/*read_only=*/true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("open the LUN writable once"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(JournalsOf(lun_).size(), 1u);
  EXPECT_EQ(ReadRange(lun_, 0, data.size()), Old(0, data.size()));
  // Writable, it completes.
  r = Recover();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->found, AtomicJournal::Found::kReplayed);
  EXPECT_EQ(ReadRange(lun_, 0, data.size()), data);
}

TEST_F(AtomicJournalTest, ARecordOutsideTheLunIsAnErrorThatNamesIt) {
  CrashAfterRecord(kLunBytes - 4096, Pattern(4096, 15));
  const std::string journal = JournalsOf(lun_).at(0);
  UniqueFd fd(::open(lun_.c_str(), O_RDWR | O_CLOEXEC));
  auto r = AtomicJournal::Recover(lun_, fd.get(), kLunBytes - 4096, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("lies outside the LUN"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find(journal), std::string::npos);
}

// The directory `dir` made immutable (FS_IMMUTABLE_FL: nothing in it can be created, renamed or
// removed, by root either) while the guard lives.
class ImmutableDir {
 public:
  explicit ImmutableDir(const fs::path& dir)
      : fd_(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    EXPECT_TRUE(fd_.valid());
    set_ = Set(true);
  }
  ~ImmutableDir() {
    if (set_ && !Set(false)) ADD_FAILURE() << "left immutable: chattr -i it";
  }
  ImmutableDir(const ImmutableDir&) = delete;
  ImmutableDir& operator=(const ImmutableDir&) = delete;
  bool set() const { return set_; }

 private:
  bool Set(bool on) {
    int flags = 0;
    if (::ioctl(fd_.get(), FS_IOC_GETFLAGS, &flags) != 0) return false;
    flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
    return ::ioctl(fd_.get(), FS_IOC_SETFLAGS, &flags) == 0;
  }
  UniqueFd fd_;
  bool set_ = false;
};

// A journal write held at its gate (the caller holds `gate` shared), let go at the latest when this
// goes out of scope: the journal's thread must never wait on a gate that is gone.
struct HeldWrite {
  WriteGate& gate;
  Pending& write;
  bool held = true;
  int LetGo() {
    if (std::exchange(held, false)) gate.ExitShared(0);
    return write.Wait();
  }
  ~HeldWrite() {
    if (held) LetGo();
  }
};

// This process's descriptors of `path` open read-write through the page cache (a store's own, its
// slots' and its journal's, or a journal file's).
std::vector<int> ReadWriteFdsOf(const std::string& path) {
  std::vector<int> fds;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = fs::read_symlink(e.path(), ec);
    if (ec || target != fs::path(path)) continue;
    const int fd = std::stoi(e.path().filename().string());
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0 && (flags & O_ACCMODE) == O_RDWR && (flags & O_DIRECT) == 0) fds.push_back(fd);
  }
  return fds;
}

TEST_F(AtomicJournalTest, ARecordThatCannotBeRetiredFencesTheJournalUntilTheNextOpen) {
  // Written in place and durable, its record neither zeroed nor removed (the journal's descriptor
  // fails its writes and its directory refuses the unlink): the record is live, and the next
  // open will write it again. Nothing may be written to the LUN before then, or that replay would
  // undo it (atomic_journal.h).
  const auto data = Pattern(64 * 1024, 31);
  std::string journal_path;
  {
    UniqueFd fd(::open(lun_.c_str(), O_RDWR | O_CLOEXEC));
    WriteGate writes, reads;
    AtomicJournal journal(lun_, fd.get(), {writes, reads}, kMiB);
    Pending first(0, Pattern(4096, 30));
    journal.Submit(&first.request);
    ASSERT_EQ(first.Wait(), 0);  // makes the journal
    journal_path = journal.path();
    // The next write is held at the gate, its record durable, while both faults are set up.
    ASSERT_TRUE(writes.TryEnterShared(0));
    Pending p(8192, data);
    journal.Submit(&p.request);
    HeldWrite held{writes, p};
    ASSERT_TRUE(WaitFor(writes)) << "the write never reached its place";
    const std::vector<int> journal_fds = ReadWriteFdsOf(journal_path);
    ASSERT_EQ(journal_fds.size(), 1u);
    const int journal_fd = journal_fds[0];
    UniqueFd ro(::open(journal_path.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_EQ(::dup2(ro.get(), journal_fd), journal_fd);
    {
      ImmutableDir frozen(dir_);
      ASSERT_TRUE(frozen.set()) << "cannot make " << dir_
                                << " immutable (needs root, on ext4, xfs or tmpfs)";
      EXPECT_NE(held.LetGo(), 0);
      EXPECT_EQ(ReadRange(lun_, 8192, data.size()), data);
      EXPECT_TRUE(journal.record_left()) << "a live record, and the journal still serving";
      Pending later(8192, Pattern(4096, 32));
      journal.Submit(&later.request);
      EXPECT_EQ(later.Wait(), EIO);
    }
  }
  // The record stayed: the next open writes it in place, again, and removes the journal.
  ASSERT_EQ(JournalsOf(lun_), std::vector<std::string>{journal_path});
  auto r = Recover();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->found, AtomicJournal::Found::kReplayed);
  EXPECT_EQ(ReadRange(lun_, 8192, data.size()), data);
  EXPECT_TRUE(JournalsOf(lun_).empty());
}

// Through the file store: limits, durability, the journal's lifetime, Open's recovery, and the
// store fenced when a write fails in place.
class FileStoreAtomicTest : public AtomicJournalTest {
 protected:
  void RunUntil(const Result& r) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (r.calls == 0 && std::chrono::steady_clock::now() < deadline) {
      ioc_.restart();
      ioc_.run_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(r.calls, 1);
  }
  boost::asio::io_context ioc_;
};

TEST_F(FileStoreAtomicTest, WritesAtomicallyAndOpenCompletesAnInterruptedWrite) {
  const auto data = Pattern(kMiB, 17);
  {
    auto store = FileStore::Open(FileStoreOptions{lun_, 0}, {&ioc_});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->atomic_limits().max_bytes, BackingStore::kAtomicWriteMaxBytes);
    EXPECT_EQ((*store)->atomic_limits().align_bytes, 0u);
    Result w;
    (*store)->WriteAtomic(0, 512, data, false, Record(&w));
    RunUntil(w);
    EXPECT_EQ(w.err, 0);
    EXPECT_EQ(w.thread, std::this_thread::get_id());
    EXPECT_EQ(ReadRange(lun_, 512, data.size()), data);
    EXPECT_EQ((*store)->in_flight(0), 0u);
  }
  EXPECT_TRUE(JournalsOf(lun_).empty());
  {
    auto store = FileStore::Open(FileStoreOptions{lun_, 0, /*read_only=*/true}, {&ioc_});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    Result w;
    (*store)->WriteAtomic(0, 0, data, false, Record(&w));
    RunUntil(w);
    EXPECT_EQ(w.err, EROFS);
  }

  const auto later = Pattern(128 * 1024, 19);
  CrashAfterRecord(2 * kMiB, later);
  auto store = FileStore::Open(FileStoreOptions{lun_, 0}, {&ioc_});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(ReadRange(lun_, 2 * kMiB, later.size()), later);
  EXPECT_TRUE(JournalsOf(lun_).empty());
}

TEST_F(FileStoreAtomicTest, AWriteThatFailsInPlaceFencesTheStoreUntilTheNextOpen) {
  const auto data = Pattern(64 * 1024, 29);
  {
    auto opened = FileStore::Open(FileStoreOptions{lun_, 0}, {&ioc_});
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    FileStore& store = **opened;
    // An ordinary read in flight holds the write up before it goes in place (after its record
    // is durable); meanwhile the store's descriptors are swapped for read-only ones, so that the
    // write in place fails as a failing disk would make it.
    Result first;
    store.WriteAtomic(0, 0, std::span(data).first(4096), false, Record(&first));
    RunUntil(first);  // makes the journal
    ASSERT_EQ(first.err, 0);
    const std::vector<int> fds = ReadWriteFdsOf(lun_);
    ASSERT_FALSE(fds.empty());
    std::vector<uint8_t> buf(4096);
    Result read;
    store.Read(0, 0, buf, Record(&read));  // submitted, not yet reaped: holds the read gate
    Result w;
    store.WriteAtomic(0, 8192, data, false, Record(&w));
    // Its record is being written once the journal's header holds a record again.
    const std::string journal = JournalsOf(lun_).at(0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ReadRange(journal, 0, 8) !=
               std::vector<uint8_t>{'I', 'G', 'W', 'A', 'T', 'O', 'M', '2'} &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    UniqueFd ro(::open(lun_.c_str(), O_RDONLY | O_CLOEXEC));
    for (const int fd : fds) ASSERT_EQ(::dup2(ro.get(), fd), fd);
    RunUntil(read);
    RunUntil(w);
    EXPECT_NE(w.err, 0);
    EXPECT_EQ(store.ready(), ESHUTDOWN);
    EXPECT_NE(store.offline_reason().find("restart the gateway"), std::string::npos);
    EXPECT_EQ(ReadRange(lun_, 8192, data.size()), Old(8192, data.size()));
  }
  // The record stayed: the next open writes it in place.
  ASSERT_EQ(JournalsOf(lun_).size(), 1u);
  auto reopened = FileStore::Open(FileStoreOptions{lun_, 0}, {&ioc_});
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ((*reopened)->ready(), 0);
  EXPECT_EQ(ReadRange(lun_, 8192, data.size()), data);
  EXPECT_TRUE(JournalsOf(lun_).empty());
}

}  // namespace atomic_journal_test
}  // namespace iscsigw::backing
