// Logins through the real iscsi::Connection (dataplane/iscsi/connection.h) of a gateway whose one
// target requires CHAP: Login Request PDUs (CSG, NSG, T, C, ISID, TSIH, CID, CmdSN and key text
// from the input) on one or more connections, optionally after a session that logged in with the
// right secret (the live session, ISID kLiveIsid), then a TEST UNIT READY on each connection.
//
// Each connection is one end of a socketpair; the other end is the initiator, which this file
// writes requests to and reads the target's PDUs from. The gateway's one reactor is not started:
// its io_context runs here, on the fuzzer's thread, until nothing is ready (Run), so a login's
// receive, handling, send and a reinstatement's drop of the old session all take place.
//
// Oracles, beyond the sanitizers:
//   - authentication (RFC 7143 12.1.3): a connection reaches full feature phase (a Login
//     Response with T=1, NSG=3 and status 0) only after one of its requests carried CHAP_N and a
//     CHAP_R that answers the last challenge the target sent it, with the secret, as this file
//     computes it; and no SCSI command is answered before full feature phase;
//   - sessions (RFC 7143 6.3.3, 6.3.5): a login with a TSIH other than 0 never reaches full
//     feature phase (MaxConnections is 1); as long as no other login reached full feature phase,
//     the live session stays registered under its TSIH and answers a TEST UNIT READY, whatever
//     the failed logins reusing its ISID did;
//   - encoding: every PDU the target sends frames (pdu::ParseFrame) with nothing left over, and
//     every Login Response's data segment parses as text.
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/endian.h"
#include "base/log.h"
#include "dataplane/backing/ram_store.h"
#include "dataplane/iscsi/chap.h"
#include "dataplane/iscsi/connection.h"
#include "dataplane/iscsi/gateway.h"
#include "dataplane/pdu/bhs.h"
#include "dataplane/pdu/crc32c.h"
#include "dataplane/pdu/frame.h"
#include "dataplane/pdu/text.h"
#include "dataplane/runtime/reactor_pool.h"
#include "tests/fuzz/fuzz_input.h"

using namespace iscsigw;

namespace {

constexpr char kTarget[] = "iqn.2026-11.io.iscsigw:fuzz";
constexpr char kInitiator[] = "iqn.2026-11.io.iscsigw.fuzz:host";
constexpr char kUser[] = "initiator-user";
constexpr char kSecret[] = "initiator-secret-1";
constexpr std::array<uint8_t, 6> kLiveIsid = {0x80, 0x00, 0x00, 0x00, 0x00, 0x01};
constexpr std::array<uint8_t, 6> kOtherIsid = {0x80, 0x00, 0x00, 0x00, 0x00, 0x02};

// CHAP_R for a challenge (RFC 1994 4.1: the digest of identifier, secret and challenge), from
// OpenSSL directly rather than from chap.cc.
std::vector<uint8_t> Answer(int algorithm, uint8_t id, const std::vector<uint8_t>& challenge) {
  const EVP_MD* md = algorithm == 5   ? EVP_md5()
                     : algorithm == 6 ? EVP_sha1()
                     : algorithm == 7 ? EVP_sha256()
                     : algorithm == 8 ? EVP_sha3_256()
                                      : nullptr;
  if (md == nullptr) return {};
  std::vector<uint8_t> out(EVP_MAX_MD_SIZE);
  unsigned len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, md, nullptr);
  EVP_DigestUpdate(ctx, &id, 1);
  EVP_DigestUpdate(ctx, kSecret, std::strlen(kSecret));
  EVP_DigestUpdate(ctx, challenge.data(), challenge.size());
  EVP_DigestFinal_ex(ctx, out.data(), &len);
  EVP_MD_CTX_free(ctx);
  out.resize(len);
  return out;
}

std::string Hex(const std::vector<uint8_t>& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s = "0x";
  for (uint8_t b : bytes) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

const std::string* Find(const std::vector<pdu::KeyValue>& kvs, const char* key) {
  for (const auto& kv : kvs) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

// One connection, seen from the initiator's end of its socketpair.
struct Peer {
  int fd = -1;
  std::shared_ptr<iscsi::Connection> conn;
  std::vector<uint8_t> rx;
  pdu::FrameLimits limits{16u << 20, false, false};
  bool tsih_given = false;  // a request of this login carried a TSIH other than 0
  // The last challenge the target sent, and whether a later request answered it rightly.
  std::optional<std::vector<uint8_t>> answer;
  bool proven = false;
  bool ffp = false;           // a Login Response took the connection to full feature phase
  bool digests_next = false;  // that response agreed on CRC32C for headers (data: below)
  bool data_digests_next = false;
  uint16_t tsih = 0;
  int scsi_responses = 0;
  uint32_t itt = 1;
};

class World {
 public:
  World() : pool_(1), gw_(pool_, iscsi::GatewayOptions{}) {
    auto target = std::make_shared<iscsi::TargetConfig>();
    target->info.name = kTarget;
    target->allow_any_initiator = true;
    target->chap = iscsi::ChapCredentials{kUser, kSecret, "", ""};
    scsi::LunConfig c;
    c.id = 0;
    target->info.luns.push_back(std::make_shared<scsi::Lun>(
        c, std::shared_ptr<backing::BackingStore>(backing::NewRamStore(1 << 20))));
    auto snap = std::make_shared<iscsi::Snapshot>();
    snap->targets.push_back(target);
    gw_.Publish(snap);
  }
  ~World() {
    for (auto& p : peers_) Disconnect(*p);
    Run();
  }

  iscsi::Gateway& gw() { return gw_; }

  // A new connection, as the acceptor makes one (dataplane/api/dataplane.cc).
  Peer* Connect() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::abort();
    ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
    boost::asio::ip::tcp::socket s(pool_.context(0));
    boost::system::error_code ec;
    s.assign(boost::asio::ip::tcp::v4(), fds[0], ec);
    if (ec || !gw_.TryAddConnection()) std::abort();
    pool_.AddConnection(0, 1);
    auto p = std::make_unique<Peer>();
    p->fd = fds[1];
    p->conn = std::make_shared<iscsi::Connection>(gw_, 0, std::move(s), ++next_id_);
    p->conn->Start();
    peers_.push_back(std::move(p));
    Run();
    return peers_.back().get();
  }
  void Disconnect(Peer& p) {
    if (p.fd < 0) return;
    p.conn->Close();
    ::close(p.fd);
    p.fd = -1;
  }

  // Runs the reactor until nothing is ready, reading what each connection sent meanwhile.
  void Run() {
    auto& io = pool_.context(0);
    for (;;) {
      io.restart();
      size_t ran = 0;
      while (io.poll() > 0) ++ran;
      bool read = false;
      for (auto& p : peers_) read = Drain(*p) || read;
      if (ran == 0 && !read) break;
    }
    for (auto& p : peers_) Frame(*p);
  }

  void Send(Peer& p, const std::vector<uint8_t>& bytes) {
    if (p.fd < 0) return;
    // The socket buffer takes a login's PDUs whole; a closed connection takes nothing.
    (void)!::send(p.fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    Run();
  }

 private:
  bool Drain(Peer& p) {
    if (p.fd < 0) return false;
    bool got = false;
    uint8_t buf[65536];
    for (;;) {
      const ssize_t n = ::recv(p.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n <= 0) return got;
      p.rx.insert(p.rx.end(), buf, buf + n);
      got = true;
    }
  }

  // Frames and checks every PDU the target sent on `p`.
  void Frame(Peer& p) {
    size_t at = 0;
    while (at < p.rx.size()) {
      pdu::Frame f;
      const auto r = pdu::ParseFrame(std::span<const uint8_t>(p.rx).subspan(at), p.limits, &f);
      if (r.status != pdu::FrameStatus::kComplete) {
        fuzz::Violated("the target sent a PDU that does not frame, or only part of one");
      }
      OnPdu(p, f);
      at += f.total_length;
    }
    p.rx.clear();
  }

  void OnPdu(Peer& p, const pdu::Frame& f) {
    const pdu::BhsView h(f.bhs);
    if (h.opcode() == pdu::Opcode::kScsiResponse) {
      if (!p.ffp) fuzz::Violated("a SCSI command answered outside full feature phase");
      ++p.scsi_responses;
      return;
    }
    if (h.opcode() != pdu::Opcode::kLoginResponse) return;
    auto keys = pdu::ParseText(std::span<const uint8_t>(f.data, f.data_length));
    if (!keys.ok()) fuzz::Violated("a Login Response whose text does not parse");
    const auto* a = Find(keys.value(), "CHAP_A");
    const auto* i = Find(keys.value(), "CHAP_I");
    const auto* c = Find(keys.value(), "CHAP_C");
    if (a && i && c) {
      auto challenge = iscsi::DecodeChapBinary(*c);
      if (!challenge) fuzz::Violated("a CHAP_C the initiator cannot read");
      p.answer =
          Answer(std::atoi(a->c_str()), static_cast<uint8_t>(std::atoi(i->c_str())), *challenge);
    }
    if (const auto* d = Find(keys.value(), "HeaderDigest")) p.digests_next = *d == "CRC32C";
    if (const auto* d = Find(keys.value(), "DataDigest")) p.data_digests_next = *d == "CRC32C";
    const bool success = f.bhs[36] == 0 && f.bhs[37] == 0;
    const bool transit = (h.flags() & 0x80) != 0;
    if (success && transit && h.nsg() == 3) {
      if (!p.proven) fuzz::Violated("full feature phase without the CHAP secret proven");
      if (p.tsih_given) fuzz::Violated("a second connection joined a session (MaxConnections 1)");
      p.ffp = true;
      p.tsih = h.tsih();
      // From the next PDU on, the digests agreed on.
      p.limits.header_digest = p.digests_next;
      p.limits.data_digest = p.data_digests_next;
    }
  }

  runtime::ReactorPool pool_;
  iscsi::Gateway gw_;
  std::vector<std::unique_ptr<Peer>> peers_;
  uint64_t next_id_ = 0;
};

struct LoginPdu {
  uint8_t flags = 0;  // T, C, CSG, NSG
  std::array<uint8_t, 6> isid = kLiveIsid;
  uint16_t tsih = 0;
  uint16_t cid = 0;
  uint32_t cmd_sn = 1;
  std::vector<uint8_t> text;
};

std::vector<uint8_t> Encode(Peer& p, const LoginPdu& l) {
  pdu::Bhs h;
  h.SetOpcode(pdu::Opcode::kLoginRequest);
  h.b[0] |= 0x40;  // immediate (RFC 7143 11.12)
  h.SetFlags(l.flags);
  h.SetDataSegmentLength(static_cast<uint32_t>(l.text.size()));
  std::memcpy(&h.b[8], l.isid.data(), 6);
  h.Set16(14, l.tsih);
  h.SetItt(p.itt++);
  h.Set16(20, l.cid);
  h.Set32(24, l.cmd_sn);
  std::vector<uint8_t> b(h.b.begin(), h.b.end());
  b.insert(b.end(), l.text.begin(), l.text.end());
  b.resize(b.size() + pdu::PadLength(static_cast<uint32_t>(l.text.size())), 0);
  return b;
}

// Sends a Login Request, noting whether it proves the secret.
void SendLogin(World& w, Peer& p, const LoginPdu& l) {
  if (l.tsih != 0) p.tsih_given = true;
  auto keys = pdu::ParseText(l.text);
  if (keys.ok() && p.answer) {
    const auto* n = Find(keys.value(), "CHAP_N");
    const auto* r = Find(keys.value(), "CHAP_R");
    const auto got = r ? iscsi::DecodeChapBinary(*r) : std::nullopt;
    if (n && *n == kUser && got && *got == *p.answer) p.proven = true;
  }
  w.Send(p, Encode(p, l));
}

std::vector<uint8_t> Text(const std::vector<pdu::KeyValue>& kvs) {
  std::vector<uint8_t> out;
  pdu::EncodeText(kvs, &out);
  return out;
}

std::vector<pdu::KeyValue> FirstKeys() {
  return {{"InitiatorName", kInitiator},
          {"TargetName", kTarget},
          {"SessionType", "Normal"},
          {"AuthMethod", "CHAP"}};
}

// CHAP_N and the CHAP_R for the last challenge; `flip` (not 0) spoils a bit of it: the answer of
// an initiator with another secret.
std::vector<pdu::KeyValue> AnswerKeys(const Peer& p, uint8_t flip = 0) {
  std::vector<uint8_t> r = p.answer ? *p.answer : std::vector<uint8_t>(16);
  if (flip != 0 && !r.empty()) r[flip % r.size()] ^= flip;
  return {{"CHAP_N", kUser}, {"CHAP_R", Hex(r)}};
}

// The live session: a login the way an initiator with the right secret makes it.
Peer* LogInWithTheSecret(World& w) {
  Peer* p = w.Connect();
  LoginPdu l;
  l.flags = 0x01;  // CSG 0, NSG 1
  l.text = Text(FirstKeys());
  SendLogin(w, *p, l);
  l.text = Text({{"CHAP_A", "5"}});
  SendLogin(w, *p, l);
  l.flags = 0x81;  // T, CSG 0, NSG 1
  l.text = Text(AnswerKeys(*p));
  SendLogin(w, *p, l);
  l.flags = 0x87;  // T, CSG 1, NSG 3
  l.text = Text({{"HeaderDigest", "None"}, {"DataDigest", "None"}});
  SendLogin(w, *p, l);
  if (!p->ffp) fuzz::Violated("a login with the right secret did not reach full feature phase");
  return p;
}

// TEST UNIT READY as an immediate command, so that it needs no CmdSN bookkeeping.
void TestUnitReady(World& w, Peer& p) {
  pdu::Bhs h;
  h.SetOpcode(pdu::Opcode::kScsiCommand);
  h.b[0] |= 0x40;
  h.SetFlags(0x81);  // F, SIMPLE
  h.SetItt(p.itt++);
  std::vector<uint8_t> b(h.b.begin(), h.b.end());
  if (p.limits.header_digest) {
    b.resize(b.size() + pdu::kDigestLength);
    pdu::StoreDigest(&b[pdu::kBhsLength], pdu::Crc32c(b.data(), pdu::kBhsLength));
  }
  w.Send(p, b);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    log::SetLevel(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  fuzz::Input in(data, size);
  World w;
  const uint8_t mode = in.Byte();
  Peer* live = (mode & 1) != 0 ? LogInWithTheSecret(w) : nullptr;
  const uint16_t live_tsih = live ? live->tsih : 0;
  if (live) {
    TestUnitReady(w, *live);  // the power-on unit attention
  }
  Peer* p = w.Connect();
  std::vector<Peer*> tried = {p};
  const uint32_t cmd_sn = 1;
  for (int n = 0; n < 8 && !in.empty(); ++n) {
    const uint8_t s = in.Byte();
    const uint8_t how = in.Byte();
    if ((how & 0x80) != 0) {  // give up on this connection and start another login
      w.Disconnect(*p);
      p = w.Connect();
      tried.push_back(p);
    }
    LoginPdu l;
    // T, CSG and NSG as they come; C from bit 4 (bits 4 and 5 of the flags are reserved). Bit 5:
    // a wrong CHAP_R, bit 6: the first request's keys.
    l.flags = static_cast<uint8_t>((s & 0x8F) | ((s & 0x10) != 0 ? 0x40 : 0));
    switch (how & 3) {
      case 0:
        l.isid = kLiveIsid;
        break;
      case 1:
        l.isid = kOtherIsid;
        break;
      default: {
        const auto b = in.Bytes(6);
        std::memcpy(l.isid.data(), b.data(), b.size());
      }
    }
    switch ((how >> 2) & 3) {
      case 1:
        l.tsih = live_tsih;
        break;
      case 2:
        l.tsih = in.U16();
        break;
      default:
        l.tsih = 0;
    }
    l.cid = (how & 0x10) != 0 ? in.U16() : 0;
    l.cmd_sn = (how & 0x20) != 0 ? in.U16() : cmd_sn;
    const auto piece = in.Piece();
    std::vector<pdu::KeyValue> add;
    if ((s & 0x40) != 0) add = FirstKeys();
    if ((how & 0x40) != 0) {
      // Reach the success path too: answer the challenge as an initiator with the secret does,
      // or (bit 5) with a wrong answer of the right length.
      const uint8_t flip = (s & 0x20) != 0 ? 1 : 0;
      for (auto& kv : AnswerKeys(*p, flip)) add.push_back(kv);
    }
    l.text.assign(piece.begin(), piece.end());
    if (!add.empty()) {
      // Key text ends with a NUL; the added keys follow the input's as further keys.
      if (!l.text.empty() && l.text.back() != 0) l.text.push_back(0);
      const auto more = Text(add);
      l.text.insert(l.text.end(), more.begin(), more.end());
    }
    SendLogin(w, *p, l);
  }
  for (Peer* t : tried) TestUnitReady(w, *t);

  if (live != nullptr) {
    bool other_ffp = false;
    for (Peer* t : tried) other_ffp = other_ffp || t->ffp;
    if (!other_ffp) {
      // No other login succeeded: the live session is untouched.
      if (!w.gw().FindSession(live_tsih)) fuzz::Violated("a failed login ended the live session");
      const int before = live->scsi_responses;
      TestUnitReady(w, *live);
      if (live->scsi_responses != before + 1) {
        fuzz::Violated("the live session stopped answering after a failed login");
      }
    }
  }
  return 0;
}
