#include "base/unique_fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <utility>

namespace iscsigw {
namespace unique_fd_test {

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

int OpenNull() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

TEST(UniqueFd, ClosesWhenItGoes) {
  int raw = -1;
  {
    UniqueFd fd(OpenNull());
    raw = fd.get();
    ASSERT_GE(raw, 0);
    EXPECT_TRUE(fd.valid());
    EXPECT_TRUE(IsOpen(raw));
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFd, ReleaseHandsOwnershipOver) {
  UniqueFd fd(OpenNull());
  const int raw = fd.release();
  EXPECT_FALSE(fd.valid());
  fd.Close();  // nothing held: nothing closed
  EXPECT_TRUE(IsOpen(raw));
  ::close(raw);
}

TEST(UniqueFd, ResetClosesWhatWasHeld) {
  UniqueFd fd(OpenNull());
  const int first = fd.get();
  const int second = OpenNull();
  fd.Reset(second);
  EXPECT_FALSE(IsOpen(first));
  EXPECT_EQ(fd.get(), second);
  EXPECT_TRUE(IsOpen(second));
}

TEST(UniqueFd, MoveTransfersAndClosesTheTarget) {
  UniqueFd a(OpenNull());
  UniqueFd b(OpenNull());
  const int a_raw = a.get();
  const int b_raw = b.get();
  b = std::move(a);
  EXPECT_FALSE(IsOpen(b_raw));
  EXPECT_EQ(b.get(), a_raw);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  UniqueFd c(std::move(b));
  EXPECT_EQ(c.get(), a_raw);
  EXPECT_TRUE(IsOpen(a_raw));
}

}  // namespace unique_fd_test
}  // namespace iscsigw
