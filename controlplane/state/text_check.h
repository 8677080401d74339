// Checks every string field of a message (a gRPC request or a loaded state file) before any name,
// path or secret in it is used, compared, persisted or logged: each must be well-formed UTF-8 and
// hold no control character (C0, DEL or C1). iSCSI names (RFC 7143 4.2.7: iqn./eui./naa.) are
// narrower still and checked afterwards by api::ValidateIscsiName; aliases, CHAP user names and
// file paths are free text, and this is what keeps newlines, NULs and escape sequences out of the
// state file, the text keys sent to initiators and the log.
//
// Messages name the field path ("target.acl[2].initiator") and the byte offset, never the value:
// CHAP secrets are strings too. Any thread; no state.
#pragma once

#include <google/protobuf/message.h>

#include <string>
#include <string_view>

#include "base/status.h"

namespace iscsigw::state {

// INVALID_ARGUMENT naming the field path (under `prefix`, the path of `msg` itself) when a string
// field of `msg` (recursively: nested, repeated and map fields) is not valid UTF-8 or holds a
// control character.
Status CheckTextFields(const google::protobuf::Message& msg, const std::string& prefix = "");

// The first problem in `text` ("byte 3 is control character U+000A"), or empty when it is
// well-formed UTF-8 (no overlong forms, no surrogates, at most U+10FFFF) without control
// characters.
std::string TextProblem(std::string_view text);

// `text` with every byte that is not part of well-formed, non-control UTF-8 written as \xNN (and
// the backslash itself as \\): safe for a log line or a gRPC status message, whatever a client
// sent. Messages from validators that echo a name pass through it.
std::string EscapeText(std::string_view text);

}  // namespace iscsigw::state
