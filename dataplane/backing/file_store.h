// FileStore: a LUN on a regular file or a block device, read and written through io_uring (Asio
// random_access_file).
//
// Slots: the store holds random_access_files per reactor ("slot"), registered with that reactor's
// io_context, so a call made on slot i is submitted to reactor i's ring and completes on reactor
// i's thread. Asio keeps one read and one write in flight per file object, so each slot has up to
// `lanes_per_slot` of them (dups of one descriptor), a call going to a lane with nothing of its
// kind in flight: that many reads and writes reach the device at once, the initiator's queue
// depth rather than one. Nothing blocks a reactor:
//   - Read/Write loop over async_*_some_at until the whole range is done (short transfers happen).
//   - FUA writes go through a second descriptor opened with O_DSYNC: the kernel completes such a
//     write only once its data (and the metadata needed to read it back) is stable, which is
//     exactly a write followed by fdatasync, without a second round trip. io_uring honours O_DSYNC.
//   - Flush runs fdatasync on a small process-wide blocking pool (2 threads) and posts the
//   completion
//     back to the slot's io_context: Asio exposes no asynchronous fsync.
//
// Lifetime: the io_contexts must outlive the store, and the store must outlive every I/O started on
// it (the LUN that owns the store is kept alive by the tasks that use it). No exception escapes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/backing/backing_store.h"
#include "dataplane/backing/write_gate.h"
#include "dataplane/base/status.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace iscsigw::backing {

struct FileStoreOptions {
  std::string path;
  // Size of the LUN. 0: the existing file's or device's size. For a regular file that does not
  // exist yet (and read_only is false) the file is created and ftruncate'd to this size. An
  // existing file or device smaller than size_bytes is an error (the LUN would have blocks with
  // nowhere to go).
  uint64_t size_bytes = 0;
  bool read_only = false;  // O_RDONLY; writes then complete with EROFS
  // Most descriptor pairs per reactor: how many reads and how many writes one reactor keeps in
  // flight at once (Asio runs one read and one write at a time per file object). A slot opens
  // with one lane and adds one when every lane is busy, so an idle LUN holds 2 descriptors per
  // reactor and a busy one at most 2 * lanes_per_slot.
  unsigned lanes_per_slot = kDefaultLanes;
  static constexpr unsigned kDefaultLanes = 32;
};

class FileStore final : public BackingStore {
 public:
  // Opens (or creates) the file and registers one handle per io_context in `slots` (index = slot).
  // Errors name the path and the reason, e.g. "file store /x/y: open: No such file or directory".
  static Result<std::unique_ptr<FileStore>> Open(
      const FileStoreOptions& options, const std::vector<boost::asio::io_context*>& slots);

  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  std::string_view kind() const override { return "file"; }
  uint64_t size_bytes() const override { return size_bytes_.load(std::memory_order_relaxed); }
  bool persistent() const override { return true; }
  bool read_only() const { return read_only_; }
  const std::string& path() const { return path_; }

  void Read(unsigned slot, uint64_t offset, std::span<uint8_t> buf, IoCompletion done) override;
  void Write(unsigned slot, uint64_t offset, std::span<const uint8_t> buf, bool fua,
             IoCompletion done) override;
  void Flush(unsigned slot, IoCompletion done) override;

  // Thin provisioning for regular files: Unmap punches holes (fallocate PUNCH_HOLE|KEEP_SIZE, so
  // the range reads as zeros), GetProvisioning reports holes (lseek SEEK_DATA/SEEK_HOLE). These and
  // ReadModifyWrite run on the blocking pool, which posts the completion back to the slot; they
  // exclude unlocked writes through gate_ (while one runs, writes go through the pool too).
  bool thin_provisioned() const override { return regular_file_; }
  // A regular file's allocated blocks (fstat st_blocks * 512); a block device's whole size.
  uint64_t allocated_bytes() const override;
  void Unmap(unsigned slot, uint64_t offset, uint64_t len, IoCompletion done) override;
  void GetProvisioning(unsigned slot, uint64_t offset, uint64_t max_len, Extent* out,
                       IoCompletion done) override;
  void ReadModifyWrite(unsigned slot, uint64_t offset, std::span<uint8_t> scratch, bool fua,
                       ModifyFn modify, IoCompletion done) override;
  // posix_fadvise(WILLNEED) on the pool.
  void Prefetch(uint64_t offset, uint64_t len) override;
  // A regular file is extended with ftruncate (sparse); a block device must already be that big.
  int Grow(uint64_t new_size_bytes) override;
  // Lanes open on `slot` (for tests; read on that slot's reactor).
  size_t lanes(unsigned slot) const;

 private:
  struct Lane;
  struct Slot;
  FileStore(std::string path, uint64_t size_bytes, bool read_only, int fd);
  int AddLane(Slot& slot);  // 0 or the errno of dup/assign
  Lane& PickLane(Slot& slot, bool write);

  const std::string path_;
  std::atomic<uint64_t> size_bytes_;
  const bool read_only_;
  const int fd_;       // owned; used for fdatasync on the pool
  int dsync_fd_ = -1;  // owned; O_DSYNC (-1 when read-only)
  unsigned max_lanes_ = 1;
  std::vector<std::unique_ptr<Slot>> slots_;  // slots_[i] used only on reactor i's thread
  bool regular_file_ = false;                 // set by Open
  WriteGate gate_;                            // any thread
};

}  // namespace iscsigw::backing
