// TxItem: something waiting in a connection's send queue (a task's R2Ts, Data-In and status, or a
// control PDU). Intrusive singly linked list: queueing allocates nothing.
#pragma once

#include <cstdint>

namespace iscsigw::iscsi {

struct TxItem {
  enum class Kind : uint8_t { kTask, kControl };
  explicit TxItem(Kind k = Kind::kTask) : kind(k) {}
  Kind kind;
  bool tx_queued = false;
  TxItem* tx_next = nullptr;
};

}  // namespace iscsigw::iscsi
