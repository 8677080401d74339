// Connection: one iSCSI TCP connection, from login to close, on one reactor for its whole life.
//
// Receive: a coroutine reads into a fixed buffer, frames every complete PDU in it (pdu/frame.h) and
// dispatches each: login and text negotiation, SCSI commands into the SCSI engine, Data-Out into
// the task's buffer, task management, NOP, logout. Send: PDUs are queued as TxItems (tasks and
// control PDUs); Flush() gathers them into a batch of iovecs, generating Data-In headers on the
// fly into a per-connection header area, so nothing is allocated per command, and SendBatch
// hands it to sendmsg, IOV_MAX iovecs per call.
//
// Failure tiers: SCSI errors are status + sense; protocol violations get a Reject PDU
// or a login reject; a stream that cannot be trusted (header digest error, malformed framing)
// closes the connection. Threading: every member but admission_ is used only on the reactor thread
// the connection was placed on.
//
// The implementation has a file per phase: connection.cc (lifetime, reader and dispatch, NOP,
// timers, logout), connection_login.cc, connection_text.cc (text and SendTargets discovery),
// connection_command.cc (SCSI commands, Data-Out and R2T), connection_tmf.cc (task management)
// and connection_send.cc (the send path and its batching).
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/log.h"
#include "dataplane/iscsi/chap.h"
#include "dataplane/iscsi/gateway.h"
#include "dataplane/iscsi/login_stages.h"
#include "dataplane/iscsi/negotiation.h"
#include "dataplane/iscsi/task.h"
#include "dataplane/pdu/bhs.h"
#include "dataplane/pdu/frame.h"
#include "dataplane/pdu/text.h"
#include "dataplane/runtime/stats.h"

namespace iscsigw::iscsi {

class Session;

// A PDU built on the control path (login, text, NOP-In, reject, TMF and logout responses).
struct ControlPdu : TxItem {
  ControlPdu() : TxItem(Kind::kControl) {}
  pdu::Bhs hdr;
  std::vector<uint8_t> data;
  bool no_digest = false;       // login responses never carry digests (RFC 7143 13.1)
  bool close_after = false;     // close the connection once this PDU is written (logout, reject)
  bool assign_stat_sn = false;  // set StatSN/ExpCmdSN/MaxCmdSN at send time
  bool current_sn = false;      // set them at send time without advancing StatSN (NOP-In ping)
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Gateway& gw, unsigned reactor, boost::asio::ip::tcp::socket socket, uint64_t id);
  ~Connection();

  void Start();
  // Closes the socket and releases the session; safe to call more than once.
  void Close();
  bool closed() const { return closed_; }

  // RFC 7143 11.9.1 AsyncEvent 1: asks the initiator to log out within `within`; the connection is
  // closed if it has not by then. A session reinstating another has its login response held
  // (HoldLoginResponse) until the old session's tasks end: the request follows that response.
  // Reactor thread only.
  void RequestLogout(std::chrono::seconds within);

  // Aborts this connection's tasks addressed to lun_id (all LUNs when lun_id is ~0), without
  // responses (RFC 7143 4.2.3 / SAM-5 5.6: aborted by a reset or by another I_T nexus). Tasks
  // whose store I/O is in flight end when it does, and hold `drain` (may be null) until then.
  // True when there was a task to abort.
  bool AbortTasks(uint64_t lun_id, const std::shared_ptr<TaskDrain>& drain);

  // Admission under the connection limit (GatewayOptions::max_connections). When the table is
  // full, the acceptor makes room for a new connection by evicting the oldest one still logging
  // in: an idle or slow pre-login connection can never lock out a real initiator. Returns true if
  // this call evicted the connection, whose slot then passes to the new one; the caller posts
  // Close() to the connection's reactor. A connection that reached full feature phase is never
  // evicted. Any thread.
  bool EvictIfLoggingIn();
  // The same for a discovery session in full feature phase: the next to go once none is still
  // logging in (docs/security.md, "Connections": discovery cannot crowd out real sessions).
  bool EvictIfDiscovery();
  // The peer's source as the per-source limits count it (an IPv4 address, an IPv6 /64). Set at
  // construction; any thread.
  const std::string& source() const { return source_; }

  // A seam for tests and benchmarks (tests/bench/micro_bench.cc): the receive and send paths in
  // memory, without the socket, so that a command's protocol work can be timed alone. For a
  // connection that was never Start()ed, on the thread that owns it (its reactor is not running).
  //
  // Handles one framed PDU (pdu::ParseFrame) as the reader does. False: the connection would close.
  bool HandleFrameForTest(const pdu::Frame& f) { return HandleFrame(f); }
  // Gathers the queued PDUs into one batch exactly as Flush does and returns the iovecs it would
  // give sendmsg, unsent. They stay valid until the next call.
  std::span<const iovec> GatherBatchForTest();
  // Ends the gathered batch as if sendmsg had taken all of it: finished tasks are released.
  bool FinishBatchForTest() { return FinishBatch(0); }

 private:
  enum class Admission : uint8_t { kLoggingIn, kAdmitted, kEvicted };

  static constexpr size_t kRxBufferSize = 1024 * 1024;
  static constexpr uint32_t kLoginMaxDataSegmentLength = 8192;  // RFC 7143 13.12 default
  static constexpr size_t kMaxBatchHeaders = 64;
  static constexpr size_t kMaxBatchBuffers = 256;
  static constexpr size_t kMaxControlPdus = 64;

  enum class Phase : uint8_t { kLogin, kFullFeature, kLoggingOut, kClosed };

  // The private member functions by phase, each phase in a file of its own.

  // Lifetime, receive and dispatch, NOP and the timers, logout (connection.cc).
  boost::asio::awaitable<void> ReadLoop();
  boost::asio::awaitable<void> TimerLoop();
  // Frames and handles every complete PDU in the receive buffer. False: close the connection.
  bool ParseBuffered();
  // Receive side. Returns false when the connection must close.
  bool HandleFrame(const pdu::Frame& f);
  bool HandleNopOut(const pdu::Frame& f);
  bool HandleLogout(const pdu::Frame& f);
  // CmdSN rules for a non-login request (RFC 7143 4.2.2.1). Returns false when the PDU must be
  // silently ignored (outside the window).
  bool AcceptCmdSn(const pdu::BhsView& h);
  std::string PortalAddress() const;

  // Login (connection_login.cc).
  bool HandleLogin(const pdu::Frame& f);
  bool SendLoginReject(const pdu::BhsView& req, LoginStatus status);
  // A request the stage rules refuse (login_stages.h): logged, then SendLoginReject.
  bool RefuseLoginStage(const pdu::BhsView& req, LoginStatus status, std::string_view why);
  // Before the first request is negotiated: the authentication the target (or discovery) demands.
  void PrepareAuth(const std::vector<pdu::KeyValue>& first_request);
  // The names the first request gives (RFC 7143 6.3.1): kSuccess when they are a new session of
  // a discovery or of a target this initiator may use, else the status to reject the login with.
  LoginStatus CheckFirstRequest();
  // One CHAP step of a security stage request (RFC 7143 12.1.3): kSuccess, or the status to
  // reject the login with; a failure counts towards the source's lockout (auth_throttle.h).
  LoginStatus StepChap(const std::vector<pdu::KeyValue>& keys, std::vector<pdu::KeyValue>* out);
  // The session of a login going to full feature phase, registered; `replaced` receives the
  // sessions it reinstates.
  void CreateSession(uint32_t cmd_sn, std::vector<std::shared_ptr<Session>>* replaced);
  // Holds login response `c` until the tasks of the `replaced` sessions have ended.
  void HoldLoginResponse(ControlPdu* c, const std::vector<std::shared_ptr<Session>>& replaced);
  // After the last login response is queued: full feature phase with the negotiated limits.
  void EnterFullFeaturePhase();
  void ApplyNegotiatedLimits();

  // Full-feature text negotiation and SendTargets discovery (connection_text.cc).
  bool HandleText(const pdu::Frame& f);

  // SCSI commands, Data-Out and R2T, and the task flow to its response (connection_command.cc).
  bool HandleScsiCommand(const pdu::Frame& f);
  bool HandleDataOut(const pdu::Frame& f);
  // Ends a write whose Data-Out broke the sequence rules: CHECK CONDITION, ABORTED COMMAND with
  // `ascq` of ASC 4Bh (DATA PHASE ERROR family); later Data-Out for it is discarded.
  bool FailDataOut(Task* t, uint8_t ascq);
  void IssueR2Ts(Task* t);
  void StartExecution(Task* t);
  static void OnScsiComplete(scsi::Task* st, void* ctx);
  void QueueTaskResponse(Task* t);
  void ReleaseTask(Task* t);
  // Takes t off the list of tasks still receiving unsolicited Data-Out, if it is on it.
  void UnlinkUnsolicited(Task* t);
  // With DataDigest, Data-In is copied out of store memory first, so that the digest covers the
  // bytes that are sent even while another reactor writes the same blocks.
  void CopyDataInForDigest(Task* t);

  // Task management (connection_tmf.cc, with AbortTasks).
  bool HandleTaskMgmt(const pdu::Frame& f);
  Task* FindTaskByItt(uint32_t itt);

  // Send side (connection_send.cc).
  ControlPdu* NewControl();
  void QueueControl(ControlPdu* c) { Queue(c); }
  // A drain that queues `c` (and flushes) on this reactor once every task it waits for has ended.
  std::shared_ptr<TaskDrain> QueueWhenDrained(ControlPdu* c);
  // Appends to the send queue. Here, not in connection_send.cc: the command path queues every
  // R2T and response through it, and it is too small to be worth a call.
  void Queue(TxItem* item) {
    if (item->tx_queued || closed_) return;
    item->tx_queued = true;
    item->tx_next = nullptr;
    if (tx_tail_ != nullptr) {
      tx_tail_->tx_next = item;
    } else {
      tx_head_ = item;
    }
    tx_tail_ = item;
  }
  // Takes a queued item off the send queue (a task released before its R2Ts went out).
  void Dequeue(TxItem* item);
  void SendReject(const uint8_t* bhs, pdu::RejectReason reason);
  void Flush();
  // Starts a new batch in bufs_ and moves queued items into it (sent_) while they fit.
  void GatherBatch();
  bool EmitTask(Task* t);
  bool EmitControl(ControlPdu* c);
  // Adds one PDU header (digest appended when negotiated) to the batch.
  uint8_t* AddHeader(bool digest);
  void AddData(const uint8_t* p, uint32_t len);
  void FinishData(uint32_t len, uint32_t crc, bool digest);
  // Sends the batch in bufs_ from send_pos_ with sendmsg, up to IOV_MAX iovecs a call: 0 when it
  // is all sent, EAGAIN when the send buffer is full, or the errno that ends the connection.
  int SendBatch();
  void WaitWritable();  // the send buffer is full: OnWritable once it has room
  void OnWritable(const boost::system::error_code& ec);
  // After a batch went out (err 0) or failed: releases what it carried. False when the connection
  // closed.
  bool FinishBatch(int err);
  // Flush at the end of this reactor turn, once however many completions ask for it.
  void FlushSoon();
  void FillSn(pdu::Bhs& h, bool advance_stat_sn);

  // Metrics (dataplane/runtime/stats.h): this reactor's shard, or null while counting is off.
  runtime::ReactorShard* Counters() const {
    return runtime::Stats::Global().enabled() ? stats_ : nullptr;
  }
  void CountTx(const uint8_t* bhs) {
    if (auto* s = Counters()) s->Pdu(1, bhs[0]);
  }
  void CountLogin(uint16_t status);                   // connection_login.cc
  void CountCommand(const Task* t);                   // connection_command.cc
  void CountTmf(uint8_t function, uint8_t response);  // connection_tmf.cc

  Gateway& gw_;
  const unsigned reactor_;
  runtime::ReactorShard* const stats_;  // this reactor's counters; written on this thread only
  // Per-LUN counter blocks of this connection's target, by LUN id, looked up on first use.
  std::array<runtime::LunStats*, 256> lun_stats_{};
  // The counter block of this connection's target, looked up on the first task management request.
  runtime::TargetStats* target_stats_ = nullptr;
  boost::asio::ip::tcp::socket socket_;
  const uint64_t id_;
  std::string peer_;     // "ip:port"
  std::string peer_ip_;  // the address alone
  std::string source_;   // AuthThrottle::SourcePrefix(peer_ip_), counted by the gateway
  // Log lines (base/log.h): this connection's context prefix, and per logger a limiter for the
  // lines an initiator can provoke at will (data digest errors; rejects, Data-Out out of sequence).
  log::ConnContext LogCtx() const;
  log::RateLimiter pdu_log_limiter_;
  log::RateLimiter iscsi_log_limiter_;
  Phase phase_ = Phase::kLogin;
  bool closed_ = false;
  std::atomic<Admission> admission_{Admission::kLoggingIn};  // cross-thread, like the next
  std::atomic<bool> discovery_ffp_{false};  // a discovery session in full feature phase, counted
  std::shared_ptr<Session> session_;

  // Receive state.
  std::unique_ptr<uint8_t[]> rx_;
  size_t rx_begin_ = 0;
  size_t rx_end_ = 0;
  pdu::FrameLimits rx_limits_;
  std::chrono::steady_clock::time_point last_rx_;
  // The last Text request (or the login) of a discovery session: NOP-Outs do not keep one open.
  std::chrono::steady_clock::time_point last_request_;
  bool paused_ = false;  // reader waits for control PDUs to drain
  // Session reinstatement: the login response waits in held_login_ until the old session's tasks
  // have ended; nothing more is parsed meanwhile.
  bool held_ = false;
  ControlPdu* held_login_ = nullptr;
  // A RequestLogout made while the login response is held: sent right after that response, since
  // the initiator is in full feature phase, where an Async Message may come, only once it has it.
  std::optional<std::chrono::seconds> logout_after_login_;
  boost::asio::steady_timer wake_;
  Task* unsol_head_ = nullptr;  // tasks still receiving unsolicited Data-Out

  // Login state (RFC 7143 6.3, 11.12).
  std::unique_ptr<Negotiator> negotiator_;
  pdu::TextAccumulator login_text_;
  bool login_started_ = false;
  LoginStages login_stages_;
  std::array<uint8_t, 6> isid_{};
  uint16_t login_tsih_ = 0;
  uint16_t cid_ = 0;
  uint32_t login_itt_ = 0;
  std::shared_ptr<const TargetConfig> login_target_;
  SessionType session_type_ = SessionType::kUnknown;
  SessionParams params_;
  bool auth_prepared_ = false;
  std::unique_ptr<ChapAuthenticator> chap_;  // set when CHAP is required for this login

  // Full-feature text (SendTargets and negotiation, with continuation both ways).
  pdu::TextAccumulator text_in_;
  bool text_in_continued_ = false;  // the last request piece had C=1: text_ttt_ names the next
  std::vector<uint8_t> text_out_;
  size_t text_out_offset_ = 0;
  uint32_t text_ttt_ = 0;
  uint32_t next_text_ttt_ = 1;

  // Send state.
  TxItem* tx_head_ = nullptr;
  TxItem* tx_tail_ = nullptr;
  bool writing_ = false;       // a batch is on its way: wait for the socket to take the rest
  bool flush_posted_ = false;  // FlushSoon's handler is queued
  bool close_after_write_ = false;
  uint32_t stat_sn_ = 0;
  bool tx_header_digest_ = false;
  bool tx_data_digest_ = false;
  uint32_t max_send_segment_ = 8192;  // initiator's MaxRecvDataSegmentLength
  struct HeaderSlot {
    std::array<uint8_t, pdu::kBhsLength + pdu::kDigestLength> b;
  };
  std::array<HeaderSlot, kMaxBatchHeaders> hdrs_{};
  size_t n_hdrs_ = 0;
  std::array<uint8_t, 8> digest_slots_[kMaxBatchHeaders]{};  // data padding + data digest per PDU
  std::vector<iovec> bufs_;
  size_t send_pos_ = 0;  // first iovec of bufs_ not yet (fully) sent
  std::vector<TxItem*> sent_;
  std::vector<std::unique_ptr<ControlPdu>> control_storage_;
  std::vector<ControlPdu*> control_free_;

  // Keep-alive (RFC 7143 11.18/11.19: target NOP-In ping).
  boost::asio::steady_timer timer_;
  bool ping_outstanding_ = false;
  uint32_t ping_ttt_ = 0;
  std::chrono::steady_clock::time_point ping_sent_;
  std::chrono::steady_clock::time_point started_;
  // Set by RequestLogout: the connection closes at this time unless the initiator logged out.
  std::optional<std::chrono::steady_clock::time_point> logout_deadline_;

  uint32_t ttt_serial_ = 0;  // R2T transfer tags: (serial << 8) | task index
  uint32_t async_pending_ = 0;
  std::shared_ptr<Connection> keepalive_;  // held while store I/O is pending after Close()
};

}  // namespace iscsigw::iscsi
