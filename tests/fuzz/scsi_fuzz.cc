// SCSI dispatch (dataplane/scsi/engine.h) over RAM LUNs: a sequence of commands, each a CDB, an
// expected length and a Data-Out buffer, from one of two I_T nexuses to one of two LUNs (512- and
// 4096-byte blocks, so that EXTENDED COPY has a destination). Every parameter list reaches its
// parser this way: PERSISTENT RESERVE OUT, EXTENDED COPY, UNMAP, MODE SELECT, SANITIZE, COMPARE
// AND WRITE, WRITE SAME. The engine must complete every command exactly once (RAM stores complete
// inline), and its Data-In segments must add up to in_len and stay inside the buffer they use.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "dataplane/backing/ram_store.h"
#include "dataplane/scsi/engine.h"
#include "dataplane/scsi/task.h"
#include "tests/fuzz/fuzz_input.h"

using namespace iscsigw;

namespace {

constexpr uint32_t kBufBytes = 256 << 10;

struct World {
  World()
      : a("iqn.2026-11.io.iscsigw.fuzz:a,i,0x1", 1), b("iqn.2026-11.io.iscsigw.fuzz:b,i,0x2", 1) {
    target.name = "iqn.2026-11.io.iscsigw:fuzz";
    for (uint32_t i = 0; i < 2; ++i) {
      scsi::LunConfig cfg;
      cfg.id = i;
      cfg.block_size = i == 0 ? 512 : 4096;
      target.luns.push_back(std::make_shared<scsi::Lun>(
          cfg, std::shared_ptr<backing::BackingStore>(backing::NewRamStore(1 << 20))));
    }
  }
  scsi::TargetInfo target;
  scsi::Nexus a, b;
};

// The transport's data buffer: every command writes what it uses, so it is shared across inputs.
std::vector<uint8_t>& Buffer() {
  static std::vector<uint8_t> buf(kBufBytes);
  return buf;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Fresh LUNs per input: reservations and mode pages from one input must not leak into the next
  // (a crash would not reproduce from its own file).
  World w;
  std::vector<uint8_t>& buf = Buffer();
  fuzz::Input in(data, size);
  for (int n = 0; n < 16 && !in.empty(); ++n) {
    const uint8_t sel = in.Byte();
    scsi::Task t{};
    t.nexus = (sel & 1) != 0 ? &w.b : &w.a;
    t.lun = (sel >> 1) & 3;  // 2 and 3: no such LUN
    const auto cdb = in.Bytes(16);
    std::memcpy(t.cdb.data(), cdb.data(), cdb.size());
    t.cdb_len = 16;
    t.expected_length = static_cast<uint32_t>(in.U16()) << ((sel >> 3) & 7);
    if (t.expected_length > kBufBytes) t.expected_length = kBufBytes;
    t.buf = buf.data();
    t.buf_cap = kBufBytes;
    if ((sel & 0x40) != 0) {
      const auto out = in.Piece();
      std::memcpy(buf.data(), out.data(), out.size());
      t.dir = scsi::DataDirection::kWrite;
      t.data_out_len = static_cast<uint32_t>(out.size());
      if (t.expected_length < t.data_out_len) t.expected_length = t.data_out_len;
    } else if (t.expected_length > 0) {
      t.dir = scsi::DataDirection::kRead;
    }
    int completions = 0;
    t.complete = [](scsi::Task*, void* ctx) { ++*static_cast<int*>(ctx); };
    t.complete_ctx = &completions;
    scsi::Engine::Execute(w.target, t);
    if (completions != 1) std::abort();
    if (t.in_seg_count > t.in_segs.size()) std::abort();
    uint64_t in_bytes = 0;
    for (uint32_t i = 0; i < t.in_seg_count; ++i) {
      const auto& seg = t.in_segs[i];
      in_bytes += seg.len;
      // Data-In from the transport's buffer stays inside it.
      const uint8_t* b = buf.data();
      if (seg.data >= b && seg.data < b + kBufBytes && seg.data + seg.len > b + kBufBytes) {
        std::abort();
      }
    }
    if (in_bytes != t.in_len) std::abort();
  }
  return 0;
}
