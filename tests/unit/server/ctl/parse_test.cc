// iscsigwctl's readings of its command line (server/ctl/parse.h) and the sizes it prints
// (server/ctl/output.h): what `lun create --size`, `lun resize`, `--from-lun` and `snapshot create`
// accept, and what the tables show.
#include "server/ctl/parse.h"

#include <gtest/gtest.h>

#include "server/ctl/output.h"

namespace iscsigw::ctl {
namespace {

TEST(ParseSize, PlainNumbersAreBytes) {
  uint64_t n = 0;
  ASSERT_TRUE(ParseSize("4096", &n));
  EXPECT_EQ(n, 4096u);
  ASSERT_TRUE(ParseSize("0", &n));
  EXPECT_EQ(n, 0u);
}

TEST(ParseSize, UnitsAreBinaryMultiplesInAnySpelling) {
  const struct {
    const char* text;
    uint64_t bytes;
  } cases[] = {
      {"2k", 2ull << 10},  {"64M", 64ull << 20}, {"1G", 1ull << 30},   {"1g", 1ull << 30},
      {"1Gi", 1ull << 30}, {"1GB", 1ull << 30},  {"1GiB", 1ull << 30}, {"10T", 10ull << 40},
  };
  for (const auto& c : cases) {
    uint64_t n = 0;
    ASSERT_TRUE(ParseSize(c.text, &n)) << c.text;
    EXPECT_EQ(n, c.bytes) << c.text;
  }
}

TEST(ParseSize, RefusesWhatIsNotASize) {
  for (const char* bad : {"", "M", "abc", "8Q", "1P", "1 G", "1GiBB", "12X"}) {
    uint64_t n = 7;
    EXPECT_FALSE(ParseSize(bad, &n)) << bad;
  }
}

TEST(ParseLunRef, TheIdFollowsTheLastColon) {
  v1::LunRef ref;
  ASSERT_TRUE(ParseLunRef("iqn.2026-11.io.iscsigw:db:3", &ref));
  EXPECT_EQ(ref.target(), "iqn.2026-11.io.iscsigw:db");
  EXPECT_EQ(ref.id(), 3u);
  ASSERT_TRUE(ParseLunRef("db:255", &ref));
  EXPECT_EQ(ref.target(), "db");
  EXPECT_EQ(ref.id(), 255u);
}

TEST(ParseLunRef, RefusesWhatIsNotTargetColonId) {
  for (const char* bad : {"db", ":3", "db:", "db:1000", "db:x", "db:-1", "db: 1"}) {
    v1::LunRef ref;
    EXPECT_FALSE(ParseLunRef(bad, &ref)) << bad;
  }
}

TEST(HumanSize, TheLargestBinaryUnitThatDividesTheSize) {
  EXPECT_EQ(HumanSize(0), "0B");
  EXPECT_EQ(HumanSize(1000), "1000B");
  EXPECT_EQ(HumanSize(1536), "1536B");
  EXPECT_EQ(HumanSize(4096), "4KiB");
  EXPECT_EQ(HumanSize(64ull << 20), "64MiB");
  EXPECT_EQ(HumanSize(3ull << 30), "3GiB");
  EXPECT_EQ(HumanSize(1ull << 40), "1TiB");
  EXPECT_EQ(HumanSize(1ull << 50), "1024TiB");
}

}  // namespace
}  // namespace iscsigw::ctl
