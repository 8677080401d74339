// OpPool: one reactor's records of a store's calls in flight. Records come in chunks and never
// move while the pool lives; a new chunk is allocated only when every record is in flight (once
// per new high of the depth in the store's life, never per I/O). Only the reactor that owns the
// pool uses it: no lock. Op must have a member `Op* next_free` and be default-constructible.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace iscsigw::backing {

template <typename Op, uint32_t kChunk = 64>
class OpPool {
 public:
  // A record reset to Op{}, counted in flight until Give.
  Op* Take() {
    if (free_ == nullptr) {
      auto chunk = std::make_unique<Op[]>(kChunk);
      for (uint32_t i = 0; i < kChunk; ++i) {
        chunk[i].next_free = free_;
        free_ = &chunk[i];
      }
      chunks_.push_back(std::move(chunk));
      records_ += kChunk;
    }
    Op* op = free_;
    free_ = op->next_free;
    *op = Op{};
    ++in_flight_;
    return op;
  }
  // Back to the pool: the caller is done with everything in the record.
  void Give(Op* op) {
    op->next_free = free_;
    free_ = op;
    --in_flight_;
  }

  uint32_t records() const { return records_; }
  uint32_t in_flight() const { return in_flight_; }

 private:
  std::vector<std::unique_ptr<Op[]>> chunks_;
  Op* free_ = nullptr;
  uint32_t records_ = 0;
  uint32_t in_flight_ = 0;
};

}  // namespace iscsigw::backing
