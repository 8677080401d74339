#include "dataplane/backing/atomic_journal.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/backing/file_store.h"
#include "dataplane/base/unique_fd.h"
#include "tests/unit/dataplane/backing/record_completion.h"

namespace iscsigw::backing {
namespace {

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

class AtomicJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/iscsigw-atomic-journal-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    lun_ = (dir_ / "lun.img").string();
    journal_ = AtomicJournal::JournalPath(lun_);
    old_ = Pattern(kLunBytes, 1);
    std::ofstream(lun_, std::ios::binary)
        .write(reinterpret_cast<const char*>(old_.data()), static_cast<std::streamsize>(kLunBytes));
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<uint8_t> Old(uint64_t offset, size_t len) const {
    return {old_.begin() + static_cast<ptrdiff_t>(offset),
            old_.begin() + static_cast<ptrdiff_t>(offset + len)};
  }

  // The files as a crash would leave them once the record of an atomic write of `data` at
  // `offset` is durable and before any of it is written in place: a Write is held there (an
  // ordinary write in flight keeps it from taking the gate) while both files are copied to
  // `crash_dir`, then let go. Returns the copy of the LUN file.
  std::string CrashAfterRecord(uint64_t offset, const std::vector<uint8_t>& data) {
    const fs::path crash_dir = dir_ / "crash";
    fs::create_directories(crash_dir);
    const std::string lun_copy = (crash_dir / "lun.img").string();
    UniqueFd fd(::open(lun_.c_str(), O_RDWR | O_CLOEXEC));
    EXPECT_TRUE(fd.valid());
    AtomicJournal journal(lun_, kMiB);
    WriteGate gate;
    EXPECT_TRUE(gate.TryEnterShared(0));
    int err = -1;
    std::thread writer([&] { err = journal.Write(fd.get(), offset, data, gate); });
    // The writer waits at the gate once the record is written and synced.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!gate.exclusive_active() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(gate.exclusive_active());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    fs::copy_file(lun_, lun_copy);
    fs::copy_file(journal_, AtomicJournal::JournalPath(lun_copy));
    gate.ExitShared(0);
    writer.join();
    EXPECT_EQ(err, 0);
    // Nothing of it had reached the LUN when the copy was taken.
    EXPECT_EQ(ReadRange(lun_copy, offset, data.size()), Old(offset, data.size()));
    return lun_copy;
  }

  iscsigw::Result<AtomicJournal::Recovery> Recover(const std::string& lun, bool read_only = false) {
    UniqueFd fd(::open(lun.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC));
    EXPECT_TRUE(fd.valid());
    return AtomicJournal::Recover(lun, fd.get(), kLunBytes, read_only);
  }

  fs::path dir_;
  std::string lun_;
  std::string journal_;
  std::vector<uint8_t> old_;
};

TEST_F(AtomicJournalTest, WriteLandsInPlaceAndRetiresItsRecord) {
  const auto data = Pattern(256 * 1024, 7);
  {
    UniqueFd fd(::open(lun_.c_str(), O_RDWR | O_CLOEXEC));
    AtomicJournal journal(lun_, kMiB);
    WriteGate gate;
    ASSERT_EQ(journal.Write(fd.get(), 12288, data, gate), 0);
    EXPECT_EQ(ReadRange(lun_, 12288, data.size()), data);
    EXPECT_EQ(ReadRange(lun_, 0, 12288), Old(0, 12288));
    // The journal stays while the store is open, its record retired: nothing to replay.
    ASSERT_TRUE(fs::exists(journal_));
    EXPECT_GE(fs::file_size(journal_), AtomicJournal::kHeaderBytes + kMiB);
    fs::copy_file(journal_, dir_ / "retired");
    EXPECT_EQ(journal.Write(fd.get(), 0, Pattern(kMiB + 512, 3), gate), EINVAL);  // > max_len
  }
  EXPECT_FALSE(fs::exists(journal_)) << "the journal outlived its store";
  // A retired record found at open (a crash after the write completed) is not replayed.
  fs::copy_file(dir_ / "retired", journal_);
  WriteRange(lun_, 12288, Old(12288, data.size()));
  auto r = Recover(lun_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->found, AtomicJournal::Found::kDiscarded);
  EXPECT_EQ(ReadRange(lun_, 0, kLunBytes), old_);
  EXPECT_FALSE(fs::exists(journal_));
}

TEST_F(AtomicJournalTest, NoJournalIsNothingToRecover) {
  auto r = Recover(lun_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->found, AtomicJournal::Found::kNothing);
}

TEST_F(AtomicJournalTest, ACrashMidWriteIsCompletedAtTheNextOpen) {
  const uint64_t offset = 3 * kMiB + 4096;
  const auto data = Pattern(512 * 1024, 9);
  const std::string lun = CrashAfterRecord(offset, data);
  // The in-place write was cut half way, as a crash during it leaves the range: torn.
  std::vector<uint8_t> torn = Old(offset, data.size());
  std::memcpy(torn.data(), data.data(), data.size() / 2);
  WriteRange(lun, offset, torn);

  auto r = Recover(lun);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->found, AtomicJournal::Found::kReplayed);
  EXPECT_EQ(r->offset, offset);
  EXPECT_EQ(r->len, data.size());
  EXPECT_EQ(ReadRange(lun, offset, data.size()), data) << "the range is still torn";
  EXPECT_EQ(ReadRange(lun, 0, offset), Old(0, offset));
  EXPECT_FALSE(fs::exists(AtomicJournal::JournalPath(lun)));
}

TEST_F(AtomicJournalTest, ARecordNotWhollyDurableIsDiscardedAndTheRangeKeepsItsOldBytes) {
  const auto data = Pattern(64 * 1024, 11);
  const std::string lun = CrashAfterRecord(8192, data);
  // The last bytes of the record never reached the disk: its write had not been acknowledged,
  // nor had anything been written in place.
  const std::string journal = AtomicJournal::JournalPath(lun);
  WriteRange(journal, AtomicJournal::kHeaderBytes + data.size() - 512, std::vector<uint8_t>(512));

  auto r = Recover(lun);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->found, AtomicJournal::Found::kDiscarded);
  EXPECT_EQ(ReadRange(lun, 0, kLunBytes), old_);
  EXPECT_FALSE(fs::exists(journal));
}

TEST_F(AtomicJournalTest, AReadOnlyOpenRefusesAnUnfinishedWriteAndChangesNothing) {
  const auto data = Pattern(4096, 13);
  const std::string lun = CrashAfterRecord(0, data);
  auto r = Recover(lun, /*read_only=*/true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("open the LUN writable once"), std::string::npos)
      << r.status().ToString();
  EXPECT_TRUE(fs::exists(AtomicJournal::JournalPath(lun)));
  EXPECT_EQ(ReadRange(lun, 0, data.size()), Old(0, data.size()));
  // Writable, it completes.
  r = Recover(lun);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->found, AtomicJournal::Found::kReplayed);
  EXPECT_EQ(ReadRange(lun, 0, data.size()), data);
}

TEST_F(AtomicJournalTest, ARecordOutsideTheLunIsAnErrorThatNamesIt) {
  const std::string lun = CrashAfterRecord(kLunBytes - 4096, Pattern(4096, 15));
  UniqueFd fd(::open(lun.c_str(), O_RDWR | O_CLOEXEC));
  auto r = AtomicJournal::Recover(lun, fd.get(), kLunBytes - 4096, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("lies outside the LUN"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find(AtomicJournal::JournalPath(lun)), std::string::npos);
}

// Through the file store: limits, durability, the journal's lifetime, and Open's recovery.
TEST_F(AtomicJournalTest, FileStoreWritesAtomicallyAndOpenCompletesAnInterruptedWrite) {
  boost::asio::io_context ioc;
  auto run_until = [&](const Result& r) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (r.calls == 0 && std::chrono::steady_clock::now() < deadline) {
      ioc.restart();
      ioc.run_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(r.calls, 1);
  };
  const auto data = Pattern(kMiB, 17);
  {
    auto store = FileStore::Open(FileStoreOptions{lun_, 0}, {&ioc});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->atomic_limits().max_bytes, BackingStore::kAtomicWriteMaxBytes);
    EXPECT_EQ((*store)->atomic_limits().align_bytes, 0u);
    Result w;
    (*store)->WriteAtomic(0, 512, data, false, Record(&w));
    run_until(w);
    EXPECT_EQ(w.err, 0);
    EXPECT_EQ(w.thread, std::this_thread::get_id());
    EXPECT_EQ(ReadRange(lun_, 512, data.size()), data);
  }
  EXPECT_FALSE(fs::exists(journal_));
  {
    auto store = FileStore::Open(FileStoreOptions{lun_, 0, /*read_only=*/true}, {&ioc});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    Result w;
    (*store)->WriteAtomic(0, 0, data, false, Record(&w));
    run_until(w);
    EXPECT_EQ(w.err, EROFS);
  }

  const auto later = Pattern(128 * 1024, 19);
  const std::string crashed = CrashAfterRecord(2 * kMiB, later);
  auto store = FileStore::Open(FileStoreOptions{crashed, 0}, {&ioc});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(ReadRange(crashed, 2 * kMiB, later.size()), later);
  EXPECT_FALSE(fs::exists(AtomicJournal::JournalPath(crashed)));
}

}  // namespace
}  // namespace iscsigw::backing
