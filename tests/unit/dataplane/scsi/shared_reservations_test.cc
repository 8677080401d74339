// Persistent reservations of a LUN that several gateways export (LunConfig::shared_state): each
// gateway is a TargetInfo with its own relative port and its own Lun object over one store, and
// the gateways share a FakeObject the way RADOS shares one object among them (versions,
// compare-and-swap, notify to every other watcher).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/endian.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/backing/shared_object.h"
#include "dataplane/scsi/engine.h"
#include "dataplane/scsi/sense.h"
#include "tests/common/fake_shared_object.h"
#include "tests/unit/dataplane/scsi/engine_runner.h"

namespace iscsigw::scsi {
namespace shared_reservations_test {

using test::FakeCluster;
using test::FakeObject;

constexpr uint32_t kBlock = 512;

// Records the aborts a gateway's transport is asked for.
class FakeAborter final : public TaskAborter {
 public:
  void AbortTasks(uint64_t, const std::vector<NexusMatch>& who, const Nexus*,
                  std::shared_ptr<void> until_ended) override {
    std::lock_guard lock(mu);
    for (const auto& m : who) aborted.push_back(m.any_initiator ? "*" : m.initiator);
    if (keep_holds) holds.push_back(std::move(until_ended));
  }
  void ClearTaskSet(Lun&, std::shared_ptr<void> until_ended) override {
    std::lock_guard lock(mu);
    aborted.push_back("clear");
    if (keep_holds) holds.push_back(std::move(until_ended));
  }
  std::mutex mu;                     // the test's thread and the one running a command
  std::vector<std::string> aborted;  // "*": every nexus; "clear": a CLEAR TASK SET
  // With keep_holds the aborted tasks are still in the store until the test clears holds.
  bool keep_holds = false;
  std::vector<std::shared_ptr<void>> holds;
};

// One gateway: its target port (relative port = group = gateway id), its Lun over the shared
// store, its view of the object.
struct Gateway {
  Gateway(uint16_t id, FakeCluster& cluster, std::shared_ptr<backing::BackingStore> store)
      : object(std::make_shared<FakeObject>(cluster)), aborter(std::make_shared<FakeAborter>()) {
    target.name = "iqn.2026-11.io.iscsigw:shared";
    target.tpgt = target.relative_port_id = target.target_port_group = id;
    LunConfig c;
    c.id = 0;
    c.block_size = kBlock;
    c.serial = "shared";
    c.naa_id = 0x6001405000000001ull;
    c.shared_state = object;
    c.task_aborter = aborter;
    target.luns.push_back(std::make_shared<Lun>(c, std::move(store)));
  }
  Lun& lun() { return *target.luns[0]; }
  std::shared_ptr<FakeObject> object;
  std::shared_ptr<FakeAborter> aborter;
  TargetInfo target;
};

class SharedReservationsTest : public ::testing::Test {
 protected:
  SharedReservationsTest()
      : store_(std::shared_ptr<backing::BackingStore>(backing::NewRamStore(256 * kBlock))),
        gw1_(1, cluster_, store_),
        gw2_(2, cluster_, store_),
        a_("iqn.2026-11.io.example:a,i,0x400000000001", 1),
        b_("iqn.2026-11.io.example:b,i,0x400000000002", 2),
        ra_(gw1_.target, a_),
        rb_(gw2_.target, b_) {
    for (Runner* r : {&ra_, &rb_}) {
      r->Run({0x00});  // the power-on unit attention
      EXPECT_EQ(r->task().status, ScsiStatus::kCheckCondition);
    }
  }

  // Runs `cdb` through `r`; the result is in task_.
  void Run(Runner& r, std::initializer_list<uint8_t> cdb, const std::vector<uint8_t>& out = {}) {
    task_ = &r.RunCdb(std::span<const uint8_t>(cdb.begin(), cdb.size()),
                      out.empty() ? 4096 : static_cast<uint32_t>(out.size()), out);
    data_ = r.DataIn();
  }
  // PERSISTENT RESERVE OUT with a basic parameter list.
  void Prout(Runner& r, uint8_t sa, uint8_t type, uint64_t key, uint64_t sa_key,
             bool aptpl = false) {
    std::vector<uint8_t> p(24, 0);
    StoreBe64(p.data(), key);
    StoreBe64(p.data() + 8, sa_key);
    p[20] = aptpl ? 0x01 : 0x00;
    Run(r, {0x5F, sa, type, 0, 0, 0, 0, 0, 24, 0}, p);
  }
  // a_ registers key A1 through gateway 1 and reserves with `type`.
  void ReserveThroughGateway1(uint8_t type) {
    Prout(ra_, 0x00, 0, 0, 0xA1);
    ExpectGood();
    Prout(ra_, 0x01, type, 0xA1, 0);
    ExpectGood();
  }
  // A third gateway that starts now, and nexus c_ logged in through it (its power-on unit
  // attention taken).
  void StartGateway3() {
    gw3_ = std::make_unique<Gateway>(3, cluster_, store_);
    rc_ = std::make_unique<Runner>(gw3_->target, c_);
    Run(*rc_, {0x00});
    ExpectSense(SenseKey::kUnitAttention, Asc::kPowerOnReset);
  }
  void ExpectGood() {
    EXPECT_EQ(task_->status, ScsiStatus::kGood);
    EXPECT_EQ(task_->sense_len, 0);
  }
  void ExpectConflict() { EXPECT_EQ(task_->status, ScsiStatus::kReservationConflict); }
  void ExpectSense(SenseKey key, Asc asc) {
    ASSERT_EQ(task_->status, ScsiStatus::kCheckCondition);
    EXPECT_EQ(task_->sense[2] & 0x0F, static_cast<uint8_t>(key));
    EXPECT_EQ(task_->sense[12], asc.asc);
    EXPECT_EQ(task_->sense[13], asc.ascq);
  }
  // NOT READY, BECOMING READY (04h/01h), which initiators retry.
  void ExpectNotReady() { ExpectSense(SenseKey::kNotReady, Asc{0x04, 0x01}); }
  void Write(Runner& r) { Run(r, {0x2A, 0, 0, 0, 0, 8, 0, 0, 1, 0}, std::vector<uint8_t>(kBlock)); }
  void Read(Runner& r) { Run(r, {0x28, 0, 0, 0, 0, 8, 0, 0, 1, 0}); }
  std::vector<uint64_t> Keys(Runner& r) {
    Run(r, {0x5E, 0x00, 0, 0, 0, 0, 0, 0x10, 0x00, 0});
    std::vector<uint64_t> keys;
    for (size_t i = 8; i + 8 <= data_.size(); i += 8) keys.push_back(LoadBe64(data_.data() + i));
    return keys;
  }

  FakeCluster cluster_;
  std::shared_ptr<backing::BackingStore> store_;
  Gateway gw1_, gw2_;
  Nexus a_, b_;     // a_ logs in through gateway 1, b_ through gateway 2
  Runner ra_, rb_;  // commands of a_ and of b_
  Nexus c_{"iqn.2026-11.io.example:c,i,0x400000000003", 3};
  std::unique_ptr<Gateway> gw3_;  // StartGateway3
  std::unique_ptr<Runner> rc_;    // commands of c_ through gateway 3
  Task* task_ = nullptr;
  std::vector<uint8_t> data_;  // the last command's Data-In
};

// A WRITE EXCLUSIVE reservation taken through gateway 1 fences writes through gateway 2 as soon as
// the command completes; reads pass; both gateways report the same keys, holder and generation.
TEST_F(SharedReservationsTest, AReservationThroughOneGatewayFencesWritesThroughTheOther) {
  Write(rb_);
  ExpectGood();
  ReserveThroughGateway1(0x01);  // REGISTER, RESERVE WRITE EXCLUSIVE
  EXPECT_EQ(cluster_.writes, 2);
  EXPECT_EQ(gw1_.object->notifies, 2);

  Write(rb_);
  ExpectConflict();
  Read(rb_);
  ExpectGood();
  Write(ra_);
  ExpectGood();
  EXPECT_EQ(Keys(rb_), std::vector<uint64_t>{0xA1});
  Run(rb_, {0x5E, 0x01, 0, 0, 0, 0, 0, 0x10, 0x00, 0});  // READ RESERVATION
  ExpectGood();
  EXPECT_EQ(LoadBe32(data_.data()), 1u);  // PRgeneration: one registration
  EXPECT_EQ(LoadBe64(data_.data() + 8), 0xA1u);
  EXPECT_EQ(data_[8 + 13], 0x01);
  // READ FULL STATUS through gateway 2 names the holder's port: gateway 1's relative port.
  Run(rb_, {0x5E, 0x03, 0, 0, 0, 0, 0, 0x10, 0x00, 0});
  ExpectGood();
  EXPECT_EQ(LoadBe16(data_.data() + 8 + 18), 1);

  // Released through gateway 1: gateway 2 writes again.
  Prout(ra_, 0x02, 0x01, 0xA1, 0);
  ExpectGood();
  Write(rb_);
  ExpectGood();
}

// Two gateways change the object at once: the loser of the compare-and-swap starts again from
// what the winner wrote, so that neither change is lost.
TEST_F(SharedReservationsTest, AConcurrentChangeIsNotLost) {
  Nexus b2("iqn.2026-11.io.example:b,i,0x400000000009", 2);
  Runner rb2(gw2_.target, b2);
  cluster_.race = [&] {
    // REGISTER through gateway 2, between gateway 1's read and write.
    rb2.Run({0x00});  // its power-on unit attention
    std::vector<uint8_t> p(24, 0);
    StoreBe64(p.data() + 8, 0xB2);
    EXPECT_EQ(rb2.Run({0x5F, 0x00, 0, 0, 0, 0, 0, 0, 24, 0}, 24, p).status, ScsiStatus::kGood);
  };
  Prout(ra_, 0x00, 0, 0, 0xA1);
  ExpectGood();
  auto keys = Keys(ra_);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<uint64_t>{0xA1, 0xB2}));
  EXPECT_EQ(Keys(rb_), Keys(ra_));
  EXPECT_EQ(cluster_.writes, 2);
}

// PREEMPT through gateway 2 removes a registration made through gateway 1: that nexus gets
// REGISTRATIONS PREEMPTED, and its writes conflict with the preempting reservation.
TEST_F(SharedReservationsTest, PreemptionReachesTheOtherGatewaysNexus) {
  ReserveThroughGateway1(0x01);
  Prout(rb_, 0x00, 0, 0, 0xB1);
  ExpectGood();
  Prout(rb_, 0x04, 0x01, 0xB1, 0xA1);  // PREEMPT the holder
  ExpectGood();
  Run(ra_, {0x00});
  ExpectSense(SenseKey::kUnitAttention, Asc::kRegistrationsPreempted);
  Write(ra_);
  ExpectConflict();
  EXPECT_EQ(Keys(ra_), std::vector<uint64_t>{0xB1});
}

// A PREEMPT written to the object whose hand-over to gateway 1 failed answers NOT READY; the
// initiator's retry is answered from that change (GOOD, once gateway 1 has it), not applied again
// to a state where the preempted key is gone (RESERVATION CONFLICT).
TEST_F(SharedReservationsTest, ARetriedPreemptWhoseHandOverFailedIsAnsweredFromItsChange) {
  ReserveThroughGateway1(0x01);
  Prout(rb_, 0x00, 0, 0, 0xB1);
  ExpectGood();
  cluster_.notify_err = ENOTCONN;
  cluster_.notify_failures = 3;  // the first try and both of its retries
  Prout(rb_, 0x04, 0x01, 0xB1, 0xA1);
  ExpectNotReady();
  EXPECT_EQ(cluster_.writes, 4);
  Write(ra_);  // gateway 1 has not learned of it yet
  ExpectGood();

  cluster_.notify_failures = 3;  // the retry while the hand-over still fails
  Prout(rb_, 0x04, 0x01, 0xB1, 0xA1);
  ExpectNotReady();
  Prout(rb_, 0x04, 0x01, 0xB1, 0xA1);  // and once it succeeds
  ExpectGood();
  EXPECT_EQ(cluster_.writes, 4);  // applied once
  Run(ra_, {0x00});               // with its effects on gateway 1
  ExpectSense(SenseKey::kUnitAttention, Asc::kRegistrationsPreempted);
  Write(ra_);
  ExpectConflict();
  EXPECT_EQ(Keys(ra_), std::vector<uint64_t>{0xB1});
  EXPECT_EQ(Keys(rb_), std::vector<uint64_t>{0xB1});
  Prout(rb_, 0x04, 0x01, 0xB1, 0xA1);  // answered: sent again, it is a new command
  ExpectConflict();
}

// The same for REGISTER, whose second application would conflict with the key it registered;
// another command of the nexus in between ends the record: what follows is applied as sent.
TEST_F(SharedReservationsTest, ARetriedRegisterIsAppliedOnce) {
  cluster_.notify_err = EIO;
  cluster_.notify_failures = 3;
  Prout(ra_, 0x00, 0, 0, 0xA1);
  ExpectNotReady();
  Prout(ra_, 0x00, 0, 0, 0xA1);
  ExpectGood();
  EXPECT_EQ(cluster_.writes, 1);
  EXPECT_EQ(Keys(rb_), std::vector<uint64_t>{0xA1});

  cluster_.notify_failures = 3;
  Prout(ra_, 0x00, 0, 0xA1, 0xA2);  // REGISTER A1 -> A2
  ExpectNotReady();
  Prout(ra_, 0x00, 0, 0xA2, 0xA3);  // another command: A2 -> A3
  ExpectGood();
  Prout(ra_, 0x00, 0, 0xA1, 0xA2);  // no longer a retry: A1 is not a's key
  ExpectConflict();
  EXPECT_EQ(Keys(rb_), std::vector<uint64_t>{0xA3});
  EXPECT_EQ(cluster_.writes, 3);
}

// A record is for a retry of nothing newer: once the object has changed since (here the nexus was
// preempted through the other gateway), the same command is applied again as sent, never answered
// GOOD for a registration that is no longer there.
TEST_F(SharedReservationsTest, ARecordGoesStaleOnceTheObjectChanges) {
  Prout(rb_, 0x00, 0, 0, 0xB1);
  ExpectGood();
  cluster_.notify_err = EIO;
  cluster_.notify_failures = 3;
  Prout(ra_, 0x06, 0, 0, 0xA1);  // REGISTER AND IGNORE EXISTING KEY, not handed over
  ExpectNotReady();
  Prout(rb_, 0x04, 0x01, 0xB1, 0xA1);  // PREEMPT: a's registration goes
  ExpectGood();
  EXPECT_EQ(Keys(rb_), std::vector<uint64_t>{0xB1});
  Run(ra_, {0x00});
  ExpectSense(SenseKey::kUnitAttention, Asc::kRegistrationsPreempted);
  Prout(ra_, 0x06, 0, 0, 0xA1);  // the same command again: applied, not answered from the record
  ExpectGood();
  auto keys = Keys(rb_);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<uint64_t>{0xA1, 0xB1}));
}

// PREEMPT AND ABORT through gateway 2 aborts the preempted nexus's tasks on gateway 1, where it is
// logged in; gateway 2 has nothing of it to abort.
TEST_F(SharedReservationsTest, PreemptAndAbortAbortsOnTheOtherGateway) {
  ReserveThroughGateway1(0x01);
  Prout(rb_, 0x00, 0, 0, 0xB1);
  Prout(rb_, 0x05, 0x01, 0xB1, 0xA1);  // PREEMPT AND ABORT
  ExpectGood();
  EXPECT_EQ(gw1_.aborter->aborted, std::vector<std::string>{a_.initiator_port()});
  // Locally the preempted nexus is named too (the transport finds none of it there).
  EXPECT_EQ(gw2_.aborter->aborted, std::vector<std::string>{a_.initiator_port()});
  Write(ra_);
  ExpectSense(SenseKey::kUnitAttention, Asc::kRegistrationsPreempted);
  Write(ra_);
  ExpectConflict();
}

// While the watch that keeps a gateway's copy current is lost, changes may be missed: the gateway
// answers NOT READY (TEST UNIT READY included) until it has reread the object.
TEST_F(SharedReservationsTest, ALostWatchMakesTheStateUnknownUntilReread) {
  gw2_.object->LoseWatch();
  Write(rb_);
  ExpectNotReady();
  Run(rb_, {0x00});
  ExpectNotReady();
  ReserveThroughGateway1(0x01);  // whether gateway 2 got the notify or not, its reread has it
  gw2_.object->Resync();
  Write(rb_);
  ExpectConflict();
  Run(rb_, {0x00});
  ExpectGood();
}

// A gateway that starts while a reservation exists fences from its first command.
TEST_F(SharedReservationsTest, AGatewayThatStartsLaterLoadsTheReservation) {
  ReserveThroughGateway1(0x03);  // EXCLUSIVE ACCESS
  StartGateway3();
  Read(*rc_);
  ExpectConflict();
  EXPECT_EQ(Keys(*rc_), std::vector<uint64_t>{0xA1});
}

// A gateway that cannot read the shared state when its LUN is created does not serve the medium
// as if there were no reservation: NOT READY (which initiators retry) until the reread succeeds.
TEST_F(SharedReservationsTest, AGatewayThatCannotReadTheStateAnswersNotReadyUntilItCan) {
  ReserveThroughGateway1(0x01);
  cluster_.read_err = ETIMEDOUT;
  StartGateway3();
  EXPECT_EQ(gw3_->object->reloads, 1);
  Write(*rc_);
  ExpectNotReady();
  Run(*rc_, {0x5E, 0x00, 0, 0, 0, 0, 0, 0x10, 0x00, 0});  // READ KEYS
  ExpectNotReady();
  Run(*rc_, {0x12, 0, 0, 0, 96, 0});  // INQUIRY is served
  ExpectGood();
  cluster_.read_err = 0;
  gw3_->object->Resync();
  Write(*rc_);
  ExpectConflict();
  EXPECT_EQ(Keys(*rc_), std::vector<uint64_t>{0xA1});
}

// A PERSISTENT RESERVE OUT that cannot read the object changes nothing and says NOT READY.
TEST_F(SharedReservationsTest, AnUnreadableObjectFailsTheCommandRetryably) {
  cluster_.read_err = ETIMEDOUT;
  Prout(ra_, 0x00, 0, 0, 0xA1);
  ExpectNotReady();
  cluster_.read_err = 0;
  EXPECT_EQ(cluster_.writes, 0);
  EXPECT_TRUE(Keys(rb_).empty());
}

// A conflict or a bad key changes nothing in the object; REGISTER with APTPL is accepted (PTPL_C:
// the state is in the cluster); RESERVE(6), whose reservation is one nexus's, is not offered.
TEST_F(SharedReservationsTest, WhatTheSharedLunOffers) {
  Prout(ra_, 0x01, 0x01, 0xA1, 0);  // RESERVE unregistered: conflict
  ExpectConflict();
  EXPECT_EQ(cluster_.writes, 0);
  Prout(ra_, 0x00, 0, 0, 0xA1, /*aptpl=*/true);
  ExpectGood();
  Run(rb_, {0x5E, 0x02, 0, 0, 0, 0, 0, 0x00, 0x08, 0});  // REPORT CAPABILITIES
  ExpectGood();
  EXPECT_EQ(data_[2] & 0x01, 0x01);  // PTPL_C
  EXPECT_EQ(data_[2] & 0x10, 0x00);  // CRH: RESERVE/RELEASE are not offered
  EXPECT_EQ(data_[3] & 0x01, 0x01);  // PTPL_A
  Run(rb_, {0x16, 0, 0, 0, 0, 0});
  ExpectSense(SenseKey::kIllegalRequest, Asc::kInvalidCommandOperationCode);
}

// A LOGICAL UNIT RESET through one gateway reaches the nexuses of the others (SAM-5 5.8): their
// unit attention, and their tasks aborted.
TEST_F(SharedReservationsTest, ALogicalUnitResetReachesTheOtherGateways) {
  Engine::ResetLun(gw1_.lun(), &a_);
  Run(rb_, {0x00});
  ExpectSense(SenseKey::kUnitAttention, Asc::kBusDeviceReset);
  Run(ra_, {0x00});
  ExpectGood();  // the issuer's own nexus gets none
  EXPECT_EQ(gw2_.aborter->aborted, std::vector<std::string>{"*"});
  EXPECT_TRUE(gw1_.aborter->aborted.empty());  // there the task management function aborts them
}

// A gateway that does not acknowledge a change (stopped, or cut off from the cluster while alive)
// could go on admitting the writes the change forbids: it is fenced before the command is
// answered GOOD; one that cannot be fenced fails the command (NOT READY), whose retry is answered
// from the change once every gateway has it.
TEST_F(SharedReservationsTest, ASilentGatewayIsFencedBeforeTheChangeIsAnswered) {
  gw1_.object->silent = true;
  Prout(rb_, 0x00, 0, 0, 0xB1);  // REGISTER through gateway 2
  ExpectGood();
  EXPECT_TRUE(gw1_.object->fenced);

  gw1_.object->fenced = false;
  gw1_.object->fence_err = ENOENT;
  Prout(rb_, 0x01, 0x01, 0xB1, 0);  // RESERVE
  ExpectNotReady();
  EXPECT_FALSE(gw1_.object->fenced);
  EXPECT_EQ(cluster_.writes, 2);
  gw1_.object->silent = false;  // it answers again
  Prout(rb_, 0x01, 0x01, 0xB1, 0);
  ExpectGood();
  EXPECT_EQ(cluster_.writes, 2);
  Write(ra_);
  ExpectConflict();
}

// Waits (up to 10 s) until `gw`'s aborter holds an abort's hold: its tasks are still in the store.
bool WaitForHold(Gateway& gw) {
  for (int i = 0; i < 1000; ++i) {
    {
      std::lock_guard lock(gw.aborter->mu);
      if (!gw.aborter->holds.empty()) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// SPC-4 5.13.11.2.4, SAM-5 5.6: PREEMPT AND ABORT through gateway 2 ends only once the preempted
// nexus's aborted tasks on gateway 1 have ended; gateway 1 acknowledges the change then, not when
// it has only started the aborts.
TEST_F(SharedReservationsTest, PreemptAndAbortWaitsForTheAbortedTasksOnTheOtherGateway) {
  ReserveThroughGateway1(0x01);
  Prout(rb_, 0x00, 0, 0, 0xB1);
  ExpectGood();
  gw1_.aborter->keep_holds = true;
  gw2_.object->queue_posts = true;  // the command runs on the object's thread: `worker` here
  std::vector<uint8_t> p(24, 0);
  StoreBe64(p.data(), 0xB1);
  StoreBe64(p.data() + 8, 0xA1);
  const uint8_t cdb[] = {0x5F, 0x05, 0x01, 0, 0, 0, 0, 0, 24, 0};
  Task& t = rb_.Start(std::span<const uint8_t>(cdb), 24, p);
  ASSERT_EQ(gw2_.object->posted.size(), 1u);
  std::atomic<bool> ran{false};
  std::thread worker([&] {
    gw2_.object->RunPosted();
    ran = true;
  });
  ASSERT_TRUE(WaitForHold(gw1_));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // time to answer too soon
  EXPECT_FALSE(ran) << "answered while gateway 1's aborted task was in the store";
  {
    std::lock_guard lock(gw1_.aborter->mu);
    gw1_.aborter->holds.clear();  // its last aborted task has ended
  }
  worker.join();
  gw2_.object->queue_posts = false;
  EXPECT_EQ(rb_.completions(), 1);
  EXPECT_EQ(t.status, ScsiStatus::kGood);
  EXPECT_EQ(gw1_.aborter->aborted, std::vector<std::string>{a_.initiator_port()});
}

// Runs `send(hold)` (a task management function through gateway 1, handing gateway 2 the abort
// of its tasks) and expects `hold`, what holds the function's response, released only once
// gateway 2's aborted tasks have ended.
void ExpectAnsweredOnceGateway2sTasksEnded(Gateway& gw1, Gateway& gw2,
                                           const std::function<void(std::shared_ptr<void>)>& send) {
  gw2.aborter->keep_holds = true;
  gw1.object->queue_posts = true;
  std::atomic<bool> released{false};
  send(OnRelease([&] { released = true; }));
  ASSERT_EQ(gw1.object->posted.size(), 1u);
  std::thread worker([&] { gw1.object->RunPosted(); });
  ASSERT_TRUE(WaitForHold(gw2));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(released) << "released while gateway 2's aborted tasks were in the store";
  {
    std::lock_guard lock(gw2.aborter->mu);
    gw2.aborter->holds.clear();
  }
  worker.join();
  gw1.object->queue_posts = false;
  EXPECT_TRUE(released);
}

TEST_F(SharedReservationsTest, ALogicalUnitResetWaitsForTheOtherGatewaysTasks) {
  ExpectAnsweredOnceGateway2sTasksEnded(gw1_, gw2_, [&](std::shared_ptr<void> hold) {
    Engine::ResetLun(gw1_.lun(), &a_, std::move(hold));
  });
  EXPECT_EQ(gw2_.aborter->aborted, std::vector<std::string>{"*"});
}

// CLEAR TASK SET through gateway 1 (SAM-5 7.4, one task set for every I_T nexus): gateway 2's
// tasks of the logical unit are aborted too, without a reset's unit attention.
TEST_F(SharedReservationsTest, AClearedTaskSetEndsTheOtherGatewaysTasksBeforeItIsAnswered) {
  ExpectAnsweredOnceGateway2sTasksEnded(gw1_, gw2_, [&](std::shared_ptr<void> hold) {
    Engine::ClearTaskSet(gw1_.lun(), std::move(hold));
  });
  EXPECT_EQ(gw2_.aborter->aborted, std::vector<std::string>{"clear"});
  EXPECT_TRUE(gw1_.aborter->aborted.empty());  // there the task management function aborts them
  Run(rb_, {0x00});
  ExpectGood();  // not a reset: a unit attention only for a nexus whose tasks it ended
}

TEST(NexusMatchTest, AnyInitiatorMatchesEveryPortOfItsTargetPort) {
  NexusMatch all;
  all.any_initiator = true;
  EXPECT_TRUE(all.Matches("iqn.2026-11.io.example:a,i,0x400000000001", 2));
  all.relative_port_id = 1;
  EXPECT_FALSE(all.Matches("iqn.2026-11.io.example:a,i,0x400000000001", 2));
  NexusMatch one{"iqn.2026-11.io.example:a", true, 0};
  EXPECT_FALSE(one.Matches("iqn.2026-11.io.example:b,i,0x400000000001", 2));
}

}  // namespace shared_reservations_test
}  // namespace iscsigw::scsi
