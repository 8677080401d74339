#include "controlplane/state/text_check.h"

#include <cstdio>

namespace iscsigw::state {

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::string Hex(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "U+%04X", cp);
  return buf;
}

std::string Byte(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0x%02x", b);
  return buf;
}

Status Walk(const Message& msg, const std::string& path) {
  const Reflection* r = msg.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(msg, &fields);  // only the fields that are set
  for (const FieldDescriptor* f : fields) {
    const std::string name = path.empty() ? f->name() : path + "." + f->name();
    if (f->is_repeated()) {
      const int n = r->FieldSize(msg, f);
      for (int i = 0; i < n; ++i) {
        const std::string item = name + "[" + std::to_string(i) + "]";
        if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
          std::string scratch;
          const std::string& v = r->GetRepeatedStringReference(msg, f, i, &scratch);
          if (std::string p = TextProblem(v); !p.empty()) return InvalidArgument(item + ": " + p);
        } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          // Map entries are messages with key and value fields: covered here too.
          if (Status s = Walk(r->GetRepeatedMessage(msg, f, i), item); !s.ok()) return s;
        }
      }
      continue;
    }
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      std::string scratch;
      const std::string& v = r->GetStringReference(msg, f, &scratch);
      if (std::string p = TextProblem(v); !p.empty()) return InvalidArgument(name + ": " + p);
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (Status s = Walk(r->GetMessage(msg, f), name); !s.ok()) return s;
    }
  }
  return Status::Ok();
}

}  // namespace

std::string TextProblem(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = s[i];
    uint32_t cp = 0;
    size_t len = 0;
    if (b < 0x80) {
      cp = b;
      len = 1;
    } else if (b >= 0xc2 && b <= 0xdf) {
      cp = b & 0x1f;
      len = 2;
    } else if (b >= 0xe0 && b <= 0xef) {
      cp = b & 0x0f;
      len = 3;
    } else if (b >= 0xf0 && b <= 0xf4) {
      cp = b & 0x07;
      len = 4;
    } else {
      return "byte " + std::to_string(i) + " (" + Byte(b) + ") is not valid UTF-8";
    }
    if (i + len > n) return "byte " + std::to_string(i) + ": truncated UTF-8 sequence";
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xc0) != 0x80) {
        return "byte " + std::to_string(i + k) + " (" + Byte(s[i + k]) + ") is not valid UTF-8";
      }
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    // Overlong 3- and 4-byte forms, UTF-16 surrogates and code points past U+10FFFF (RFC 3629 3).
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return "byte " + std::to_string(i) + " starts an invalid UTF-8 sequence";
    }
    if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) {
      return "byte " + std::to_string(i) + " is control character " + Hex(cp);
    }
    i += len;
  }
  return "";
}

Status CheckTextFields(const Message& msg, const std::string& prefix) { return Walk(msg, prefix); }

}  // namespace iscsigw::state
