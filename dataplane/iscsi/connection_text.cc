// Connection (connection.h) in full feature phase: Text requests (RFC 7143 11.10, 11.11), that
// is operational negotiation and SendTargets discovery, with continuation both ways.
#include <algorithm>
#include <string>
#include <vector>

#include "dataplane/iscsi/connection.h"
#include "dataplane/iscsi/session.h"

namespace iscsigw::iscsi {

using pdu::BhsView;
using pdu::Opcode;
using pdu::RejectReason;

bool Connection::HandleText(const pdu::Frame& f) {
  last_request_ = std::chrono::steady_clock::now();  // a discovery session's idle clock
  BhsView h(f.bhs);
  if (!AcceptCmdSn(h)) return true;
  const uint32_t ttt = h.ttt();
  // A new request (reserved TTT), or the next piece of one continued with C=1: the initiator
  // sends it with the TTT our empty answer carried (RFC 7143 11.10.2, 11.10.4).
  const bool request_piece = ttt == pdu::kReservedTag || (text_in_continued_ && ttt == text_ttt_);
  if (request_piece) {
    text_out_.clear();
    text_out_offset_ = 0;
    if (f.data_length > 0 && !text_in_.Append({f.data, f.data_length}).ok()) {
      // Bounded (pdu::TextAccumulator, 64 KiB): the request is dropped whole.
      SendReject(f.bhs, RejectReason::kProtocolError);
      text_in_.Clear();
      text_in_continued_ = false;
      return true;
    }
    text_in_continued_ = h.cont();
    if (h.cont()) {
      // RFC 7143 11.10.2: more of the request follows; answer with an empty response.
      text_ttt_ = next_text_ttt_++;
      if (text_ttt_ == pdu::kReservedTag) text_ttt_ = next_text_ttt_++;
    } else {
      auto keys = text_in_.Take();
      if (!keys.ok()) {
        SendReject(f.bhs, RejectReason::kProtocolError);
        return true;
      }
      std::vector<pdu::KeyValue> rest;
      for (const auto& kv : keys.value()) {
        if (kv.key != "SendTargets") {
          rest.push_back(kv);
          continue;
        }
        // RFC 7143 13.3 and Appendix C: All (discovery), the session's own target (empty), or one
        // named target; only targets this initiator may log in to are listed.
        auto snap = gw_.snapshot();
        const auto& advertised = gw_.options().advertise;
        const std::string local = advertised.empty() ? PortalAddress() : std::string();
        for (const auto& tc : snap->targets) {
          const bool wanted = kv.value == "All"  ? true
                              : kv.value.empty() ? (session_->target() &&
                                                    session_->target()->info.name == tc->info.name)
                                                 : kv.value == tc->info.name;
          if (!wanted || !tc->Allows(session_->initiator_name(), peer_)) continue;
          pdu::AppendKey("TargetName", tc->info.name, &text_out_);
          const std::string tag = "," + std::to_string(tc->info.tpgt);
          for (const auto& a : advertised) pdu::AppendKey("TargetAddress", a + tag, &text_out_);
          if (!local.empty()) pdu::AppendKey("TargetAddress", local + tag, &text_out_);
        }
      }
      if (!rest.empty()) {
        std::vector<pdu::KeyValue> answers;
        if (negotiator_->ProcessFullFeature(rest, &answers) != LoginStatus::kSuccess) {
          SendReject(f.bhs, RejectReason::kProtocolError);
          return true;
        }
        pdu::EncodeText(answers, &text_out_);
      }
      text_ttt_ = pdu::kReservedTag;
    }
  } else if (ttt != text_ttt_) {
    SendReject(f.bhs, RejectReason::kInvalidPduField);
    return true;
  }
  // Send the next piece of the response; C=1 with a transfer tag while more remains.
  ControlPdu* c = NewControl();
  const size_t remain = text_out_.size() - text_out_offset_;
  const size_t n = std::min<size_t>(remain, max_send_segment_);
  c->data.assign(text_out_.begin() + text_out_offset_, text_out_.begin() + text_out_offset_ + n);
  text_out_offset_ += n;
  const bool more = text_out_offset_ < text_out_.size();
  const bool request_more = h.cont() && request_piece;
  if (more) {
    text_ttt_ = next_text_ttt_++;
    if (text_ttt_ == pdu::kReservedTag) text_ttt_ = next_text_ttt_++;
  }
  c->hdr.SetOpcode(Opcode::kTextResponse);
  c->hdr.SetFlags(more ? 0x40 : (request_more ? 0x00 : 0x80));
  c->hdr.SetLunRaw(h.lun_raw());
  c->hdr.SetItt(h.itt());
  c->hdr.Set32(20, (more || request_more) ? text_ttt_ : pdu::kReservedTag);
  c->assign_stat_sn = true;
  QueueControl(c);
  if (!more && !request_more) {
    text_out_.clear();
    text_out_offset_ = 0;
  }
  return true;
}

}  // namespace iscsigw::iscsi
