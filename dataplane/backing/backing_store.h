// BackingStore: where a LUN's blocks live. Implementations: RamStore (sparse memory), NullStore
// (reads zeros, drops writes), FileStore (regular file or block device through io_uring), RbdStore
// (a Ceph RBD image through librbd's asynchronous API).
//
// Threading: one store is shared by every reactor that serves its LUN. Each call names the reactor
// ("slot") it is made from; completions run on that same reactor thread, either inline before the
// call returns (ram, null) or later from that reactor's io_context (file, rbd). Calls on different
// slots may run concurrently; implementations make that safe without a lock on the read/write
// path.
// Offsets and lengths are in bytes and already range-checked by the SCSI layer.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace iscsigw::backing {

// A piece of store memory handed out for zero-copy Data-In. Valid while the store lives.
struct Segment {
  const uint8_t* data = nullptr;
  uint32_t len = 0;
};

// Completion: fn(ctx, err) with err 0 on success or a positive errno value.
struct IoCompletion {
  void (*fn)(void* ctx, int err) = nullptr;
  void* ctx = nullptr;
  void operator()(int err) const { fn(ctx, err); }
};

class BackingStore {
 public:
  virtual ~BackingStore() = default;

  virtual std::string_view kind() const = 0;  // "ram", "null", "file", "rbd"
  virtual uint64_t size_bytes() const = 0;
  // True when data survives a process restart (file, rbd); false for ram and null.
  virtual bool persistent() const = 0;
  // 0 when the store can serve I/O now, or ENOTCONN while it is not connected to its medium yet
  // (an rbd image still being retried); the SCSI layer answers TEST UNIT READY with it. Cheap and
  // never blocks: any thread, on the command path.
  virtual int ready() const { return 0; }
  // While ready() is not 0: why, for operators (GetLun). Not on the command path: may lock.
  virtual std::string offline_reason() const { return {}; }
  // Whether this gateway is a preferred path to the data. False only for a store that several
  // gateways share while another of them holds it (rbd: another client holds the image's
  // exclusive lock); ALUA reports the logical unit active/non-optimized through this gateway then,
  // active/optimized otherwise. Cheap, never blocks: any thread.
  virtual bool preferred() const { return true; }

  // --- Logical block provisioning (SBC-3 4.7) and atomic read-modify-write ----------------------
  // The SCSI layer builds UNMAP, WRITE SAME with UNMAP, GET LBA STATUS, COMPARE AND WRITE and
  // ORWRITE on these. ReadModifyWrite is atomic with respect to every Write and Unmap of the store
  // from any slot (they land entirely before or entirely after it). An Unmap and a Write of
  // overlapping ranges that are in flight together leave each block either written or zero.

  // True when Unmap deallocates storage (thin provisioning: LBPME=1). Unmapped ranges always read
  // back as zeros (LBPRZ=1).
  virtual bool thin_provisioned() const { return false; }
  // Bytes of storage the store holds now; a thick store holds all of size_bytes(). Any thread; may
  // make a system call, so it is for monitoring (read at scrape), never for the I/O path.
  virtual uint64_t allocated_bytes() const { return size_bytes(); }
  // Bytes (a power of two) of the unit in which Unmap deallocates; a partial unit is zeroed and
  // stays mapped.
  virtual uint64_t unmap_granularity() const { return 4096; }
  // Deallocates [offset, offset+len) as far as the granularity allows; the whole range reads as
  // zeros afterwards. ENOTSUP when the store is not thin provisioned.
  virtual void Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) {
    (void)slot;
    (void)offset;
    (void)len;
    done(ENOTSUP);
  }

  // One provisioning extent: the run of bytes from the queried offset with one status.
  struct Extent {
    bool mapped = true;
    uint64_t len = 0;  // > 0 on success, <= max_len
  };
  // Describes the extent that starts at offset (at most max_len bytes long) in *out, then runs
  // done. *out must stay valid until done runs.
  virtual void GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                               IoCompletion done) {
    (void)slot;
    (void)offset;
    *out = Extent{true, max_len};
    done(0);
  }

  // Atomic read-modify-write of [offset, offset+scratch.size()): the store reads the current bytes
  // into scratch and calls modify.fn(modify.ctx, scratch), which returns the bytes to write there
  // (scratch.size() of them) or an empty span to write nothing; no other write of the store lands
  // in between. modify may run on any thread; it must not call back into the store.
  struct ModifyFn {
    std::span<const uint8_t> (*fn)(void* ctx, std::span<uint8_t> current) = nullptr;
    void* ctx = nullptr;
  };
  virtual void ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch, bool fua,
                               ModifyFn modify, IoCompletion done) {
    (void)slot;
    (void)offset;
    (void)scratch;
    (void)fua;
    (void)modify;
    done(ENOTSUP);
  }

  // COMPARE AND WRITE (SBC-3 5.2): atomically, when [offset, offset+len) holds op->compare, writes
  // op->data there; otherwise writes nothing and sets op->miscompare to the offset (from `offset`)
  // of the first byte that differs. done(0) in both cases; an errno only when the store failed.
  // compare, data and scratch are all len bytes long; scratch is room for the current data, for
  // stores that compare themselves. *op and its buffers must stay valid until done runs.
  // The default is a ReadModifyWrite; a store whose medium compares and writes atomically itself
  // (rbd: on the cluster, against every client) overrides it.
  struct CompareWriteOp {
    std::span<const uint8_t> compare;
    std::span<const uint8_t> data;
    std::span<uint8_t> scratch;
    bool fua = false;
    uint64_t miscompare = kNoMiscompare;  // out
    static constexpr uint64_t kNoMiscompare = ~uint64_t{0};
  };
  virtual void CompareAndWrite(unsigned slot, uint64_t offset, CompareWriteOp* op,
                               IoCompletion done) {
    ReadModifyWrite(slot, offset, op->scratch, op->fua, ModifyFn{&CompareModify, op}, done);
  }

  // --- Atomic writes (SBC-4 4.29, WRITE ATOMIC(16)) ---------------------------------------------
  // A write of at most max_bytes that starts at a multiple of align_bytes (0: anywhere) lands
  // entirely or not at all: whatever ends it (the process killed, an error, and for persistent
  // stores the machine losing power), the range afterwards holds either all of the old bytes or
  // all of the new ones, and no other Write, Unmap or WriteAtomic of the store lands in between.
  // max_bytes 0: the store cannot write atomically. The SCSI layer checks size and alignment.
  struct AtomicLimits {
    uint64_t max_bytes = 0;
    uint64_t align_bytes = 0;
  };
  virtual AtomicLimits atomic_limits() const { return {}; }
  // The max_bytes of the stores that make any write atomic themselves (ram, null, file): it bounds
  // the file store's journal record and how long the write gate is held.
  static constexpr uint64_t kAtomicWriteMaxBytes = uint64_t{1} << 20;
  // fua as for Write. ENOTSUP when atomic_limits().max_bytes is 0.
  virtual void WriteAtomic(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                           IoCompletion done) {
    (void)slot;
    (void)offset;
    (void)buf;
    (void)fua;
    done(ENOTSUP);
  }

  // Hint (PRE-FETCH): [offset, offset+len) will be read soon. Never blocks the caller.
  virtual void Prefetch(uint64_t offset, uint64_t len) {
    (void)offset;
    (void)len;
  }

  // Zero-copy read: describes [offset, offset+len) as up to segs.size() pieces of store memory.
  // Returns the number of pieces used, or 0 when the store cannot map (file) or more pieces would
  // be needed; the caller then uses Read().
  virtual size_t MapRead(uint64_t offset, uint64_t len, std::span<Segment> segs) {
    (void)offset;
    (void)len;
    (void)segs;
    return 0;
  }

  virtual void Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) = 0;
  // fua: the data is on stable media before done runs.
  virtual void Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
                     IoCompletion done) = 0;
  // Makes every completed write durable (fdatasync for files).
  virtual void Flush(unsigned slot, IoCompletion done) = 0;

  // Grows the store online to new_size_bytes (>= size_bytes()) while I/O runs on any reactor; the
  // new range reads as zeros. Returns 0 or a positive errno value (ENOTSUP: this store cannot
  // grow). Any non-reactor thread; calls to Grow are serialised by the caller.
  virtual int Grow(uint64_t new_size_bytes) {
    (void)new_size_bytes;
    return ENOTSUP;
  }

 protected:
  // The ModifyFn of the default CompareAndWrite: ctx is the CompareWriteOp.
  static std::span<const uint8_t> CompareModify(void* ctx, std::span<uint8_t> current) {
    auto* op = static_cast<CompareWriteOp*>(ctx);
    const size_t n = op->compare.size();
    if (std::memcmp(op->compare.data(), current.data(), n) == 0) return op->data;
    size_t at = 0;
    while (op->compare[at] == current[at]) ++at;
    op->miscompare = at;
    return {};
  }
};

}  // namespace iscsigw::backing
