// InstrumentedStore: a BackingStore that forwards every call to the store it wraps
// (backing::ForwardingStore) and records, in the LUN's per-reactor counter shards
// (dataplane/runtime/stats.h), how long each data call took from the call to its completion and
// whether it failed. Every LUN's store is wrapped in one, so latency and errors are measured the
// same way for ram, null, file and rbd stores.
//
// What is timed: Read, Write, WriteAtomic, Flush, Unmap, ReadModifyWrite and CompareAndWrite of a
// store constructed `timed`.
// MapRead (zero-copy reads of ram and null stores), GetProvisioning, Prefetch and Grow pass
// through untimed: they move no data. Stores that complete every call inline in memory (ram, null)
// are wrapped untimed: their call time is part of the SCSI command time already, and two clock
// reads (~50 ns each on a virtual machine) would cost more than the call. Their errors are still
// counted. ENOTSUP ("this store does not offer that call") is not counted as an error.
//
// Threading: as BackingStore says, a call made with `slot` completes on reactor `slot`'s thread, so
// each slot's pool of in-flight call records has exactly one user and needs no lock. A record is
// allocated only when a slot has more calls in flight than ever before (bounded by the sessions'
// command windows); the steady state allocates nothing. Records are freed with the store.
// Calls with a slot beyond the LUN's shard count, or made while counting is off, are forwarded
// without a record.
//
// It is also the LUN's hold on its store, so that a live LUN's store can be reopened with other
// settings (read_only, direct, fault) while the LUN, and every I_T nexus's state in it, stays
// (docs/live-lun-changes.md): Close() makes every later call fail with ENOTCONN (NOT READY,
// BECOMING READY, which initiators retry) and ready() say so, while what the LUN reports of its
// store (size, limits) stays as it was; once no call is in flight (the caller drains the tasks),
// TakeInner() hands the closed store over to be closed for good, and Install() puts the new one
// in place. One acquire load per call; the flag is written only by a reopen.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "dataplane/backing/backing_store.h"
#include "dataplane/backing/forwarding_store.h"
#include "dataplane/runtime/stats.h"

namespace iscsigw::api {

class InstrumentedStore final : public backing::ForwardingStore {
 public:
  // `stats` must outlive the store (runtime::Stats keeps LUN blocks for the life of the process).
  InstrumentedStore(std::shared_ptr<backing::BackingStore> inner, runtime::LunStats* stats,
                    bool timed = true);
  ~InstrumentedStore() override;
  InstrumentedStore(const InstrumentedStore&) = delete;
  InstrumentedStore& operator=(const InstrumentedStore&) = delete;

  // Reopening (above). Close: one thread at a time (the data plane's configuration lock); `why`
  // is the offline reason shown meanwhile. TakeInner and Install: the thread that closed, once
  // every call made before Close has completed and every reactor has run a job posted after it
  // (a task drain does both). Install's store reports the same kind.
  void Close(std::string why);
  // Undoes Close, the same store serving on (a reopen given up before TakeInner). Any thread.
  void Reopen() { closed_.store(false, std::memory_order_release); }
  // The reason shown while closed, for a store left closed. Any thread.
  void SetReason(std::string why);
  std::shared_ptr<backing::BackingStore> TakeInner();
  void Install(std::shared_ptr<backing::BackingStore> inner);
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  std::string_view kind() const override { return kind_; }
  uint64_t size_bytes() const override {
    return closed() ? kept_.size_bytes : ForwardingStore::size_bytes();
  }
  bool persistent() const override {
    return closed() ? kept_.persistent : ForwardingStore::persistent();
  }
  int ready() const override { return closed() ? ENOTCONN : ForwardingStore::ready(); }
  std::string offline_reason() const override;
  bool preferred() const override {
    return closed() ? kept_.preferred : ForwardingStore::preferred();
  }
  bool thin_provisioned() const override {
    return closed() ? kept_.thin_provisioned : ForwardingStore::thin_provisioned();
  }
  uint64_t allocated_bytes() const override {
    return closed() ? kept_.allocated_bytes : ForwardingStore::allocated_bytes();
  }
  uint64_t unmap_granularity() const override {
    return closed() ? kept_.unmap_granularity : ForwardingStore::unmap_granularity();
  }
  void Unmap(unsigned slot, uint64_t offset, uint64_t len, backing::IoCompletion done) override {
    if (closed()) return done(ENOTCONN);
    inner_->Unmap(slot, offset, len, Begin(slot, runtime::StoreOp::kUnmap, done));
  }
  void GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                       backing::IoCompletion done) override {
    if (closed()) return done(ENOTCONN);
    ForwardingStore::GetProvisioning(slot, offset, max_len, out, done);
  }
  void ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch, bool fua,
                       ModifyFn modify, backing::IoCompletion done) override {
    if (closed()) return done(ENOTCONN);
    inner_->ReadModifyWrite(slot, offset, scratch, fua, modify,
                            Begin(slot, runtime::StoreOp::kReadModifyWrite, done));
  }
  void CompareAndWrite(unsigned slot, uint64_t offset, CompareWriteOp* op,
                       backing::IoCompletion done) override {
    if (closed()) return done(ENOTCONN);
    inner_->CompareAndWrite(slot, offset, op,
                            Begin(slot, runtime::StoreOp::kCompareAndWrite, done));
  }
  void Prefetch(uint64_t offset, uint64_t len) override {
    if (!closed()) ForwardingStore::Prefetch(offset, len);
  }
  size_t MapRead(uint64_t offset, uint64_t len, std::span<backing::Segment> segs) override {
    return closed() ? 0
                    : ForwardingStore::MapRead(offset, len, segs);  // 0: Read, which says ENOTCONN
  }
  void Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf,
            backing::IoCompletion done) override {
    if (closed()) return done(ENOTCONN);
    inner_->Read(slot, offset, buf, Begin(slot, runtime::StoreOp::kRead, done));
  }
  void Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
             backing::IoCompletion done) override {
    if (closed()) return done(ENOTCONN);
    inner_->Write(slot, offset, buf, fua, Begin(slot, runtime::StoreOp::kWrite, done));
  }
  void Flush(unsigned slot, backing::IoCompletion done) override {
    if (closed()) return done(ENOTCONN);
    inner_->Flush(slot, Begin(slot, runtime::StoreOp::kFlush, done));
  }
  AtomicLimits atomic_limits() const override {
    return closed() ? kept_.atomic_limits : ForwardingStore::atomic_limits();
  }
  void WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                   backing::IoCompletion done) override {
    if (closed()) return done(ENOTCONN);
    inner_->WriteAtomic(slot, offset, buf, fua, Begin(slot, runtime::StoreOp::kWriteAtomic, done));
  }
  int Grow(uint64_t new_size_bytes) override {
    return closed() ? ENOTCONN : ForwardingStore::Grow(new_size_bytes);
  }

  // Call records slot `slot` owns (in flight or free).
  size_t RecordsForTest(unsigned slot) const;

 private:
  // One call in flight: who to tell, and when it started.
  struct Call {
    InstrumentedStore* store = nullptr;
    backing::IoCompletion done;
    uint64_t start_ns = 0;  // 0: not timed
    unsigned slot = 0;
    runtime::StoreOp op = runtime::StoreOp::kRead;
    Call* next_free = nullptr;
    Call* next_owned = nullptr;  // every record of the slot, for the destructor
  };
  // One reactor's records; cache-line aligned so reactors never share a line.
  struct alignas(64) Slot {
    Call* free = nullptr;
    Call* owned = nullptr;
  };

  // The completion to hand the wrapped store: `done` itself when the call is not recorded.
  backing::IoCompletion Begin(unsigned slot, runtime::StoreOp op, backing::IoCompletion done);
  static void Finish(void* ctx, int err);

  // What the LUN reports of its store while it is closed: as it was at Close.
  struct Kept {
    uint64_t size_bytes = 0;
    bool persistent = false;
    bool preferred = true;
    bool thin_provisioned = false;
    uint64_t allocated_bytes = 0;
    uint64_t unmap_granularity = 0;
    AtomicLimits atomic_limits;
  };

  // inner_ (ForwardingStore's) is written only while closed_ is set and no call can read it
  // (Close, TakeInner, Install).
  const std::string_view kind_;  // the stores' kinds are literals
  std::atomic<bool> closed_{false};
  Kept kept_;                  // set by Close, read while closed_
  mutable std::mutex why_mu_;  // offline_reason is not on the I/O path
  std::string why_;            // guarded by why_mu_
  runtime::LunStats* const stats_;
  const bool timed_;
  const std::unique_ptr<Slot[]> slots_;  // slots_[i] used only on reactor i's thread
};

}  // namespace iscsigw::api
