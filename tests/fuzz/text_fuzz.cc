// The text key=value codec (dataplane/pdu/text.h, RFC 7143 6.1): whatever parses encodes back to
// bytes that parse to the same keys.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "dataplane/pdu/text.h"

using namespace iscsigw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = pdu::ParseText(std::span<const uint8_t>(data, size));
  if (!parsed.ok()) return 0;
  std::vector<uint8_t> encoded;
  pdu::EncodeText(parsed.value(), &encoded);
  auto again = pdu::ParseText(encoded);
  if (!again.ok() || again.value().size() != parsed.value().size()) std::abort();
  for (size_t i = 0; i < parsed.value().size(); ++i) {
    if (again.value()[i].key != parsed.value()[i].key ||
        again.value()[i].value != parsed.value()[i].value) {
      std::abort();
    }
  }
  return 0;
}
