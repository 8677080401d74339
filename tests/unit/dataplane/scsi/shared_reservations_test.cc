// Persistent reservations of a LUN that several gateways export (LunConfig::shared_state): each
// gateway is a TargetInfo with its own relative port and its own Lun object over one store, and
// the gateways share a FakeObject the way RADOS shares one object among them (versions,
// compare-and-swap, notify to every other watcher).
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/backing/ram_store.h"
#include "dataplane/backing/shared_object.h"
#include "dataplane/base/endian.h"
#include "dataplane/scsi/engine.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::scsi {
namespace {

// The object in the cluster: data, a version that every write moves on, and its watchers.
struct FakeCluster {
  std::string data;
  uint64_t version = 1;
  std::vector<class FakeObject*> watchers;
  // Runs once, just before the next compare-and-swap: another gateway's change in between.
  std::function<void()> race;
  int writes = 0;
  int read_err = 0;  // what Read answers (0: the data)
};

// One gateway's view of the object. Post runs the job at once (the engine's completion then runs
// before Execute returns, which the Task contract allows).
class FakeObject final : public backing::SharedObject {
 public:
  explicit FakeObject(FakeCluster& c) : c_(c) { c_.watchers.push_back(this); }
  ~FakeObject() override { std::erase(c_.watchers, this); }

  int Read(std::string* data, uint64_t* version) override {
    if (c_.read_err != 0) return -c_.read_err;
    *data = c_.data;
    *version = c_.version;
    return 0;
  }
  int WriteIfVersion(uint64_t version, const std::string& data, uint64_t* out) override {
    if (c_.race) {
      auto race = std::move(c_.race);
      c_.race = nullptr;
      race();
    }
    if (version != c_.version) return -ECANCELED;
    c_.data = data;
    *out = ++c_.version;
    ++c_.writes;
    return 0;
  }
  int Notify(uint64_t version, const std::string& data, const std::string& events,
             std::chrono::milliseconds) override {
    ++notifies;
    for (FakeObject* w : c_.watchers) {
      if (w != this && w->listener_) w->listener_(version, data, events);
    }
    return 0;
  }
  void Post(std::function<void()> fn) override { fn(); }
  // The reread happens when the test says (Resync), as the object's thread would retry it.
  void Reload() override { ++reloads; }
  void Resync() {
    std::string data;
    uint64_t version = 0;
    if (Read(&data, &version) == 0 && listener_) listener_(version, data, "");
  }
  int reloads = 0;
  uint64_t SetListener(Listener l) override {
    listener_ = std::move(l);
    return ++token_;
  }
  void ClearListener(uint64_t token) override {
    if (token == token_) listener_ = nullptr;
  }
  int notifies = 0;

 private:
  FakeCluster& c_;
  Listener listener_;
  uint64_t token_ = 0;
};

constexpr uint32_t kBlock = 512;

// One gateway: its target port (relative port = group = gateway id), its Lun over the shared
// store, its view of the object.
struct Gateway {
  Gateway(uint16_t id, FakeCluster& cluster, std::shared_ptr<backing::BackingStore> store)
      : object(std::make_shared<FakeObject>(cluster)) {
    target.name = "iqn.2026-11.io.iscsigw:shared";
    target.tpgt = target.relative_port_id = target.target_port_group = id;
    LunConfig c;
    c.id = 0;
    c.block_size = kBlock;
    c.serial = "shared";
    c.naa_id = 0x6001405000000001ull;
    c.shared_state = object;
    target.luns.push_back(std::make_shared<Lun>(c, std::move(store)));
  }
  Lun& lun() { return *target.luns[0]; }
  std::shared_ptr<FakeObject> object;
  TargetInfo target;
};

class SharedReservationsTest : public ::testing::Test {
 protected:
  SharedReservationsTest()
      : store_(std::shared_ptr<backing::BackingStore>(backing::NewRamStore(256 * kBlock))),
        gw1_(1, cluster_, store_),
        gw2_(2, cluster_, store_),
        a_("iqn.2026-11.io.example:a,i,0x400000000001", 1),
        b_("iqn.2026-11.io.example:b,i,0x400000000002", 2) {
    buf_.resize(64 << 10);
    for (auto [gw, nexus] : {std::pair{&gw1_, &a_}, std::pair{&gw2_, &b_}}) {
      Run(*gw, *nexus, {0x00});  // the power-on unit attention
      EXPECT_EQ(task_.status, ScsiStatus::kCheckCondition);
    }
  }

  void Run(Gateway& gw, Nexus& nexus, std::vector<uint8_t> cdb,
           const std::vector<uint8_t>& data_out = {}) {
    RunTask(gw, nexus, cdb, data_out, task_, buf_);
  }
  // The same with a task and buffer of the caller's: a command while another is in progress.
  static void RunTask(Gateway& gw, Nexus& nexus, const std::vector<uint8_t>& cdb,
                      const std::vector<uint8_t>& data_out, Task& task, std::vector<uint8_t>& buf) {
    task = Task{};
    std::copy(cdb.begin(), cdb.end(), task.cdb.begin());
    task.cdb_len = 16;
    task.expected_length = data_out.empty() ? 4096 : static_cast<uint32_t>(data_out.size());
    task.nexus = &nexus;
    task.buf = buf.data();
    task.buf_cap = static_cast<uint32_t>(buf.size());
    if (!data_out.empty()) {
      std::memcpy(buf.data(), data_out.data(), data_out.size());
      task.data_out_len = static_cast<uint32_t>(data_out.size());
      task.dir = DataDirection::kWrite;
    }
    int completions = 0;
    task.complete = [](Task*, void* ctx) { ++*static_cast<int*>(ctx); };
    task.complete_ctx = &completions;
    Engine::Execute(gw.target, task);
    ASSERT_EQ(completions, 1);
  }

  // PERSISTENT RESERVE OUT with a basic parameter list.
  void Prout(Gateway& gw, Nexus& nexus, uint8_t sa, uint8_t type, uint64_t key, uint64_t sa_key,
             bool aptpl = false) {
    std::vector<uint8_t> p(24, 0);
    StoreBe64(p.data(), key);
    StoreBe64(p.data() + 8, sa_key);
    p[20] = aptpl ? 0x01 : 0x00;
    Run(gw, nexus, {0x5F, sa, type, 0, 0, 0, 0, 0, 24, 0}, p);
  }
  void ExpectGood() {
    EXPECT_EQ(task_.status, ScsiStatus::kGood);
    EXPECT_EQ(task_.sense_len, 0);
  }
  void ExpectSense(SenseKey key, Asc asc) {
    ASSERT_EQ(task_.status, ScsiStatus::kCheckCondition);
    EXPECT_EQ(task_.sense[2] & 0x0F, static_cast<uint8_t>(key));
    EXPECT_EQ(task_.sense[12], asc.asc);
    EXPECT_EQ(task_.sense[13], asc.ascq);
  }
  void Write(Gateway& gw, Nexus& nexus) {
    std::vector<uint8_t> d(kBlock, 0x5A);
    Run(gw, nexus, {0x2A, 0, 0, 0, 0, 8, 0, 0, 1, 0}, d);
  }
  std::vector<uint64_t> Keys(Gateway& gw, Nexus& nexus) {
    Run(gw, nexus, {0x5E, 0x00, 0, 0, 0, 0, 0, 0x10, 0x00, 0});
    std::vector<uint64_t> keys;
    const uint32_t n = LoadBe32(buf_.data() + 4);
    for (uint32_t i = 0; i < n; i += 8) keys.push_back(LoadBe64(buf_.data() + 8 + i));
    return keys;
  }

  FakeCluster cluster_;
  std::shared_ptr<backing::BackingStore> store_;
  Gateway gw1_, gw2_;
  Nexus a_, b_;  // a_ logs in through gateway 1, b_ through gateway 2
  Task task_;
  std::vector<uint8_t> buf_;
};

// A WRITE EXCLUSIVE reservation taken through gateway 1 fences writes through gateway 2 as soon as
// the command completes; reads pass; both gateways report the same keys, holder and generation.
TEST_F(SharedReservationsTest, AReservationThroughOneGatewayFencesWritesThroughTheOther) {
  Write(gw2_, b_);
  ExpectGood();
  Prout(gw1_, a_, 0x00, 0, 0, 0xA1);  // REGISTER
  ExpectGood();
  Prout(gw1_, a_, 0x01, 0x01, 0xA1, 0);  // RESERVE, WRITE EXCLUSIVE
  ExpectGood();
  EXPECT_EQ(cluster_.writes, 2);
  EXPECT_EQ(gw1_.object->notifies, 2);

  Write(gw2_, b_);
  EXPECT_EQ(task_.status, ScsiStatus::kReservationConflict);
  Run(gw2_, b_, {0x28, 0, 0, 0, 0, 8, 0, 0, 1, 0});  // READ(10)
  ExpectGood();
  Write(gw1_, a_);
  ExpectGood();
  EXPECT_EQ(Keys(gw2_, b_), std::vector<uint64_t>{0xA1});
  Run(gw2_, b_, {0x5E, 0x01, 0, 0, 0, 0, 0, 0x10, 0x00, 0});  // READ RESERVATION
  ExpectGood();
  EXPECT_EQ(LoadBe32(buf_.data()), 1u);  // PRgeneration: one registration
  EXPECT_EQ(LoadBe64(buf_.data() + 8), 0xA1u);
  EXPECT_EQ(buf_[8 + 13], 0x01);
  // READ FULL STATUS through gateway 2 names the holder's port: gateway 1's relative port.
  Run(gw2_, b_, {0x5E, 0x03, 0, 0, 0, 0, 0, 0x10, 0x00, 0});
  ExpectGood();
  EXPECT_EQ(LoadBe16(buf_.data() + 8 + 18), 1);

  // Released through gateway 1: gateway 2 writes again.
  Prout(gw1_, a_, 0x02, 0x01, 0xA1, 0);
  ExpectGood();
  Write(gw2_, b_);
  ExpectGood();
}

// Two gateways change the object at once: the loser of the compare-and-swap starts again from
// what the winner wrote, so that neither change is lost.
TEST_F(SharedReservationsTest, AConcurrentChangeIsNotLost) {
  Task other;
  std::vector<uint8_t> other_buf(4096);
  Nexus b2("iqn.2026-11.io.example:b,i,0x400000000009", 2);
  cluster_.race = [&] {
    // REGISTER through gateway 2, between gateway 1's read and write.
    RunTask(gw2_, b2, {0x00}, {}, other, other_buf);  // its power-on unit attention
    std::vector<uint8_t> p(24, 0);
    StoreBe64(p.data() + 8, 0xB2);
    RunTask(gw2_, b2, {0x5F, 0x00, 0, 0, 0, 0, 0, 0, 24, 0}, p, other, other_buf);
    EXPECT_EQ(other.status, ScsiStatus::kGood);
  };
  Prout(gw1_, a_, 0x00, 0, 0, 0xA1);
  ExpectGood();
  auto keys = Keys(gw1_, a_);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<uint64_t>{0xA1, 0xB2}));
  EXPECT_EQ(Keys(gw2_, b_), Keys(gw1_, a_));
  EXPECT_EQ(cluster_.writes, 2);
}

// PREEMPT through gateway 2 removes a registration made through gateway 1: that nexus gets
// REGISTRATIONS PREEMPTED, and its writes conflict with the preempting reservation.
TEST_F(SharedReservationsTest, PreemptionReachesTheOtherGatewaysNexus) {
  Prout(gw1_, a_, 0x00, 0, 0, 0xA1);
  Prout(gw1_, a_, 0x01, 0x01, 0xA1, 0);
  ExpectGood();
  Prout(gw2_, b_, 0x00, 0, 0, 0xB1);
  ExpectGood();
  Prout(gw2_, b_, 0x04, 0x01, 0xB1, 0xA1);  // PREEMPT the holder
  ExpectGood();
  Run(gw1_, a_, {0x00});
  ExpectSense(SenseKey::kUnitAttention, Asc::kRegistrationsPreempted);
  Write(gw1_, a_);
  EXPECT_EQ(task_.status, ScsiStatus::kReservationConflict);
  EXPECT_EQ(Keys(gw1_, a_), std::vector<uint64_t>{0xB1});
}

// A gateway that starts while a reservation exists fences from its first command.
TEST_F(SharedReservationsTest, AGatewayThatStartsLaterLoadsTheReservation) {
  Prout(gw1_, a_, 0x00, 0, 0, 0xA1);
  Prout(gw1_, a_, 0x01, 0x03, 0xA1, 0);  // EXCLUSIVE ACCESS
  ExpectGood();
  Gateway gw3(3, cluster_, store_);
  Nexus c("iqn.2026-11.io.example:c,i,0x400000000003", 3);
  Run(gw3, c, {0x00});
  ExpectSense(SenseKey::kUnitAttention, Asc::kPowerOnReset);
  Run(gw3, c, {0x28, 0, 0, 0, 0, 8, 0, 0, 1, 0});
  EXPECT_EQ(task_.status, ScsiStatus::kReservationConflict);
  EXPECT_EQ(Keys(gw3, c), std::vector<uint64_t>{0xA1});
}

// A gateway that cannot read the shared state when its LUN is created does not serve the medium
// as if there were no reservation: NOT READY (which initiators retry) until the reread succeeds.
TEST_F(SharedReservationsTest, AGatewayThatCannotReadTheStateAnswersNotReadyUntilItCan) {
  Prout(gw1_, a_, 0x00, 0, 0, 0xA1);
  Prout(gw1_, a_, 0x01, 0x01, 0xA1, 0);
  ExpectGood();
  cluster_.read_err = ETIMEDOUT;
  Gateway gw3(3, cluster_, store_);
  EXPECT_EQ(gw3.object->reloads, 1);
  Nexus c("iqn.2026-11.io.example:c,i,0x400000000003", 3);
  Run(gw3, c, {0x00});
  ExpectSense(SenseKey::kUnitAttention, Asc::kPowerOnReset);
  Write(gw3, c);
  ExpectSense(SenseKey::kNotReady, Asc::kLogicalUnitNotReadyCauseNotReportable);
  Run(gw3, c, {0x5E, 0x00, 0, 0, 0, 0, 0, 0x10, 0x00, 0});  // READ KEYS
  ExpectSense(SenseKey::kNotReady, Asc::kLogicalUnitNotReadyCauseNotReportable);
  Run(gw3, c, {0x12, 0, 0, 0, 96, 0});  // INQUIRY is served
  ExpectGood();
  cluster_.read_err = 0;
  gw3.object->Resync();
  Write(gw3, c);
  EXPECT_EQ(task_.status, ScsiStatus::kReservationConflict);
  EXPECT_EQ(Keys(gw3, c), std::vector<uint64_t>{0xA1});
}

// A PERSISTENT RESERVE OUT that cannot read the object changes nothing and says NOT READY.
TEST_F(SharedReservationsTest, AnUnreadableObjectFailsTheCommandRetryably) {
  cluster_.read_err = ETIMEDOUT;
  Prout(gw1_, a_, 0x00, 0, 0, 0xA1);
  ExpectSense(SenseKey::kNotReady, Asc::kLogicalUnitNotReadyCauseNotReportable);
  cluster_.read_err = 0;
  EXPECT_EQ(cluster_.writes, 0);
  EXPECT_TRUE(Keys(gw2_, b_).empty());
}

// A conflict or a bad key changes nothing in the object; REGISTER with APTPL is accepted (PTPL_C:
// the state is in the cluster); RESERVE(6), whose reservation is one nexus's, is not offered.
TEST_F(SharedReservationsTest, WhatTheSharedLunOffers) {
  Prout(gw1_, a_, 0x01, 0x01, 0xA1, 0);  // RESERVE unregistered: conflict
  EXPECT_EQ(task_.status, ScsiStatus::kReservationConflict);
  EXPECT_EQ(cluster_.writes, 0);
  Prout(gw1_, a_, 0x00, 0, 0, 0xA1, /*aptpl=*/true);
  ExpectGood();
  Run(gw2_, b_, {0x5E, 0x02, 0, 0, 0, 0, 0, 0x00, 0x08, 0});  // REPORT CAPABILITIES
  ExpectGood();
  EXPECT_EQ(buf_[2] & 0x01, 0x01);  // PTPL_C
  EXPECT_EQ(buf_[2] & 0x10, 0x00);  // CRH: RESERVE/RELEASE are not offered
  EXPECT_EQ(buf_[3] & 0x01, 0x01);  // PTPL_A
  Run(gw2_, b_, {0x16, 0, 0, 0, 0, 0});
  ExpectSense(SenseKey::kIllegalRequest, Asc::kInvalidCommandOperationCode);
}

// A LOGICAL UNIT RESET through one gateway reaches the nexuses of the others (SAM-5 5.8).
TEST_F(SharedReservationsTest, ALogicalUnitResetReachesTheOtherGateways) {
  Engine::ResetLun(gw1_.lun(), &a_);
  Run(gw2_, b_, {0x00});
  ExpectSense(SenseKey::kUnitAttention, Asc::kBusDeviceReset);
  Run(gw1_, a_, {0x00});
  ExpectGood();  // the issuer's own nexus gets none
}

}  // namespace
}  // namespace iscsigw::scsi
