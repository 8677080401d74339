// Store failures as the initiator sees them: every store errno becomes the sense data SBC-3 asks
// for, a failed flush is never GOOD, and a write that failed on the store makes the next
// SYNCHRONIZE CACHE fail rather than report durable data that is not there. The failures come from
// FaultStore (dataplane/backing/fault_store.h) over a RAM store, with no delay, so that every call
// completes inline.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "dataplane/backing/fault_store.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/scsi/engine.h"
#include "dataplane/scsi/sense.h"
#include "tests/unit/dataplane/scsi/engine_runner.h"

namespace iscsigw::scsi {
namespace store_fault_test {

constexpr uint32_t kBlock = 512;

struct FaultyLun {
  explicit FaultyLun(backing::FaultSpec spec, backing::DeferFn defer = nullptr,
                     LunConfig::PostFn post = nullptr)
      : nexus("iqn.2026-11.io.iscsigw:i,i,0x1", 1) {
    LunConfig cfg;
    cfg.block_size = kBlock;
    cfg.post = std::move(post);
    auto store = std::make_shared<backing::FaultStore>(backing::NewRamStore(1 << 20), spec, defer);
    fault = store.get();
    target.luns.push_back(std::make_shared<Lun>(cfg, store));
    runner = std::make_unique<Runner>(target, nexus);
    runner->Run({0x00});  // take the POWER ON unit attention
  }
  Task& Write10(uint32_t lba) {
    return runner->Run({0x2a, 0, 0, 0, 0, static_cast<uint8_t>(lba), 0, 0, 1, 0}, kBlock,
                       std::vector<uint8_t>(kBlock, 0x5a));
  }
  Task& Read10(uint32_t lba) {
    return runner->Run({0x28, 0, 0, 0, 0, static_cast<uint8_t>(lba), 0, 0, 1, 0}, kBlock);
  }
  Task& SyncCache(bool immed = false) {
    return runner->Run({0x35, static_cast<uint8_t>(immed ? 0x02 : 0), 0, 0, 0, 0, 0, 0, 0, 0});
  }
  TargetInfo target;
  Nexus nexus;
  backing::FaultStore* fault = nullptr;
  std::unique_ptr<Runner> runner;
};

backing::FaultSpec Failing(int err, bool reads, bool writes, bool flushes, uint64_t after = 0) {
  backing::FaultSpec f;
  f.error = err;
  f.reads = reads;
  f.writes = writes;
  f.flushes = flushes;
  f.after_ops = after;
  return f;
}

TEST(StoreFault, EioOnReadIsUnrecoveredReadError) {
  FaultyLun lun(Failing(EIO, true, false, false));
  ExpectSense(lun.Read10(0), SenseKey::kMediumError, Asc::kUnrecoveredReadError);
  EXPECT_EQ(lun.fault->failures(), 1u);
}

TEST(StoreFault, EioOnWriteIsWriteError) {
  FaultyLun lun(Failing(EIO, false, true, false));
  ExpectSense(lun.Write10(0), SenseKey::kMediumError, Asc::kWriteError);
  // The failed write changed nothing.
  EXPECT_EQ(lun.Read10(0).status, ScsiStatus::kGood);
  EXPECT_EQ(lun.runner->DataIn(), std::vector<uint8_t>(kBlock, 0));
}

TEST(StoreFault, EnospcIsSpaceAllocationFailedWriteProtect) {
  // SBC-3 4.7.3.7: a thin LUN out of space fails the write with DATA PROTECT, 27h/07h.
  FaultyLun lun(Failing(ENOSPC, false, true, false));
  ExpectSense(lun.Write10(0), SenseKey::kDataProtect, Asc{0x27, 0x07});
}

TEST(StoreFault, EdquotIsSpaceAllocationFailedWriteProtect) {
  // A Ceph pool at its quota answers -EDQUOT: no space for this LUN, not a medium error.
  FaultyLun lun(Failing(EDQUOT, false, true, false));
  ExpectSense(lun.Write10(0), SenseKey::kDataProtect, Asc{0x27, 0x07});
}

TEST(StoreFault, ErofsIsWriteProtected) {
  FaultyLun lun(Failing(EROFS, false, true, false));
  ExpectSense(lun.Write10(0), SenseKey::kDataProtect, Asc::kWriteProtected);
}

TEST(StoreFault, FailedFlushIsNeverGood) {
  FaultyLun lun(Failing(EIO, false, false, true));
  ExpectSense(lun.SyncCache(), SenseKey::kMediumError, Asc::kWriteError);
}

TEST(StoreFault, FailedWriteIsNotReportedDurableByTheNextSynchronizeCache) {
  // The first write succeeds, the second fails; the flush after it must not say GOOD.
  FaultyLun lun(Failing(EIO, false, true, false, /*after=*/1));
  EXPECT_EQ(lun.Write10(0).status, ScsiStatus::kGood);
  ExpectSense(lun.Write10(1), SenseKey::kMediumError, Asc::kWriteError);
  ExpectSense(lun.SyncCache(), SenseKey::kMediumError, Asc::kWriteError);
  // Reported once, as Linux reports a writeback error to one fsync: later flushes cover later
  // writes only.
  EXPECT_EQ(lun.SyncCache().status, ScsiStatus::kGood);
}

// A store that timed out is retryable, not a failed medium: NOT READY, BECOMING READY (SPC-4
// table 52, 04h/01h), and the next SYNCHRONIZE CACHE has no write error to report.
TEST(StoreFault, TimeoutIsNotReadyBecomingReady) {
  FaultyLun lun(Failing(ETIMEDOUT, true, true, false));
  ExpectSense(lun.Write10(1), SenseKey::kNotReady, Asc{0x04, 0x01});
  ExpectSense(lun.Read10(1), SenseKey::kNotReady, Asc{0x04, 0x01});
  EXPECT_EQ(lun.SyncCache().status, ScsiStatus::kGood);
}

// A fenced store (an rbd client the cluster blocklisted): NOT READY, MANUAL INTERVENTION REQUIRED
// (04h/03h), which initiators do not retry on this path.
TEST(StoreFault, FencedStoreIsNotReadyManualIntervention) {
  FaultyLun lun(Failing(ESHUTDOWN, true, true, true));
  ExpectSense(lun.Write10(1), SenseKey::kNotReady, Asc{0x04, 0x03});
  ExpectSense(lun.Read10(1), SenseKey::kNotReady, Asc{0x04, 0x03});
  ExpectSense(lun.SyncCache(), SenseKey::kNotReady, Asc{0x04, 0x03});
}

TEST(StoreFault, FailedImmedFlushFailsTheNextSynchronizeCache) {
  FaultyLun lun(Failing(EIO, false, false, true, /*after=*/0));
  EXPECT_EQ(lun.SyncCache(/*immed=*/true).status, ScsiStatus::kGood);  // SBC-3 5.22: IMMED
  ExpectSense(lun.SyncCache(), SenseKey::kMediumError, Asc::kWriteError);
}

// An IMMED flush outlives its command: the LUN (and its store) stay until the flush completes,
// also when the LUN is removed meanwhile (a failing flush notes its error on the LUN first).
TEST(StoreFault, ImmedFlushKeepsARemovedLunUntilItCompletes) {
  backing::FaultSpec f = Failing(EIO, false, false, true);
  f.delay = std::chrono::milliseconds(1);
  std::vector<std::function<void()>> held;
  FaultyLun lun(f, [&](unsigned, std::chrono::milliseconds, std::function<void()> fn) {
    held.push_back(std::move(fn));
  });
  EXPECT_EQ(lun.SyncCache(/*immed=*/true).status, ScsiStatus::kGood);
  ASSERT_EQ(held.size(), 1u);
  std::weak_ptr<Lun> weak = lun.target.luns[0];
  lun.runner.reset();
  lun.target.luns.clear();  // the LUN is removed; only the flush in flight refers to it
  ASSERT_FALSE(weak.expired());
  EXPECT_EQ(weak.lock()->store().kind(), "ram");
  held[0]();  // the flush fails now; its LUN goes with its completion
  EXPECT_TRUE(weak.expired());
}

TEST(StoreFault, ImmedFlushHoldIsDroppedInALaterTurnOfTheReactor) {
  backing::FaultSpec f;
  f.delay = std::chrono::milliseconds(1);
  f.reads = f.writes = false;
  std::vector<std::function<void()>> held;
  std::vector<std::pair<unsigned, std::function<void()>>> posted;
  FaultyLun lun(
      f,
      [&](unsigned, std::chrono::milliseconds, std::function<void()> fn) {
        held.push_back(std::move(fn));
      },
      [&](unsigned slot, std::function<void()> fn) { posted.emplace_back(slot, std::move(fn)); });
  EXPECT_EQ(lun.SyncCache(/*immed=*/true).status, ScsiStatus::kGood);
  EXPECT_EQ(lun.SyncCache(/*immed=*/true).status, ScsiStatus::kGood);
  ASSERT_EQ(held.size(), 2u);
  std::weak_ptr<Lun> weak = lun.target.luns[0];
  lun.runner.reset();
  lun.target.luns.clear();
  held[0]();
  EXPECT_TRUE(posted.empty());  // one flush still in flight holds the LUN
  held[1]();
  ASSERT_EQ(posted.size(), 1u);
  EXPECT_EQ(posted[0].first, 0u);  // the reactor of the flushes
  EXPECT_FALSE(weak.expired());    // not inside the store's completion
  posted[0].second = nullptr;
  EXPECT_TRUE(weak.expired());
}

TEST(StoreFault, ErrorsStartAfterTheGivenNumberOfCalls) {
  FaultyLun lun(Failing(EIO, true, true, true, /*after=*/3));
  EXPECT_EQ(lun.Write10(0).status, ScsiStatus::kGood);
  EXPECT_EQ(lun.Read10(0).status, ScsiStatus::kGood);
  EXPECT_EQ(lun.SyncCache().status, ScsiStatus::kGood);
  ExpectSense(lun.Read10(0), SenseKey::kMediumError, Asc::kUnrecoveredReadError);
}

TEST(StoreFault, ZeroProbabilityNeverFails) {
  backing::FaultSpec f = Failing(EIO, true, true, true);
  f.probability = 0.0;
  FaultyLun lun(f);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(lun.Write10(0).status, ScsiStatus::kGood);
  EXPECT_EQ(lun.fault->failures(), 0u);
}

// A delay falls on the calls the spec chooses (kind, after_ops, probability), not on every call:
// how a test makes a few commands outlast the initiator's timeout while the rest run.
TEST(StoreFault, DelayFallsOnlyOnTheChosenCalls) {
  backing::FaultSpec f;
  f.delay = std::chrono::milliseconds(7000);
  f.reads = false;
  f.flushes = false;
  f.after_ops = 1;
  int deferred = 0;
  FaultyLun lun(f, [&](unsigned, std::chrono::milliseconds d, std::function<void()> fn) {
    EXPECT_EQ(d, std::chrono::milliseconds(7000));
    ++deferred;
    fn();  // run at once: the test judges the choice, not the timer
  });
  EXPECT_EQ(lun.Write10(0).status, ScsiStatus::kGood);  // within after_ops
  EXPECT_EQ(lun.Read10(0).status, ScsiStatus::kGood);
  EXPECT_EQ(lun.SyncCache().status, ScsiStatus::kGood);
  EXPECT_EQ(deferred, 0);
  EXPECT_EQ(lun.Write10(1).status, ScsiStatus::kGood);
  EXPECT_EQ(deferred, 1);
  EXPECT_EQ(lun.fault->failures(), 0u);  // delayed, not failed

  f.probability = 0.0;
  f.after_ops = 0;
  int never = 0;
  FaultyLun none(f, [&](unsigned, std::chrono::milliseconds, std::function<void()> fn) {
    ++never;
    fn();
  });
  for (uint32_t i = 0; i < 10; ++i) EXPECT_EQ(none.Write10(i).status, ScsiStatus::kGood);
  EXPECT_EQ(never, 0);
}

// A byte range and a cap make the choice deterministic: the first two writes touching block 3
// are delayed (a command and its retry), nothing else ever is.
TEST(StoreFault, ARangeAndACapChooseExactlyTheseCalls) {
  backing::FaultSpec f;
  f.delay = std::chrono::milliseconds(10000);
  f.reads = false;
  f.offset = 3 * kBlock + 100;  // inside block 3: a call overlapping any of it matches
  f.length = 1;
  f.max_faults = 2;
  std::vector<uint64_t> deferred;
  uint64_t next = 0;
  FaultyLun lun(f, [&](unsigned, std::chrono::milliseconds, std::function<void()> fn) {
    deferred.push_back(next);
    fn();
  });
  for (uint32_t lba : {0u, 2u, 4u, 3u, 5u, 3u, 3u, 3u}) {
    next = lba;
    EXPECT_EQ(lun.Write10(lba).status, ScsiStatus::kGood);
  }
  EXPECT_EQ(lun.SyncCache().status, ScsiStatus::kGood);  // flushes have no range: never chosen
  next = 3;
  EXPECT_EQ(lun.Read10(3).status, ScsiStatus::kGood);  // reads are not chosen
  EXPECT_EQ(deferred, (std::vector<uint64_t>{3, 3}));
}

}  // namespace store_fault_test
}  // namespace iscsigw::scsi
