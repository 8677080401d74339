// The engine over a real FileStore: READ/WRITE complete later, on the io_context's thread, and
// exactly once.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "dataplane/backing/file/file_store.h"
#include "dataplane/scsi/engine.h"
#include "dataplane/scsi/sense.h"

namespace iscsigw::scsi {
namespace file_store_engine_test {

TEST(EngineOnFileStore, WriteFuaReadBackAndSynchronizeCacheCompleteAsynchronously) {
  char tmpl[] = "/tmp/iscsigw-engine-file-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir = tmpl;
  boost::asio::io_context ioc;
  {
    auto opened = backing::FileStore::Open(
        backing::FileStoreOptions{(dir / "lun").string(), 1 << 20}, {&ioc});
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    TargetInfo target;
    target.name = "iqn.2026-11.io.iscsigw:file";
    LunConfig cfg;
    cfg.id = 0;
    target.luns.push_back(std::make_shared<Lun>(cfg, std::move(opened).value()));

    std::vector<uint8_t> buf(65536);
    int completions = 0;
    Task task;
    auto run = [&](std::initializer_list<uint8_t> cdb, uint32_t out_len) {
      task = Task{};
      std::copy(cdb.begin(), cdb.end(), task.cdb.begin());
      task.cdb_len = 16;
      task.buf = buf.data();
      task.buf_cap = static_cast<uint32_t>(buf.size());
      task.expected_length = 4096;
      task.data_out_len = out_len;
      task.complete = [](Task*, void* ctx) { ++*static_cast<int*>(ctx); };
      task.complete_ctx = &completions;
      completions = 0;
      Engine::Execute(target, task);
    };
    auto wait = [&] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (completions == 0 && std::chrono::steady_clock::now() < deadline) {
        ioc.restart();
        ioc.run_for(std::chrono::milliseconds(10));
      }
      ioc.restart();
      ioc.poll();
      EXPECT_EQ(completions, 1);
    };

    for (size_t i = 0; i < 4096; ++i) buf[i] = static_cast<uint8_t>(i * 3);
    const std::vector<uint8_t> data(buf.begin(), buf.begin() + 4096);
    run({0x2A, 0x08, 0, 0, 0, 16, 0, 0, 8, 0}, 4096);  // WRITE(10) FUA, LBA 16, 8 blocks
    EXPECT_EQ(completions, 0);
    wait();
    EXPECT_EQ(task.status, ScsiStatus::kGood);

    std::memset(buf.data(), 0, buf.size());
    run({0x28, 0, 0, 0, 0, 16, 0, 0, 8, 0}, 0);
    EXPECT_EQ(completions, 0);
    wait();
    ASSERT_EQ(task.status, ScsiStatus::kGood);
    ASSERT_EQ(task.in_len, 4096u);
    ASSERT_EQ(task.in_seg_count, 1u);
    EXPECT_EQ(std::vector<uint8_t>(task.in_segs[0].data, task.in_segs[0].data + 4096), data);

    run({0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0);  // SYNCHRONIZE CACHE(10)
    wait();
    EXPECT_EQ(task.status, ScsiStatus::kGood);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace file_store_engine_test
}  // namespace iscsigw::scsi
