// Replays files through a fuzz target's LLVMFuzzerTestOneInput without libFuzzer: each argument is
// a file or a directory of files (a seed corpus, or the regression corpus of inputs that once
// crashed). A crash fails the run; otherwise prints "N passed, 0 failed".
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
      return 1;
    }
  }
  for (const auto& f : files) {
    std::ifstream s(f, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(s)),
                               std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }
  std::printf("%zu passed, 0 failed\n", files.size());
  return 0;
}
