// PDU framing: finds one complete PDU (BHS, AHS, header digest, data segment, padding, data digest)
// at the front of a byte range. Bytes in; "need more", a frame, or an error out. No I/O, no
// allocation. RFC 7143 11.2: the PDU layout; 13.1: digests cover the BHS+AHS and the padded data
// segment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "dataplane/pdu/bhs.h"

namespace iscsigw::pdu {

struct FrameLimits {
  uint32_t max_data_segment_length = 8192;  // our declared MaxRecvDataSegmentLength
  bool header_digest = false;
  bool data_digest = false;
};

enum class FrameStatus : uint8_t {
  kNeedMore,  // not enough bytes yet; `needed` says how many the whole PDU takes (0 if unknown)
  kComplete,  // `frame` describes a PDU of `frame.total_length` bytes
  kHeaderDigestError,   // the stream cannot be trusted any more: close the connection
  kDataSegmentTooLong,  // DataSegmentLength exceeds the declared limit: protocol error
  kDataDigestError,     // header is sound; the PDU must be rejected (RFC 7143 7.8 / 11.17.1)
};

struct Frame {
  const uint8_t* bhs = nullptr;
  const uint8_t* ahs = nullptr;
  uint32_t ahs_length = 0;
  const uint8_t* data = nullptr;
  uint32_t data_length = 0;  // DataSegmentLength, without padding
  size_t total_length = 0;   // bytes the PDU occupies in the stream
  // The data segment failed its digest (status kDataDigestError): the header is sound, the data
  // must not be used.
  bool data_digest_error = false;

  BhsView header() const { return BhsView(bhs); }
};

struct FrameResult {
  FrameStatus status = FrameStatus::kNeedMore;
  size_t needed = 0;
};

// Total on-wire length of the PDU whose BHS is at p (given the digest settings).
size_t FrameLength(const uint8_t* bhs, const FrameLimits& limits);

FrameResult ParseFrame(std::span<const uint8_t> in, const FrameLimits& limits, Frame* frame);

}  // namespace iscsigw::pdu
