// AtomicJournal: the redo record that makes a file store's atomic writes (WRITE ATOMIC) all or
// nothing across a crash of the process or of the machine. The journal is a file beside the LUN's
// (JournalPath), made on first use and removed when the store closes.
//
// Write(offset, data) — blocking, for the store's pool — goes:
//   1. the range is reserved in the LUN file (fallocate), so that a full file system fails the
//      write here, with nothing written;
//   2. the record (a header: magic, offset, length, CRC32C of the data, CRC32C of the header; then
//      the data) is written to the journal and made durable (fdatasync);
//   3. the data is written in place while the store's write gate is held exclusively (no other
//      write or unmap of the store lands in between), then made durable (fdatasync of the LUN);
//   4. the record is retired (its header zeroed) and that made durable before Write returns: a
//      record that outlived its write could otherwise overwrite newer data at the next open.
// A crash before step 2 is durable leaves a record that fails its checksums, or none: the write
// did not happen. A crash after it leaves a valid record, which Recover writes in place (again)
// when the LUN opens next, before any I/O. Either way the range holds all old or all new bytes.
// Each atomic write costs three fdatasyncs and is durable when it completes, FUA or not.
//
// When step 3 fails after the record is durable, the range may be torn: the record stays for
// Recover to complete at the next open, and every later atomic write fails with EIO until then
// (ordinary writes go on). When step 4 fails the journal file is unlinked instead.
//
// Threading: Write from any thread, one record at a time (a mutex); Recover before the store
// serves. No exception escapes.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>

#include "dataplane/backing/write_gate.h"
#include "dataplane/base/status.h"
#include "dataplane/base/unique_fd.h"

namespace iscsigw::backing {

class AtomicJournal {
 public:
  // The journal of the LUN file at lun_path: "<lun_path>.atomic-journal".
  static std::string JournalPath(const std::string& lun_path);

  // What Recover found.
  enum class Found {
    kNothing,    // no journal file
    kDiscarded,  // a retired, torn or unfinished record: the write it held never happened
    kReplayed,   // a complete record, now written in place
  };
  struct Recovery {
    Found found = Found::kNothing;
    uint64_t offset = 0;  // kReplayed: the range written
    uint64_t len = 0;
  };
  // Completes the atomic write a crash interrupted, if any, into lun_fd (lun_size bytes) and
  // removes the journal file. A read-only LUN with a complete record is an error that says so
  // (serving it would show a torn range); a read-only open changes nothing.
  static Result<Recovery> Recover(const std::string& lun_path, int lun_fd, uint64_t lun_size,
                                  bool read_only);

  // max_len: the largest record's data (the journal file is preallocated to hold it).
  AtomicJournal(std::string lun_path, uint64_t max_len);
  ~AtomicJournal();  // removes the journal file it made, unless a record is left for Recover
  AtomicJournal(const AtomicJournal&) = delete;
  AtomicJournal& operator=(const AtomicJournal&) = delete;

  // Writes data at offset of lun_fd all or nothing (steps 1 to 4 above): 0 or a positive errno.
  // data.size() <= max_len.
  int Write(int lun_fd, uint64_t offset, std::span<const uint8_t> data, WriteGate& gate);

  // Header bytes before a record's data (tests).
  static constexpr uint64_t kHeaderBytes = 4096;

 private:
  int Open();    // makes the journal file; caller holds mu_
  int Retire();  // zeroes the header durably, else unlinks the file; caller holds mu_

  const std::string path_;
  const uint64_t max_len_;
  std::mutex mu_;
  UniqueFd fd_;               // the journal, once made
  bool record_left_ = false;  // a valid record stays for Recover: no more atomic writes
};

}  // namespace iscsigw::backing
