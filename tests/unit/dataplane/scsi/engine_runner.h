// Test helper: runs one CDB through Engine::Execute against a target on one I_T nexus, with a
// 2 MiB data buffer. Run() checks that the engine completed the task exactly once (for stores that
// complete inline); Start() leaves a command that waits on a held store call pending.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <vector>

#include "dataplane/scsi/engine.h"
#include "dataplane/scsi/sense.h"
#include "dataplane/scsi/task.h"

namespace iscsigw::scsi {

class Runner {
 public:
  Runner(TargetInfo& target, Nexus& nexus) : target_(target), nexus_(nexus), buf_(1 << 21) {}

  // The LUN the next commands address.
  void SetLun(uint64_t lun) { lun_ = lun; }

  Task& Run(std::initializer_list<uint8_t> cdb, uint32_t expected = 0,
            const std::vector<uint8_t>& data_out = {}) {
    return RunCdb(std::span<const uint8_t>(cdb.begin(), cdb.size()), expected, data_out);
  }
  // The same for a CDB built at run time.
  Task& RunCdb(std::span<const uint8_t> cdb, uint32_t expected = 0,
               const std::vector<uint8_t>& data_out = {}) {
    Start(cdb, expected, data_out);
    EXPECT_EQ(completions_, 1);
    return task_;
  }
  // Executes one CDB (on `nexus` when not null); completions() tells whether it has completed.
  Task& Start(std::initializer_list<uint8_t> cdb, uint32_t expected = 0,
              const std::vector<uint8_t>& data_out = {}, Nexus* nexus = nullptr) {
    return Start(std::span<const uint8_t>(cdb.begin(), cdb.size()), expected, data_out, nexus);
  }
  Task& Start(std::span<const uint8_t> cdb, uint32_t expected = 0,
              const std::vector<uint8_t>& data_out = {}, Nexus* nexus = nullptr) {
    task_ = Task{};
    task_.lun = lun_;
    std::copy(cdb.begin(), cdb.end(), task_.cdb.begin());
    task_.cdb_len = 16;
    task_.nexus = nexus != nullptr ? nexus : &nexus_;
    task_.expected_length = expected;
    task_.buf = buf_.data();
    task_.buf_cap = static_cast<uint32_t>(buf_.size());
    if (!data_out.empty()) {
      std::memcpy(buf_.data(), data_out.data(), data_out.size());
      task_.data_out_len = static_cast<uint32_t>(data_out.size());
      task_.dir = DataDirection::kWrite;
    }
    completions_ = 0;
    task_.complete = [](Task*, void* ctx) { ++*static_cast<int*>(ctx); };
    task_.complete_ctx = &completions_;
    Engine::Execute(target_, task_);
    return task_;
  }
  int& completions() { return completions_; }
  std::vector<uint8_t> DataIn() const {
    std::vector<uint8_t> out;
    for (uint32_t i = 0; i < task_.in_seg_count; ++i) {
      out.insert(out.end(), task_.in_segs[i].data, task_.in_segs[i].data + task_.in_segs[i].len);
    }
    return out;
  }
  Task& task() { return task_; }

 private:
  TargetInfo& target_;
  Nexus& nexus_;
  std::vector<uint8_t> buf_;
  Task task_;
  uint64_t lun_ = 0;
  int completions_ = 0;
};

// CHECK CONDITION with fixed-format sense data of `key` and `asc`.
inline void ExpectSense(const Task& t, SenseKey key, Asc asc) {
  ASSERT_EQ(t.status, ScsiStatus::kCheckCondition);
  EXPECT_EQ(t.sense[2] & 0x0F, static_cast<uint8_t>(key));
  EXPECT_EQ(t.sense[12], asc.asc);
  EXPECT_EQ(t.sense[13], asc.ascq);
}

}  // namespace iscsigw::scsi
