#include "dataplane/base/log_format.h"

#include <gtest/gtest.h>

#include <string>

namespace iscsigw::log {
namespace {

TEST(LogFormat, PlainMessageIsOneJsonObjectPerLine) {
  EXPECT_EQ(FormatJsonLine("2026-11-29T21:53:25.000001Z", "info", "ctl", "stopped"),
            "{\"ts\":\"2026-11-29T21:53:25.000001Z\",\"level\":\"info\",\"logger\":\"ctl\","
            "\"msg\":\"stopped\"}\n");
}

TEST(LogFormat, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(FormatJsonLine("t", "warn", "iscsi",
                           "a\"b\\c\nd\te\x01"
                           "f"),
            "{\"ts\":\"t\",\"level\":\"warn\",\"logger\":\"iscsi\","
            "\"msg\":\"a\\\"b\\\\c\\nd\\te\\u0001f\"}\n");
}

TEST(LogFormat, ReplacesInvalidUtf8AndKeepsValidUtf8) {
  EXPECT_EQ(FormatJsonLine("t", "info", "ctl", "caf\xc3\xa9 \xff"),
            "{\"ts\":\"t\",\"level\":\"info\",\"logger\":\"ctl\",\"msg\":\"caf\xc3\xa9 "
            "\xef\xbf\xbd\"}\n");
}

TEST(LogFormat, ConnectionPrefixBecomesFields) {
  EXPECT_EQ(FormatJsonLine("t", "info", "iscsi", "[C12 S3] login: initiator x"),
            "{\"ts\":\"t\",\"level\":\"info\",\"logger\":\"iscsi\",\"conn\":12,\"tsih\":3,"
            "\"msg\":\"login: initiator x\"}\n");
  EXPECT_EQ(FormatJsonLine("t", "debug", "pdu", "[C7 S1 I0x1f] data"),
            "{\"ts\":\"t\",\"level\":\"debug\",\"logger\":\"pdu\",\"conn\":7,\"tsih\":1,"
            "\"itt\":\"0x1f\",\"msg\":\"data\"}\n");
  EXPECT_EQ(FormatJsonLine("t", "warn", "pdu", "[C5] header digest error"),
            "{\"ts\":\"t\",\"level\":\"warn\",\"logger\":\"pdu\",\"conn\":5,"
            "\"msg\":\"header digest error\"}\n");
}

TEST(LogFormat, BracketsThatAreNotAContextStayInTheMessage) {
  EXPECT_EQ(FormatJsonLine("t", "info", "ctl", "[Cxyz] no"),
            "{\"ts\":\"t\",\"level\":\"info\",\"logger\":\"ctl\",\"msg\":\"[Cxyz] no\"}\n");
  EXPECT_EQ(FormatJsonLine("t", "info", "ctl", "[C1 Q2] no"),
            "{\"ts\":\"t\",\"level\":\"info\",\"logger\":\"ctl\",\"msg\":\"[C1 Q2] no\"}\n");
}

TEST(LogFormat, ParseLevel) {
  EXPECT_EQ(ParseLevel("debug"), spdlog::level::debug);
  EXPECT_EQ(ParseLevel("off"), spdlog::level::off);
  EXPECT_EQ(ParseLevel("verbose"), std::nullopt);
}

TEST(LogFormat, SpdlogFormatterWritesUtcMicroseconds) {
  auto f = MakeJsonFormatter();
  spdlog::details::log_msg msg(spdlog::source_loc{}, "scsi", spdlog::level::err, "x\"y");
  msg.time =
      std::chrono::system_clock::time_point(std::chrono::microseconds(1'700'000'000'000'123));
  spdlog::memory_buf_t buf;
  f->format(msg, buf);
  EXPECT_EQ(std::string(buf.data(), buf.size()),
            "{\"ts\":\"2023-11-14T22:13:20.000123Z\",\"level\":\"error\",\"logger\":\"scsi\","
            "\"msg\":\"x\\\"y\"}\n");
}

}  // namespace
}  // namespace iscsigw::log
