// A minimal blocking iSCSI initiator for tests: a POSIX TCP socket, PDUs built by hand with
// pdu::Bhs, and reads bounded by a poll deadline so that a test can fail but never hang.
// It keeps the initiator's sequence numbers (CmdSN, ExpStatSN) and the negotiated digests, and
// verifies the digests of every PDU it receives. Test-only; single-threaded.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/endian.h"
#include "dataplane/pdu/bhs.h"
#include "dataplane/pdu/crc32c.h"
#include "dataplane/pdu/opcodes.h"
#include "dataplane/pdu/text.h"

namespace iscsigw::iscsi::test {

using namespace std::chrono_literals;

// One PDU as received, with the result of the digest checks.
struct Pdu {
  std::array<uint8_t, pdu::kBhsLength> bhs{};
  std::vector<uint8_t> data;
  bool header_digest_ok = true;
  bool data_digest_ok = true;

  pdu::BhsView h() const { return pdu::BhsView(bhs.data()); }
  pdu::Opcode opcode() const { return h().opcode(); }
  uint8_t flags() const { return bhs[1]; }
  uint32_t itt() const { return h().itt(); }
  uint32_t ttt() const { return h().u32(20); }
  uint32_t stat_sn() const { return h().u32(24); }
  uint32_t exp_cmd_sn() const { return h().u32(28); }
  uint32_t max_cmd_sn() const { return h().u32(32); }
  uint32_t data_sn() const { return h().u32(36); }  // Data-In DataSN, R2TSN, ExpDataSN
  uint32_t buffer_offset() const { return h().u32(40); }
  uint32_t residual() const { return h().u32(44); }        // SCSI Response, Data-In with S
  uint32_t desired_length() const { return h().u32(44); }  // R2T
  uint8_t response() const { return bhs[2]; }  // SCSI/TMF/Logout response, Reject reason
  uint8_t scsi_status() const { return bhs[3]; }
  uint16_t login_status() const { return static_cast<uint16_t>((bhs[36] << 8) | bhs[37]); }
  uint16_t tsih() const { return h().tsih(); }

  // Login and text responses: the key=value pairs of the data segment.
  std::map<std::string, std::string> Keys() const {
    std::map<std::string, std::string> m;
    auto kvs = pdu::ParseText(data);
    if (kvs.ok()) {
      for (auto& kv : kvs.value()) m[kv.key] = kv.value;
    }
    return m;
  }
  // Every key=value pair in order, repeats included (a SendTargets answer repeats TargetName and
  // TargetAddress, which pdu::ParseText refuses in a negotiation).
  std::vector<std::pair<std::string, std::string>> KeyList() const {
    std::vector<std::pair<std::string, std::string>> v;
    size_t start = 0;
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] != 0) continue;
      const std::string kv(data.begin() + start, data.begin() + i);
      const auto eq = kv.find('=');
      v.emplace_back(kv.substr(0, eq), eq == std::string::npos ? "" : kv.substr(eq + 1));
      start = i + 1;
    }
    return v;
  }
};

// Sense key, ASC and ASCQ of a SCSI Response's sense data (fixed or descriptor format).
struct Sense {
  uint8_t key = 0, asc = 0, ascq = 0;
  friend bool operator==(const Sense&, const Sense&) = default;
};
inline std::optional<Sense> ParseSense(const Pdu& resp) {
  if (resp.data.size() < 2) return std::nullopt;
  const uint16_t len = LoadBe16(resp.data.data());
  if (len + 2u > resp.data.size() || len < 4) return std::nullopt;
  const uint8_t* s = resp.data.data() + 2;
  const uint8_t code = s[0] & 0x7f;
  if (code == 0x72 || code == 0x73) return Sense{static_cast<uint8_t>(s[1] & 0xf), s[2], s[3]};
  if (len < 14) return std::nullopt;
  return Sense{static_cast<uint8_t>(s[2] & 0xf), s[12], s[13]};
}

enum class RecvStatus { kOk, kTimeout, kClosed };

struct SendOptions {
  bool corrupt_header_digest = false;
  bool corrupt_data_digest = false;
};

class TestInitiator {
 public:
  TestInitiator() = default;
  TestInitiator(const TestInitiator&) = delete;
  TestInitiator& operator=(const TestInitiator&) = delete;
  ~TestInitiator() {
    if (fd_ >= 0) ::close(fd_);
  }

  // portal: "127.0.0.1:PORT".
  bool Connect(const std::string& portal) {
    const auto colon = portal.rfind(':');
    if (colon == std::string::npos) return false;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(std::stoi(portal.substr(colon + 1))));
    if (::inet_pton(AF_INET, portal.substr(0, colon).c_str(), &sa.sin_addr) != 1) return false;
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return false;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    timeval tv{5, 0};  // a send can never block a test for long either
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  }

  void SetDigests(bool header, bool data) {
    header_digest_ = header;
    data_digest_ = data;
  }

  // Sequence numbers kept by the initiator.
  uint32_t cmd_sn = 1;
  uint32_t exp_stat_sn = 0;
  uint16_t tsih = 0;
  std::array<uint8_t, 6> isid{0x80, 0x12, 0x34, 0x56, 0x00, 0x01};
  uint32_t NextItt() { return next_itt_++; }

  bool SendRaw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    while (n > 0) {
      const ssize_t w = ::send(fd_, b, n, MSG_NOSIGNAL);
      if (w <= 0) {
        if (w < 0 && errno == EINTR) continue;
        return false;
      }
      b += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  // Sends one PDU: the BHS (DataSegmentLength set from data), digests when negotiated.
  bool Send(pdu::Bhs h, std::span<const uint8_t> data = {}, SendOptions opt = {},
            bool login_phase = false) {
    h.SetDataSegmentLength(static_cast<uint32_t>(data.size()));
    const bool hd = header_digest_ && !login_phase;
    const bool dd = data_digest_ && !login_phase;
    std::vector<uint8_t> out(h.b.begin(), h.b.end());
    if (hd) {
      uint32_t crc = pdu::Crc32c(out.data(), out.size());
      if (opt.corrupt_header_digest) crc ^= 0x1;
      out.resize(out.size() + 4);
      pdu::StoreDigest(out.data() + out.size() - 4, crc);
    }
    if (!data.empty()) {
      const size_t start = out.size();
      out.insert(out.end(), data.begin(), data.end());
      out.resize(out.size() + pdu::PadLength(static_cast<uint32_t>(data.size())), 0);
      if (dd) {
        uint32_t crc = pdu::Crc32c(out.data() + start, out.size() - start);
        if (opt.corrupt_data_digest) crc ^= 0x80000000;
        out.resize(out.size() + 4);
        pdu::StoreDigest(out.data() + out.size() - 4, crc);
      }
    }
    return SendRaw(out.data(), out.size());
  }

  // Receives one PDU within the timeout. Updates ExpStatSN from responses that carry a StatSN.
  RecvStatus Recv(Pdu* p, std::chrono::milliseconds timeout = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const bool hd = header_digest_ && !login_phase_rx_;
    const bool dd = data_digest_ && !login_phase_rx_;
    std::vector<uint8_t> hdr(pdu::kBhsLength + (hd ? 4 : 0));
    if (auto s = ReadExact(hdr.data(), hdr.size(), deadline); s != RecvStatus::kOk) return s;
    std::memcpy(p->bhs.data(), hdr.data(), pdu::kBhsLength);
    p->header_digest_ok =
        !hd || pdu::Crc32c(hdr.data(), pdu::kBhsLength) == pdu::LoadDigest(hdr.data() + 48);
    const uint32_t ahs = p->h().total_ahs_bytes();
    const uint32_t dsl = p->h().data_segment_length();
    if (ahs > 0) {
      std::vector<uint8_t> skip(ahs);
      if (auto s = ReadExact(skip.data(), ahs, deadline); s != RecvStatus::kOk) return s;
    }
    p->data.clear();
    p->data_digest_ok = true;
    if (dsl > 0) {
      const uint32_t padded = dsl + pdu::PadLength(dsl);
      std::vector<uint8_t> body(padded + (dd ? 4 : 0));
      if (auto s = ReadExact(body.data(), body.size(), deadline); s != RecvStatus::kOk) return s;
      p->data_digest_ok =
          !dd || pdu::Crc32c(body.data(), padded) == pdu::LoadDigest(body.data() + padded);
      p->data.assign(body.begin(), body.begin() + dsl);
    }
    const auto op = p->opcode();
    const bool has_stat_sn =
        op == pdu::Opcode::kScsiResponse || op == pdu::Opcode::kTaskMgmtResponse ||
        op == pdu::Opcode::kLoginResponse || op == pdu::Opcode::kTextResponse ||
        op == pdu::Opcode::kLogoutResponse || op == pdu::Opcode::kReject ||
        (op == pdu::Opcode::kNopIn && p->itt() != pdu::kReservedTag) ||
        (op == pdu::Opcode::kDataIn && (p->flags() & 0x01));
    if (has_stat_sn) exp_stat_sn = p->stat_sn() + 1;
    return RecvStatus::kOk;
  }

  // Receives one PDU and returns it, or nothing on timeout/close.
  std::optional<Pdu> Next(std::chrono::milliseconds timeout = 5s) {
    Pdu p;
    if (Recv(&p, timeout) != RecvStatus::kOk) return std::nullopt;
    return p;
  }

  // True when nothing at all arrives within `quiet` (and the connection stays open).
  bool Quiet(std::chrono::milliseconds quiet) {
    pollfd pfd{fd_, POLLIN, 0};
    const int r = ::poll(&pfd, 1, static_cast<int>(quiet.count()));
    return r == 0;
  }

  // True when the target closes the connection within the timeout; PDUs before the close are
  // collected into *before when given.
  bool WaitClosed(std::chrono::milliseconds timeout = 5s, std::vector<Pdu>* before = nullptr) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      Pdu p;
      const auto s =
          Recv(&p, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
      if (s == RecvStatus::kClosed) return true;
      if (s == RecvStatus::kTimeout) return false;
      if (before != nullptr) before->push_back(std::move(p));
    }
  }

  // ----- PDU builders (RFC 7143 11) -----

  pdu::Bhs LoginRequest(uint8_t csg, uint8_t nsg, bool transit, uint32_t itt) const {
    pdu::Bhs h;
    h.SetOpcode(pdu::Opcode::kLoginRequest);
    h.b[0] |= 0x40;  // login requests are always immediate
    h.SetFlags(static_cast<uint8_t>((transit ? 0x80 : 0) | (csg << 2) | nsg));
    std::memcpy(&h.b[8], isid.data(), 6);
    h.Set16(14, tsih);
    h.SetItt(itt);
    h.Set16(20, 1);  // CID
    h.Set32(24, cmd_sn);
    h.Set32(28, exp_stat_sn);
    return h;
  }

  // Sends one login request with the keys and returns the response (login phase: no digests).
  std::optional<Pdu> Login(const std::vector<std::pair<std::string, std::string>>& keys,
                           uint8_t csg = 1, uint8_t nsg = 3, bool transit = true,
                           std::optional<pdu::Bhs> custom = std::nullopt) {
    pdu::Bhs h = custom ? *custom : LoginRequest(csg, nsg, transit, NextItt());
    std::vector<uint8_t> text;
    for (const auto& [k, v] : keys) pdu::AppendKey(k, v, &text);
    login_phase_rx_ = true;
    if (!Send(h, text, {}, /*login_phase=*/true)) return std::nullopt;
    auto r = Next();
    if (r && r->opcode() == pdu::Opcode::kLoginResponse && r->login_status() == 0 &&
        (r->flags() & 0x80) && (r->flags() & 0x3) == 3) {
      tsih = r->tsih();
      login_phase_rx_ = false;  // digests start with the next PDU
    }
    return r;
  }

  pdu::Bhs ScsiCommand(const std::array<uint8_t, 16>& cdb, uint32_t edtl, bool read, bool write,
                       uint32_t itt, bool final_bit = true, bool immediate = false,
                       uint64_t lun = 0) {
    pdu::Bhs h;
    h.SetOpcode(pdu::Opcode::kScsiCommand);
    if (immediate) h.b[0] |= 0x40;
    h.SetFlags(static_cast<uint8_t>((final_bit ? 0x80 : 0) | (read ? 0x40 : 0) |
                                    (write ? 0x20 : 0) | 0x01 /* SIMPLE */));
    h.SetLunRaw(pdu::EncodeLun(lun));
    h.SetItt(itt);
    h.Set32(20, edtl);
    h.Set32(24, immediate ? cmd_sn : cmd_sn++);
    h.Set32(28, exp_stat_sn);
    std::memcpy(&h.b[32], cdb.data(), 16);
    return h;
  }

  pdu::Bhs DataOut(uint32_t itt, uint32_t ttt, uint32_t data_sn, uint32_t offset, bool final_bit,
                   uint64_t lun = 0) const {
    pdu::Bhs h;
    h.SetOpcode(pdu::Opcode::kDataOut);
    h.SetFlags(final_bit ? 0x80 : 0);
    h.SetLunRaw(pdu::EncodeLun(lun));
    h.SetItt(itt);
    h.Set32(20, ttt);
    h.Set32(28, exp_stat_sn);
    h.Set32(36, data_sn);
    h.Set32(40, offset);
    return h;
  }

  pdu::Bhs NopOut(uint32_t itt, uint32_t ttt, bool immediate) {
    pdu::Bhs h;
    h.SetOpcode(pdu::Opcode::kNopOut);
    if (immediate) h.b[0] |= 0x40;
    h.SetFlags(0x80);
    h.SetItt(itt);
    h.Set32(20, ttt);
    h.Set32(24, immediate ? cmd_sn : cmd_sn++);
    h.Set32(28, exp_stat_sn);
    return h;
  }

  pdu::Bhs TaskMgmt(uint8_t function, uint32_t itt, uint32_t ref_itt, uint32_t ref_cmd_sn,
                    uint64_t lun = 0) {
    pdu::Bhs h;
    h.SetOpcode(pdu::Opcode::kTaskMgmtRequest);
    h.b[0] |= 0x40;  // immediate, as initiators send them
    h.SetFlags(static_cast<uint8_t>(0x80 | function));
    h.SetLunRaw(pdu::EncodeLun(lun));
    h.SetItt(itt);
    h.Set32(20, ref_itt);
    h.Set32(24, cmd_sn);
    h.Set32(28, exp_stat_sn);
    h.Set32(32, ref_cmd_sn);
    return h;
  }

  pdu::Bhs TextRequest(uint32_t itt) {
    pdu::Bhs h;
    h.SetOpcode(pdu::Opcode::kTextRequest);
    h.SetFlags(0x80);
    h.SetItt(itt);
    h.Set32(20, pdu::kReservedTag);
    h.Set32(24, cmd_sn++);
    h.Set32(28, exp_stat_sn);
    return h;
  }

  pdu::Bhs Logout(uint8_t reason, uint32_t itt) {
    pdu::Bhs h;
    h.SetOpcode(pdu::Opcode::kLogoutRequest);
    h.b[0] |= 0x40;
    h.SetFlags(static_cast<uint8_t>(0x80 | reason));
    h.SetItt(itt);
    h.Set16(20, 1);  // CID
    h.Set32(24, cmd_sn);
    h.Set32(28, exp_stat_sn);
    return h;
  }

 private:
  RecvStatus ReadExact(uint8_t* p, size_t n, std::chrono::steady_clock::time_point deadline) {
    while (n > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return RecvStatus::kTimeout;
      pollfd pfd{fd_, POLLIN, 0};
      const int r = ::poll(&pfd, 1, static_cast<int>(left.count()));
      if (r == 0) return RecvStatus::kTimeout;
      if (r < 0) {
        if (errno == EINTR) continue;
        return RecvStatus::kClosed;
      }
      const ssize_t got = ::recv(fd_, p, n, 0);
      if (got == 0) return RecvStatus::kClosed;
      if (got < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return RecvStatus::kClosed;  // ECONNRESET and the like
      }
      p += got;
      n -= static_cast<size_t>(got);
    }
    return RecvStatus::kOk;
  }

  int fd_ = -1;
  bool header_digest_ = false;
  bool data_digest_ = false;
  bool login_phase_rx_ = true;
  uint32_t next_itt_ = 0x100;
};

// CDB builders (SBC-3).
inline std::array<uint8_t, 16> TestUnitReadyCdb() { return {}; }
inline std::array<uint8_t, 16> Rw10Cdb(uint8_t opcode, uint32_t lba, uint16_t blocks) {
  std::array<uint8_t, 16> c{};
  c[0] = opcode;
  StoreBe32(&c[2], lba);
  StoreBe16(&c[7], blocks);
  return c;
}
inline std::array<uint8_t, 16> Read10Cdb(uint32_t lba, uint16_t blocks) {
  return Rw10Cdb(0x28, lba, blocks);
}
inline std::array<uint8_t, 16> Write10Cdb(uint32_t lba, uint16_t blocks) {
  return Rw10Cdb(0x2a, lba, blocks);
}

}  // namespace iscsigw::iscsi::test
