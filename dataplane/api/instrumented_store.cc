#include "dataplane/api/instrumented_store.h"

#include <cerrno>
#include <string>
#include <utility>

namespace iscsigw::api {

InstrumentedStore::InstrumentedStore(std::shared_ptr<backing::BackingStore> inner,
                                     runtime::LunStats* stats, bool timed)
    : ForwardingStore(std::move(inner)),
      kind_(inner_->kind()),
      stats_(stats),
      timed_(timed),
      slots_(new Slot[stats->shards()]) {}

void InstrumentedStore::Close(std::string why) {
  kept_ = Kept{inner_->size_bytes(),       inner_->persistent(),      inner_->preferred(),
               inner_->thin_provisioned(), inner_->allocated_bytes(), inner_->unmap_granularity(),
               inner_->atomic_limits()};
  SetReason(std::move(why));
  closed_.store(true, std::memory_order_release);
}

void InstrumentedStore::SetReason(std::string why) {
  std::lock_guard lock(why_mu_);
  why_ = std::move(why);
}

std::shared_ptr<backing::BackingStore> InstrumentedStore::TakeInner() { return std::move(inner_); }

void InstrumentedStore::Install(std::shared_ptr<backing::BackingStore> inner) {
  inner_ = std::move(inner);
  closed_.store(false, std::memory_order_release);
}

std::string InstrumentedStore::offline_reason() const {
  if (!closed()) return ForwardingStore::offline_reason();
  std::lock_guard lock(why_mu_);
  return why_;
}

InstrumentedStore::~InstrumentedStore() {
  for (unsigned i = 0; i < stats_->shards(); ++i) {
    for (Call* c = slots_[i].owned; c != nullptr;) {
      Call* next = c->next_owned;
      delete c;
      c = next;
    }
  }
}

backing::IoCompletion InstrumentedStore::Begin(unsigned slot, runtime::StoreOp op,
                                               backing::IoCompletion done) {
  if (slot >= stats_->shards() || !runtime::Stats::Global().enabled()) return done;
  Slot& s = slots_[slot];
  Call* c = s.free;
  if (c != nullptr) {
    s.free = c->next_free;
  } else {
    // More calls in flight on this slot than ever before: grow the pool by one record.
    c = new Call();
    c->store = this;
    c->slot = slot;
    c->next_owned = s.owned;
    s.owned = c;
  }
  c->done = done;
  c->op = op;
  c->start_ns = timed_ ? runtime::NowNs() : 0;
  return backing::IoCompletion{&InstrumentedStore::Finish, c};
}

void InstrumentedStore::Finish(void* ctx, int err) {
  Call* c = static_cast<Call*>(ctx);
  InstrumentedStore* self = c->store;
  if (runtime::LunShard* shard = self->stats_->shard(c->slot)) {
    const int counted = err == ENOTSUP ? 0 : err;
    if (c->start_ns != 0) {
      shard->RecordStoreIo(c->op, runtime::NowNs() - c->start_ns, counted);
    } else if (counted != 0) {
      runtime::Add(shard->store_errors, 1);
    }
  }
  // The record goes back before the caller learns of the completion, which may issue the next
  // call on this slot at once.
  const backing::IoCompletion done = c->done;
  Slot& s = self->slots_[c->slot];
  c->next_free = s.free;
  s.free = c;
  done(err);
}

size_t InstrumentedStore::RecordsForTest(unsigned slot) const {
  size_t n = 0;
  for (const Call* c = slots_[slot].owned; c != nullptr; c = c->next_owned) ++n;
  return n;
}

}  // namespace iscsigw::api
