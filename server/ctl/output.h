// What iscsigwctl prints on success: human tables and key: value blocks by default, protobuf JSON
// with -o json (PrintJson: field names as in the .proto, every primitive field shown). The table
// columns and the JSON are part of the CLI's contract (docs/reference/cli.md); tests read both.
#pragma once

#include <google/protobuf/message.h>
#include <google/protobuf/repeated_ptr_field.h>

#include <cstdint>
#include <string>
#include <vector>

#include "iscsigw/v1/gateway.pb.h"

namespace iscsigw::ctl {

// Columns padded to their widest cell, two spaces apart; the first row is the header.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// `b` bytes in the largest binary unit that divides it: "64MiB", "1000B".
std::string HumanSize(uint64_t b);
// A LUN's backing: "ram", "null", "file:PATH[ (direct)]", "rbd:POOL/[NAMESPACE/]IMAGE".
std::string Backing(const iscsigw::v1::Lun& l);
std::string Join(const google::protobuf::RepeatedPtrField<std::string>& v, const char* sep);

void PrintJson(const google::protobuf::Message& m);
// The LUNs of `target` as a table, then one line per offline LUN with its reason.
void PrintLuns(const std::string& target,
               const google::protobuf::RepeatedPtrField<iscsigw::v1::Lun>& luns);
void PrintTarget(const iscsigw::v1::Target& t);

}  // namespace iscsigw::ctl
