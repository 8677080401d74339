// PDU framing (dataplane/pdu/frame.h) on a byte stream: digest settings and the receive limit from
// the first bytes, then PDUs parsed one after another. Checks the framer's contract: a complete
// frame lies inside the bytes given and within the negotiated limit, and a strict prefix of it is
// "need more", asking for no byte past the PDU, so a stream split anywhere parses the same.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "dataplane/pdu/frame.h"
#include "tests/fuzz/fuzz_input.h"

using namespace iscsigw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  pdu::FrameLimits limits;
  const uint8_t flags = in.Byte();
  limits.header_digest = (flags & 1) != 0;
  limits.data_digest = (flags & 2) != 0;
  limits.max_data_segment_length = 512u << (in.Byte() % 10);
  const uint8_t split = in.Byte();
  std::span<const uint8_t> stream = in.Rest();
  while (!stream.empty()) {
    pdu::Frame f;
    const pdu::FrameResult r = pdu::ParseFrame(stream, limits, &f);
    if (r.status == pdu::FrameStatus::kNeedMore) {
      if (r.needed != 0 && r.needed <= stream.size()) std::abort();  // had enough, said more
      break;
    }
    if (r.status != pdu::FrameStatus::kComplete && r.status != pdu::FrameStatus::kDataDigestError) {
      break;  // the connection closes or rejects; nothing more is parsed
    }
    const uint8_t* begin = stream.data();
    const uint8_t* end = begin + stream.size();
    if (f.total_length < 48 || f.total_length > stream.size()) std::abort();
    if (f.bhs != begin) std::abort();
    if (f.data_length > limits.max_data_segment_length) std::abort();
    if (f.data_length > 0 && (f.data < begin || f.data + f.data_length > end)) std::abort();
    if (f.ahs_length > 0 && (f.ahs < begin || f.ahs + f.ahs_length > end)) std::abort();
    if (f.total_length != pdu::FrameLength(f.bhs, limits)) std::abort();
    // The same PDU cut short anywhere is "need more", never a different frame; and the bytes it
    // asks for (the header, then the whole PDU) never reach into the next PDU.
    const size_t cut = split % f.total_length;
    pdu::Frame g;
    const pdu::FrameResult p = pdu::ParseFrame(stream.first(cut), limits, &g);
    if (p.status == pdu::FrameStatus::kComplete) std::abort();
    if (p.status == pdu::FrameStatus::kNeedMore && p.needed != 0 &&
        (p.needed <= cut || p.needed > f.total_length)) {
      std::abort();
    }
    stream = stream.subspan(f.total_length);
  }
  return 0;
}
