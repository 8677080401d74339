// ForwardingStore: a BackingStore that hands every call, unchanged, to the store it wraps (its
// inner store). The base of the stores that wrap another to change a few of its calls
// (FaultStore; the data plane's api::InstrumentedStore): each overrides only what it changes, and
// every call of BackingStore added later is forwarded by the one place here.
//
// Costs nothing beyond the wrapper's own virtual call: each forward is an inline call through the
// held pointer to the inner store's virtual function, as a hand-written one was. A derived store
// that needs the forward as part of its own override calls ForwardingStore::Name(...), which the
// compiler binds statically.
//
// Threading: as BackingStore. inner_ is set at construction; a derived store that replaces it
// (InstrumentedStore's reopen) does so only while no call can read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "dataplane/backing/backing_store.h"

namespace iscsigw::backing {

class ForwardingStore : public BackingStore {
 public:
  explicit ForwardingStore(std::shared_ptr<BackingStore> inner) : inner_(std::move(inner)) {}

  // The store this one forwards to.
  const std::shared_ptr<BackingStore>& inner() const { return inner_; }

  std::string_view kind() const override { return inner_->kind(); }
  uint64_t size_bytes() const override { return inner_->size_bytes(); }
  bool persistent() const override { return inner_->persistent(); }
  int ready() const override { return inner_->ready(); }
  std::string offline_reason() const override { return inner_->offline_reason(); }
  bool preferred() const override { return inner_->preferred(); }

  bool thin_provisioned() const override { return inner_->thin_provisioned(); }
  uint64_t allocated_bytes() const override { return inner_->allocated_bytes(); }
  uint64_t unmap_granularity() const override { return inner_->unmap_granularity(); }
  void Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) override {
    inner_->Unmap(slot, offset, len, done);
  }
  void GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                       IoCompletion done) override {
    inner_->GetProvisioning(slot, offset, max_len, out, done);
  }
  void ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch, bool fua,
                       ModifyFn modify, IoCompletion done) override {
    inner_->ReadModifyWrite(slot, offset, scratch, fua, modify, done);
  }
  void CompareAndWrite(unsigned slot, uint64_t offset, CompareWriteOp* op,
                       IoCompletion done) override {
    inner_->CompareAndWrite(slot, offset, op, done);
  }

  AtomicLimits atomic_limits() const override { return inner_->atomic_limits(); }
  void WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                   IoCompletion done) override {
    inner_->WriteAtomic(slot, offset, buf, fua, done);
  }

  void Prefetch(uint64_t offset, uint64_t len) override { inner_->Prefetch(offset, len); }
  size_t MapRead(uint64_t offset, uint64_t len, std::span<Segment> segs) override {
    return inner_->MapRead(offset, len, segs);
  }
  void Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) override {
    inner_->Read(slot, offset, buf, done);
  }
  void Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
             IoCompletion done) override {
    inner_->Write(slot, offset, buf, fua, done);
  }
  void Flush(unsigned slot, IoCompletion done) override { inner_->Flush(slot, done); }
  int Grow(uint64_t new_size_bytes) override { return inner_->Grow(new_size_bytes); }

 protected:
  std::shared_ptr<BackingStore> inner_;
};

}  // namespace iscsigw::backing
