#include "dataplane/backing/fault_store.h"

#include <random>

namespace iscsigw::backing {

int FaultErrnoFromName(std::string_view name) {
  if (name == "EIO") return EIO;
  if (name == "ENOSPC") return ENOSPC;
  if (name == "EROFS") return EROFS;
  return 0;
}

FaultStore::FaultStore(std::shared_ptr<BackingStore> inner, FaultSpec spec, DeferFn defer)
    : ForwardingStore(std::move(inner)), spec_(spec), defer_(std::move(defer)) {}

size_t FaultStore::MapRead(uint64_t offset, uint64_t len, std::span<Segment> segs) {
  if (spec_.active() && spec_.reads) return 0;  // every read goes through Read, to be judged
  return inner_->MapRead(offset, len, segs);
}

bool FaultStore::Selected(Op op, uint64_t offset, uint64_t len) {
  if (!spec_.active()) return false;
  const bool matches = (op == Op::kRead && spec_.reads) || (op == Op::kWrite && spec_.writes) ||
                       (op == Op::kFlush && spec_.flushes);
  if (!matches) return false;
  // Overlap of [offset, offset + len) and the spec's range; both fit in uint64_t (the state
  // file's check, and a store's size).
  if (spec_.length != 0 &&
      (len == 0 || offset >= spec_.offset + spec_.length || spec_.offset >= offset + len)) {
    return false;
  }
  if (matching_.fetch_add(1, std::memory_order_relaxed) < spec_.after_ops) return false;
  if (spec_.probability < 1.0) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    if (std::uniform_real_distribution<double>(0.0, 1.0)(rng) >= spec_.probability) return false;
  }
  if (spec_.max_faults != 0 &&
      faulted_.fetch_add(1, std::memory_order_relaxed) >= spec_.max_faults) {
    return false;
  }
  return true;
}

void FaultStore::Run(unsigned slot, Op op, uint64_t offset, uint64_t len, IoCompletion done,
                     std::function<void()> call) {
  if (!Selected(op, offset, len)) {
    call();
    return;
  }
  std::function<void()> step = std::move(call);
  if (const int err = spec_.error; err != 0) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    step = [done, err] { done(err); };
  }
  if (spec_.delay.count() > 0 && defer_) {
    defer_(slot, spec_.delay, std::move(step));
  } else {
    step();
  }
}

void FaultStore::Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) {
  Run(slot, Op::kRead, offset, buf.size(), done,
      [this, slot, offset, buf, done] { inner_->Read(slot, offset, buf, done); });
}

void FaultStore::Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                       IoCompletion done) {
  Run(slot, Op::kWrite, offset, buf.size(), done,
      [this, slot, offset, buf, fua, done] { inner_->Write(slot, offset, buf, fua, done); });
}

void FaultStore::WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                             IoCompletion done) {
  Run(slot, Op::kWrite, offset, buf.size(), done,
      [this, slot, offset, buf, fua, done] { inner_->WriteAtomic(slot, offset, buf, fua, done); });
}

void FaultStore::Flush(unsigned slot, IoCompletion done) {
  Run(slot, Op::kFlush, 0, 0, done, [this, slot, done] { inner_->Flush(slot, done); });
}

void FaultStore::Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) {
  Run(slot, Op::kWrite, offset, len, done,
      [this, slot, offset, len, done] { inner_->Unmap(slot, offset, len, done); });
}

void FaultStore::ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch,
                                 bool fua, ModifyFn modify, IoCompletion done) {
  Run(slot, Op::kWrite, offset, scratch.size(), done,
      [this, slot, offset, scratch, fua, modify, done] {
        inner_->ReadModifyWrite(slot, offset, scratch, fua, modify, done);
      });
}

void FaultStore::CompareAndWrite(unsigned slot, uint64_t offset, CompareWriteOp* op,
                                 IoCompletion done) {
  Run(slot, Op::kWrite, offset, op->data.size(), done,
      [this, slot, offset, op, done] { inner_->CompareAndWrite(slot, offset, op, done); });
}

}  // namespace iscsigw::backing
