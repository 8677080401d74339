// BackingStore: where a LUN's blocks live. Implementations: RamStore (sparse memory), NullStore (reads
// zeros, drops writes), FileStore (regular file or block device through io_uring).
//
// Threading: one store is shared by every reactor that serves its LUN. Each call names the reactor
// ("slot") it is made from; completions run on that same reactor thread, either inline before the call
// returns (ram, null) or later from that reactor's io_context (file). Calls on different slots may run
// concurrently; implementations make that safe without a lock on the read/write path.
// Offsets and lengths are in bytes and already range-checked by the SCSI layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
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

  virtual std::string_view kind() const = 0;  // "ram", "null", "file"
  virtual uint64_t size_bytes() const = 0;
  // True when data survives a process restart (file); false for ram and null.
  virtual bool persistent() const = 0;

  // Zero-copy read: describes [offset, offset+len) as up to segs.size() pieces of store memory.
  // Returns the number of pieces used, or 0 when the store cannot map (file) or more pieces would be
  // needed; the caller then uses Read().
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
};

}  // namespace iscsigw::backing
