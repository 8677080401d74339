#include "dataplane/pdu/frame.h"

#include "dataplane/pdu/crc32c.h"

namespace iscsigw::pdu {

size_t FrameLength(const uint8_t* bhs, const FrameLimits& limits) {
  BhsView h(bhs);
  const uint32_t dsl = h.data_segment_length();
  size_t len = kBhsLength + h.total_ahs_bytes();
  if (limits.header_digest) len += kDigestLength;
  if (dsl > 0) {
    len += dsl + PadLength(dsl);
    if (limits.data_digest) len += kDigestLength;
  }
  return len;
}

FrameResult ParseFrame(std::span<const uint8_t> in, const FrameLimits& limits, Frame* frame) {
  if (in.size() < kBhsLength) return {FrameStatus::kNeedMore, 0};
  const uint8_t* p = in.data();
  BhsView h(p);
  const uint32_t ahs = h.total_ahs_bytes();
  const uint32_t dsl = h.data_segment_length();
  const size_t header_len = kBhsLength + ahs;
  const size_t header_total = header_len + (limits.header_digest ? kDigestLength : 0);

  // The header digest must be verified before any length in it is trusted.
  if (in.size() < header_total) return {FrameStatus::kNeedMore, header_total};
  if (limits.header_digest) {
    if (Crc32c(p, header_len) != LoadDigest(p + header_len)) {
      return {FrameStatus::kHeaderDigestError, 0};
    }
  }
  if (dsl > limits.max_data_segment_length) return {FrameStatus::kDataSegmentTooLong, 0};

  const size_t total = FrameLength(p, limits);
  if (in.size() < total) return {FrameStatus::kNeedMore, total};

  frame->bhs = p;
  frame->ahs = ahs ? p + kBhsLength : nullptr;
  frame->ahs_length = ahs;
  frame->data = dsl ? p + header_total : nullptr;
  frame->data_length = dsl;
  frame->total_length = total;
  frame->data_digest_error = false;

  if (dsl > 0 && limits.data_digest) {
    const uint32_t padded = dsl + PadLength(dsl);
    if (Crc32c(p + header_total, padded) != LoadDigest(p + header_total + padded)) {
      frame->data_digest_error = true;
      return {FrameStatus::kDataDigestError, total};
    }
  }
  return {FrameStatus::kComplete, total};
}

}  // namespace iscsigw::pdu
