// Reads a fuzzer's input as a sequence of small decisions and byte strings, the way
// FuzzedDataProvider does; running out of input yields zeros and empty spans, never an error.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

namespace iscsigw::fuzz {

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), left_(size) {}

  bool empty() const { return left_ == 0; }
  size_t left() const { return left_; }

  uint8_t Byte() {
    if (left_ == 0) return 0;
    --left_;
    return *p_++;
  }
  uint16_t U16() { return static_cast<uint16_t>(Byte() | (Byte() << 8)); }
  // Up to n bytes (fewer when the input runs out).
  std::span<const uint8_t> Bytes(size_t n) {
    n = std::min(n, left_);
    std::span<const uint8_t> out(p_, n);
    p_ += n;
    left_ -= n;
    return out;
  }
  // A length-prefixed piece: one byte of length scale, then that many bytes.
  std::span<const uint8_t> Piece() { return Bytes(U16() % 4097); }
  std::span<const uint8_t> Rest() { return Bytes(left_); }

 private:
  const uint8_t* p_;
  size_t left_;
};

// A rule an oracle guards was broken: names it on stderr (the replay's and libFuzzer's log), then
// aborts, which both report as a crash with this input.
[[noreturn]] inline void Violated(const char* rule) {
  std::fprintf(stderr, "oracle: %s\n", rule);
  std::abort();
}

}  // namespace iscsigw::fuzz
