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

// One UTF-8 sequence at s[i..n): its length and code point, or the problem with it (RFC 3629 3:
// no overlong forms, no UTF-16 surrogates, nothing past U+10FFFF).
struct Decoded {
  size_t len = 0;
  uint32_t cp = 0;
  std::string problem;
};

Decoded DecodeOne(const unsigned char* s, size_t n, size_t i) {
  const unsigned char b = s[i];
  Decoded d;
  if (b < 0x80) {
    d.cp = b;
    d.len = 1;
  } else if (b >= 0xc2 && b <= 0xdf) {
    d.cp = b & 0x1f;
    d.len = 2;
  } else if (b >= 0xe0 && b <= 0xef) {
    d.cp = b & 0x0f;
    d.len = 3;
  } else if (b >= 0xf0 && b <= 0xf4) {
    d.cp = b & 0x07;
    d.len = 4;
  } else {
    d.problem = "byte " + std::to_string(i) + " (" + Byte(b) + ") is not valid UTF-8";
    return d;
  }
  if (i + d.len > n) {
    d.problem = "byte " + std::to_string(i) + ": truncated UTF-8 sequence";
    return d;
  }
  for (size_t k = 1; k < d.len; ++k) {
    if ((s[i + k] & 0xc0) != 0x80) {
      d.problem = "byte " + std::to_string(i + k) + " (" + Byte(s[i + k]) + ") is not valid UTF-8";
      return d;
    }
    d.cp = (d.cp << 6) | (s[i + k] & 0x3f);
  }
  if ((d.len == 3 && d.cp < 0x800) || (d.len == 4 && (d.cp < 0x10000 || d.cp > 0x10ffff)) ||
      (d.cp >= 0xd800 && d.cp <= 0xdfff)) {
    d.problem = "byte " + std::to_string(i) + " starts an invalid UTF-8 sequence";
    return d;
  }
  if (d.cp < 0x20 || d.cp == 0x7f || (d.cp >= 0x80 && d.cp <= 0x9f)) {
    d.problem = "byte " + std::to_string(i) + " is control character " + Hex(d.cp);
  }
  return d;
}

std::string TextProblem(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    Decoded d = DecodeOne(s, text.size(), i);
    if (!d.problem.empty()) return d.problem;
    i += d.len;
  }
  return "";
}

std::string EscapeText(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    Decoded d = DecodeOne(s, text.size(), i);
    if (!d.problem.empty()) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", s[i]);
      out += buf;
      ++i;
      continue;
    }
    if (s[i] == '\\') out += '\\';
    out.append(text.substr(i, d.len));
    i += d.len;
  }
  return out;
}

Status CheckTextFields(const Message& msg, const std::string& prefix) { return Walk(msg, prefix); }

}  // namespace iscsigw::state
