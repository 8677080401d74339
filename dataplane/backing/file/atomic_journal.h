// AtomicJournal: the redo record that makes a file store's atomic writes (WRITE ATOMIC) all or
// nothing across a crash of the process or of the machine. Each store that writes atomically has a
// journal file of its own beside the LUN's ("<lun path>.atomic-journal.<random>", made on first
// use, held under an OFD lock while the store lives, removed when it closes).
//
// A write (Submit) goes, on a small process-wide pool, one at a time per journal:
//   1. the range is reserved in the LUN file (fallocate: unshared where the file system shares
//      blocks, then allocated), so that a full file system fails the write here, nothing written;
//   2. the record (a header: magic, offset, length, the LUN file's identity (device, inode, birth
//      time), CRC32C of the data and of the header; then the data) is written to the journal and
//      made durable (fdatasync);
//   3. the data is written in place while the store's write gate is held exclusively (no read,
//      write or unmap of the store runs meanwhile), then made durable (fdatasync of the LUN);
//   4. the record is retired (its header zeroed) and that made durable before the write
//      completes: a record outliving its write could otherwise overwrite later writes at the next
//      open. (A write that overlaps this one in the window between 3 and 4 was sent before this one
//      completed: replaying this one after it is one of the orders the two may land in.)
// A crash before step 2 is durable leaves no record, a torn one (its checksums fail) or a whole
// one; a crash after it leaves a whole one. Recover, when the LUN opens next and before any I/O,
// writes a whole record of this file in place (again) and discards the rest. Either way the range
// holds all old or all new bytes. Each atomic write costs three fdatasyncs and is durable when it
// completes, FUA or not.
//
// When step 3 fails the range may be torn: the record stays for Recover to complete at the next
// open, and the journal reports it (record_left()), so that the store stops serving (NOT READY)
// until then rather than show the torn range or take writes the replay would undo. When step 4
// fails the journal is unlinked instead; if that fails too, the live record is reported the same.
//
// Threading: Submit from any thread; requests run in order on the journal pool and their finish
// runs there. Recover before the store serves. No exception escapes.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"
#include "dataplane/backing/write_gate.h"

namespace iscsigw::backing {

class AtomicJournal {
 public:
  // What Recover found.
  enum class Found {
    kNothing,    // no journal of this LUN file
    kDiscarded,  // retired, torn or unfinished records, or another file's: none happened
    kReplayed,   // a complete record of this file, now written in place
  };
  struct Recovery {
    Found found = Found::kNothing;
    uint64_t offset = 0;  // kReplayed: the (last) range written
    uint64_t len = 0;
    int replayed = 0;  // records written in place
  };
  // Completes the atomic writes a crash interrupted, if any, into lun_fd (lun_size bytes) and
  // removes the journals that are not a live store's. A read-only LUN with a complete record is an
  // error that says so (serving it would show a torn range); a read-only open changes nothing.
  static Result<Recovery> Recover(const std::string& lun_path, int lun_fd, uint64_t lun_size,
                                  bool read_only);
  // Whether `name` (a directory entry beside the LUN file `lun_name`) is one of its journals.
  static bool IsJournalOf(const std::string& name, const std::string& lun_name);

  // One atomic write: owned by the caller until finish runs (on the journal pool).
  struct Request {
    uint64_t offset = 0;
    std::span<const uint8_t> data;
    void (*finish)(Request* request, int err) = nullptr;
    void* ctx = nullptr;      // the caller's
    Request* next = nullptr;  // the journal's queue
  };
  // The store's gates, both held exclusively while a write goes in place: the one its writes and
  // unmaps hold shared, and the one its reads hold shared.
  struct Gates {
    WriteGate& writes;
    WriteGate& reads;
  };

  // lun_fd (owned by the caller, open for writing while the journal lives) and gates belong to
  // the store; max_len: the largest record's data (the journal file is preallocated to hold it).
  AtomicJournal(std::string lun_path, int lun_fd, Gates gates, uint64_t max_len);
  ~AtomicJournal();  // removes the journal file it made, unless a record is left for Recover
  AtomicJournal(const AtomicJournal&) = delete;
  AtomicJournal& operator=(const AtomicJournal&) = delete;

  // Queues a write of request->data at request->offset, all or nothing (steps 1 to 4 above);
  // finish(request, 0 or a positive errno) runs once it is done. data.size() <= max_len.
  void Submit(Request* request);
  // True once a write failed in place, or its record could not be retired: a live record.
  bool record_left() const { return record_left_.load(std::memory_order_acquire); }
  // The journal file (empty until the first write made it; read it once a write has finished).
  std::string path() const;

  // Header bytes before a record's data (tests).
  static constexpr uint64_t kHeaderBytes = 4096;

 private:
  void Drain();  // on the pool: runs queued requests until none is left
  int Write(uint64_t offset, std::span<const uint8_t> data);
  int Open();    // makes the journal file
  int Retire();  // zeroes the header durably, else unlinks the file

  const std::string lun_path_;
  const int lun_fd_;
  Gates gates_;
  const uint64_t max_len_;
  uint8_t identity_[28] = {};  // the LUN file's device, inode and birth time, as the header has it

  // The queue (any thread).
  std::mutex queue_mu_;
  Request* head_ = nullptr;
  Request** tail_ = &head_;
  bool draining_ = false;

  // Used by the one Drain running at a time.
  std::string path_;
  UniqueFd fd_;  // the journal, once made
  std::atomic<bool> record_left_{false};
};

}  // namespace iscsigw::backing
