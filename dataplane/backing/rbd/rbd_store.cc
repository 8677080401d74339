#include "dataplane/backing/rbd/rbd_store.h"

#include <rados/librados.h>
#include <rbd/librbd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>
#include <mutex>
#include <span>
#include <string>

#include "base/log.h"
#include "dataplane/backing/rbd/rbd_internal.h"

namespace iscsigw::backing {
namespace {

namespace asio = boost::asio;

// GetProvisioning looks at no more than this many bytes per call (4096 objects of 4 MiB).
constexpr uint64_t kMaxProvisioningWalk = uint64_t{16} << 30;
// librbd's compare-and-write (Ceph 16) takes a range inside one 512-byte sector only.
constexpr uint64_t kNativeCompareSector = 512;

}  // namespace

namespace rbd_internal {

// Read-modify-writes, writes that wait behind one, and object map queries block a thread of this
// pool (shared by every rbd store), never a reactor.
asio::thread_pool& RbdPool() {
  static asio::thread_pool pool(2);
  return pool;
}

}  // namespace rbd_internal

using rbd_internal::RbdPool;

uint32_t RbdStore::in_flight(unsigned slot) const {
  return slot < slots_.size() ? slots_[slot]->ops.in_flight() : 0;
}

uint32_t RbdStore::op_records(unsigned slot) const {
  return slot < slots_.size() ? slots_[slot]->ops.records() : 0;
}

uint64_t RbdStore::native_compare_writes(unsigned slot) const {
  return slot < slots_.size() ? slots_[slot]->native_compare_writes : 0;
}

// ---------------------------------------------------------------------------------------------
// Records, submission and completion (reactor thread).

// A free record of the slot, with the store and slot set.
RbdStore::Op* RbdStore::TakeOp(Slot& slot) {
  Op* op = slot.ops.Take();
  op->run = &RbdStore::Run;
  op->store = this;
  op->slot = &slot;
  return op;
}

void RbdStore::Submit(Op* op) {
  op->slot->inbox->Expect();
  auto* image = static_cast<rbd_image_t>(image_);
  rbd_completion_t c = nullptr;
  int r = rbd_aio_create_completion(op, &RbdStore::Callback, &c);
  if (r == 0 && op->fua_flushing) {
    r = rbd_aio_flush(image, c);
    if (r < 0) rbd_aio_release(c);
  } else if (r == 0) {
    switch (op->kind) {
      case Op::Kind::kRead:
        r = rbd_aio_read(image, op->offset, op->len, reinterpret_cast<char*>(op->data), c);
        break;
      case Op::Kind::kWrite:
        r = rbd_aio_write(image, op->offset, op->len, reinterpret_cast<char*>(op->data), c);
        break;
      case Op::Kind::kFlush:
        r = rbd_aio_flush(image, c);
        break;
      case Op::Kind::kUnmap:
        r = rbd_aio_discard(image, op->offset, op->len, c);
        break;
      case Op::Kind::kCompareWrite: {
        const ssize_t n = rbd_aio_compare_and_write(
            image, op->offset, op->len, reinterpret_cast<const char*>(op->caw->compare.data()),
            reinterpret_cast<const char*>(op->caw->data.data()), c, &op->mismatch, 0);
        r = n < 0 ? static_cast<int>(n) : 0;
        break;
      }
      case Op::Kind::kPool:
        r = -EINVAL;  // never submitted to librbd
        break;
    }
    if (r < 0) rbd_aio_release(c);
  }
  if (r < 0) {
    // Refused before it started: completes through the inbox like any other, never inline.
    op->result = r;
    op->slot->inbox->Post(op);
  }
}

// librbd's thread: the result, then the record to its reactor. The record is not touched after
// Post (the reactor may reuse it at once).
void RbdStore::Callback(void* completion, void* arg) {
  auto* c = static_cast<rbd_completion_t>(completion);
  auto* op = static_cast<Op*>(arg);
  op->result = rbd_aio_get_return_value(c);
  rbd_aio_release(c);
  runtime::CompletionInbox* inbox = op->slot->inbox;
  inbox->Post(op);
}

void RbdStore::Run(runtime::CompletionInbox::Item* item) {
  auto* op = static_cast<Op*>(item);
  RbdStore* self = op->store;
  int err = op->result < 0 ? static_cast<int>(-op->result) : 0;
  const bool wrote = op->kind == Op::Kind::kWrite || op->kind == Op::Kind::kCompareWrite;
  if (wrote && op->fua && !op->fua_flushing && err == 0) {
    op->fua_flushing = true;  // the data has landed; now out of librbd's cache
    return self->Submit(op);
  }
  if (op->kind == Op::Kind::kCompareWrite && err == EILSEQ) {
    op->caw->miscompare = self->MiscompareIndex(op->mismatch, op->offset, op->len);
    err = 0;
  }
  if (err == ESHUTDOWN) self->NoteFenced();
  if (op->kind == Op::Kind::kFlush || op->fua_flushing) err = self->FlushError(err);
  self->Finish(op, err);
}

int RbdStore::FlushError(int err) const {
  // librbd's cache (write-around by default) acknowledges a write before the OSDs have it and
  // hands a failed write's error to the next flush that ends, once: whatever the flush's error
  // (an OSD op past rados_osd_op_timeout, a blocklist), a write already answered GOOD may be
  // lost, and a retried flush would find nothing left to fail. So it is a write error, never a
  // NOT READY that the initiator retries into GOOD.
  return err != 0 && volatile_cache_ ? EIO : err;
}

void RbdStore::NoteFenced() {
  if (cluster_->fenced.exchange(true)) return;
  log::Backing().error("rbd store {}: {}", name_, offline_reason());
}

bool RbdStore::preferred() const {
  return lock_watch_ == nullptr || lock_watch_->preferred.load(std::memory_order_relaxed);
}

int RbdStore::ready() const {
  return cluster_ != nullptr && cluster_->fenced.load(std::memory_order_relaxed) ? ESHUTDOWN : 0;
}

std::string RbdStore::offline_reason() const {
  if (ready() == 0) return {};
  return "the Ceph cluster blocklisted this gateway's client " + client_ +
         " (another client broke an exclusive lock it held, or an operator blocklisted it): no "
         "I/O until the LUN is created again or the daemon restarts";
}

uint64_t RbdStore::MiscompareIndex(uint64_t mismatch, uint64_t offset, uint64_t len) const {
  // librbd reports the image offset of the first differing byte, but Ceph 16 computes it from the
  // start of the object rather than of the compared range (ObjectCompareAndWriteRequest passes
  // the index within the range as an object offset); later releases give the true offset. A
  // native compare covers one sector inside one object, so the two forms never overlap: a value
  // below the range is Ceph 16's.
  const uint64_t from = mismatch >= offset ? offset : offset - offset % object_size_;
  return std::min(mismatch - from, len - 1);
}

void RbdStore::Finish(Op* op, int err) {
  Slot& slot = *op->slot;
  if (op->gated) gate_.ExitShared(slot.index);
  if (op->counted) slot.writes->done.fetch_add(1, std::memory_order_release);
  const IoCompletion done = op->done;
  slot.ops.Give(op);
  done(err);
}

// ---------------------------------------------------------------------------------------------
// The pool: blocking librbd calls that must not run on a reactor.

void RbdStore::CountWrite(Op* op) {
  if (op->slot->writes == nullptr) return;
  op->counted = true;
  op->slot->writes->started.fetch_add(1, std::memory_order_relaxed);
}

void RbdStore::SubmitToPool(Op* op) {
  // Every kind of pool work but kProvision writes, and needs the exclusive lock.
  if (op->work != Op::PoolWork::kProvision) CountWrite(op);
  op->kind = Op::Kind::kPool;
  op->slot->inbox->Expect();
  asio::post(RbdPool(), [this, op] { RunOnPool(op); });
}

void RbdStore::RunOnPool(Op* op) {
  auto* image = static_cast<rbd_image_t>(image_);
  auto* buf = reinterpret_cast<char*>(op->data);
  int64_t r = 0;
  auto write = [&](const char* data) -> int64_t {
    ssize_t n = rbd_write(image, op->offset, op->len, data);
    if (n < 0) return n;
    if (!op->fua) return 0;
    op->fua_flushing = true;  // its error is a flush's (Run)
    return rbd_flush(image);
  };
  switch (op->work) {
    case Op::PoolWork::kReadModifyWrite: {
      gate_.LockExclusive();
      const ssize_t n = rbd_read(image, op->offset, op->len, buf);
      if (n < 0) {
        r = n;
      } else if (static_cast<uint64_t>(n) != op->len) {
        r = -EIO;
      } else {
        const std::span<const uint8_t> out =
            op->modify.fn(op->modify.ctx, std::span<uint8_t>(op->data, op->len));
        if (!out.empty()) r = write(reinterpret_cast<const char*>(out.data()));
      }
      gate_.UnlockExclusive();
      break;
    }
    case Op::PoolWork::kWrite: {
      std::lock_guard<std::mutex> lock(gate_.mutex());
      r = write(buf);
      break;
    }
    case Op::PoolWork::kUnmap: {
      std::lock_guard<std::mutex> lock(gate_.mutex());
      r = rbd_discard(image, op->offset, op->len);
      break;
    }
    case Op::PoolWork::kCompareWrite: {
      std::lock_guard<std::mutex> lock(gate_.mutex());
      uint64_t mismatch = 0;
      const ssize_t n = rbd_compare_and_write(
          image, op->offset, op->len, reinterpret_cast<const char*>(op->caw->compare.data()),
          reinterpret_cast<const char*>(op->caw->data.data()), &mismatch, 0);
      if (n == -EILSEQ) {
        op->caw->miscompare = MiscompareIndex(mismatch, op->offset, op->len);
        r = 0;
      } else {
        op->fua_flushing = n >= 0 && op->fua;
        r = n < 0 ? n : (op->fua ? rbd_flush(image) : 0);
      }
      break;
    }
    case Op::PoolWork::kProvision: {
      // The run of one status from op->offset: the object map lists the objects that exist (a
      // partial object counts as mapped); the first gap after a mapped run, or the first object
      // after an unmapped one, ends it.
      struct Walk {
        uint64_t from, end;
        uint64_t run_end = 0;  // 0: no object seen yet
        bool mapped = false;
        static int Visit(uint64_t off, size_t len, int exists, void* arg) {
          auto* w = static_cast<Walk*>(arg);
          if (!exists) return 0;
          const uint64_t e = off + len;
          if (w->run_end == 0) {
            if (off > w->from) {
              w->run_end = off;  // unmapped up to the first object
              return -ECANCELED;
            }
            w->mapped = true;
            w->run_end = e;
            return 0;
          }
          if (off > w->run_end) return -ECANCELED;
          w->run_end = std::max(w->run_end, e);
          return 0;
        }
      } walk{op->offset, op->offset + op->len};
      uint64_t flags = 0;
      if (rbd_get_flags(image, &flags) == 0 && (flags & RBD_FLAG_OBJECT_MAP_INVALID) == 0 &&
          (flags & RBD_FLAG_FAST_DIFF_INVALID) == 0) {
        const int d =
            rbd_diff_iterate2(image, nullptr, op->offset, op->len, 1, 1, &Walk::Visit, &walk);
        if (d < 0 && d != -ECANCELED) {
          r = d;
          break;
        }
        const uint64_t end = walk.run_end == 0 ? walk.end : std::min(walk.run_end, walk.end);
        *op->extent = Extent{walk.mapped, end - op->offset};
      } else {
        *op->extent = Extent{true, op->len};  // no usable object map: mapped, as a thick store
      }
      break;
    }
  }
  op->result = r;
  runtime::CompletionInbox* inbox = op->slot->inbox;
  inbox->Post(op);
}

// ---------------------------------------------------------------------------------------------
// The calls.

void RbdStore::Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);  // caller bug: no such reactor
  if (buf.empty()) return done(0);
  Op* op = TakeOp(*slots_[slot]);
  op->kind = Op::Kind::kRead;
  op->offset = offset;
  op->data = buf.data();
  op->len = buf.size();
  op->done = done;
  Submit(op);
}

void RbdStore::Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                     IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  if (read_only_) return done(EROFS);
  if (buf.empty()) return done(0);
  Op* op = TakeOp(*slots_[slot]);
  op->kind = Op::Kind::kWrite;
  op->fua = fua;
  op->offset = offset;
  op->data = const_cast<uint8_t*>(buf.data());  // librbd only reads it
  op->len = buf.size();
  op->done = done;
  if (!gate_.TryEnterShared(slot)) {
    op->work = Op::PoolWork::kWrite;  // a read-modify-write is running: behind it
    return SubmitToPool(op);
  }
  op->gated = true;
  CountWrite(op);
  Submit(op);
}

void RbdStore::WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                           IoCompletion done) {
  // Inside one stripe unit, one object request: the OSD applies it whole (see AtomicUnit).
  if (atomic_unit_ == 0) return done(ENOTSUP);
  if (offset % atomic_unit_ != 0 || buf.size() > atomic_unit_) return done(EINVAL);
  Write(slot, offset, buf, fua, done);
}

void RbdStore::Flush(unsigned slot, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  Op* op = TakeOp(*slots_[slot]);
  op->kind = Op::Kind::kFlush;
  op->done = done;
  Submit(op);
}

void RbdStore::Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  if (read_only_) return done(EROFS);
  if (len == 0) return done(0);
  Op* op = TakeOp(*slots_[slot]);
  op->kind = Op::Kind::kUnmap;
  op->offset = offset;
  op->len = len;
  op->done = done;
  if (!gate_.TryEnterShared(slot)) {
    op->work = Op::PoolWork::kUnmap;
    return SubmitToPool(op);
  }
  op->gated = true;
  CountWrite(op);
  Submit(op);
}

void RbdStore::GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                               IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  const uint64_t end = std::min(offset + max_len, size_bytes());
  if (end <= offset) {
    *out = Extent{true, 0};
    return done(0);
  }
  if (!use_object_map_) {
    *out = Extent{true, end - offset};
    return done(0);
  }
  Op* op = TakeOp(*slots_[slot]);
  op->work = Op::PoolWork::kProvision;
  op->offset = offset;
  // One query walks at most this much of the object map; a longer run is reported in pieces.
  op->len = std::min(end - offset, kMaxProvisioningWalk);
  op->extent = out;
  op->done = done;
  SubmitToPool(op);
}

void RbdStore::ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch, bool fua,
                               ModifyFn modify, IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  if (read_only_) return done(EROFS);
  Op* op = TakeOp(*slots_[slot]);
  op->work = Op::PoolWork::kReadModifyWrite;
  op->fua = fua;
  op->offset = offset;
  op->data = scratch.data();
  op->len = scratch.size();
  op->modify = modify;
  op->done = done;
  SubmitToPool(op);
}

void RbdStore::CompareAndWrite(unsigned slot, uint64_t offset, CompareWriteOp* caw,
                               IoCompletion done) {
  if (slot >= slots_.size()) return done(EINVAL);
  if (read_only_) return done(EROFS);
  const uint64_t len = caw->compare.size();
  if (len == 0) return done(0);
  const bool native = len <= kNativeCompareSector &&
                      offset / kNativeCompareSector == (offset + len - 1) / kNativeCompareSector;
  if (!native) {
    // Longer than librbd compares: atomic against this process's writes (see rbd_store.h).
    return BackingStore::CompareAndWrite(slot, offset, caw, done);
  }
  Slot& s = *slots_[slot];
  Op* op = TakeOp(s);
  op->offset = offset;
  op->len = len;
  op->caw = caw;
  op->fua = caw->fua;
  op->done = done;
  if (!gate_.TryEnterShared(slot)) {
    op->work = Op::PoolWork::kCompareWrite;
    return SubmitToPool(op);
  }
  ++s.native_compare_writes;
  op->kind = Op::Kind::kCompareWrite;
  op->gated = true;
  CountWrite(op);
  Submit(op);
}

}  // namespace iscsigw::backing
