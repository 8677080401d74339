#include "base/log_format.h"

#include <gtest/gtest.h>

#include <string>

#include "base/log.h"

namespace iscsigw::log {
namespace log_format_test {

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

TEST(LogFormat, EveryContextFieldBecomesAField) {
  EXPECT_EQ(FormatJsonLine("t", "info", "iscsi",
                           "[C12 S3 I0x1f ini=iqn.1994-05.com.redhat:h1 "
                           "tgt=iqn.2026-11.io.iscsigw:db] session closed"),
            "{\"ts\":\"t\",\"level\":\"info\",\"logger\":\"iscsi\",\"conn\":12,\"tsih\":3,"
            "\"itt\":\"0x1f\",\"initiator\":\"iqn.1994-05.com.redhat:h1\","
            "\"target\":\"iqn.2026-11.io.iscsigw:db\",\"msg\":\"session closed\"}\n");
  // Before a session exists: no TSIH, and only the names the login gave so far.
  EXPECT_EQ(FormatJsonLine("t", "info", "iscsi", "[C4 ini=iqn.x:y] login refused"),
            "{\"ts\":\"t\",\"level\":\"info\",\"logger\":\"iscsi\",\"conn\":4,"
            "\"initiator\":\"iqn.x:y\",\"msg\":\"login refused\"}\n");
  EXPECT_EQ(FormatJsonLine("t", "info", "iscsi", "[C4 tgt=iqn.t] x"),
            "{\"ts\":\"t\",\"level\":\"info\",\"logger\":\"iscsi\",\"conn\":4,"
            "\"target\":\"iqn.t\",\"msg\":\"x\"}\n");
}

TEST(LogFormat, ContextNamesAreEscapedInJson) {
  // A name that is not UTF-8 or holds a quote still gives a line that parses.
  EXPECT_EQ(FormatJsonLine("t", "info", "iscsi", "[C1 ini=a\"b\xff] m"),
            "{\"ts\":\"t\",\"level\":\"info\",\"logger\":\"iscsi\",\"conn\":1,"
            "\"initiator\":\"a\\\"b\xef\xbf\xbd\",\"msg\":\"m\"}\n");
}

TEST(LogFormat, ContextGivenTwiceOrEmptyIsNotAContext) {
  for (const char* m : {"[C1 C2] m", "[C1 S2 S3] m", "[C1 ini=a ini=b] m", "[C1 ini=] m"}) {
    EXPECT_EQ(FormatJsonLine("t", "info", "iscsi", m),
              "{\"ts\":\"t\",\"level\":\"info\",\"logger\":\"iscsi\",\"msg\":\"" + std::string(m) +
                  "\"}\n");
  }
}

TEST(LogFormat, ConnContextWritesThePrefixTheParserReads) {
  EXPECT_EQ(fmt::format("{}login", ConnContext{7, 0, {}, {}}), "[C7] login");
  EXPECT_EQ(fmt::format("{}x", ConnContext{7, 2, "iqn.i", "iqn.t"}),
            "[C7 S2 ini=iqn.i tgt=iqn.t] x");
  // Bytes that would end the prefix, split it or break the line are replaced.
  const std::string line = fmt::format("{}m", ConnContext{1, 0, "a b]c\nd", "t S9"});
  EXPECT_EQ(line, "[C1 ini=a?b?c?d tgt=t?S9] m");
  EXPECT_EQ(FormatJsonLine("t", "info", "iscsi", line),
            "{\"ts\":\"t\",\"level\":\"info\",\"logger\":\"iscsi\",\"conn\":1,"
            "\"initiator\":\"a?b?c?d\",\"target\":\"t?S9\",\"msg\":\"m\"}\n");
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

}  // namespace log_format_test
}  // namespace iscsigw::log
