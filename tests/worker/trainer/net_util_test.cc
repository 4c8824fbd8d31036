#include "worker/trainer/dist/net_util.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

TEST(NetUtilTest, ParsesHostAndPort) {
  absl::StatusOr<HostPort> parsed = ParseHostPort("coord.example:50051");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->host, "coord.example");
  EXPECT_EQ(parsed->port, 50051);
}

TEST(NetUtilTest, ParsesBracketedIpv6AndFormatsItBack) {
  absl::StatusOr<HostPort> parsed = ParseHostPort("[::1]:29500");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->host, "::1");
  EXPECT_EQ(parsed->port, 29500);
  EXPECT_EQ(FormatHostPort("::1", 29500), "[::1]:29500");
  EXPECT_EQ(FormatHostPort("10.0.0.2", 7), "10.0.0.2:7");
}

TEST(NetUtilTest, RejectsMalformedAddresses) {
  for (const char* bad : {"", "host", ":80", "host:", "host:x", "host:65536", "::1:80"}) {
    EXPECT_EQ(ParseHostPort(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(NetUtilTest, LocalAddressTowardsLoopbackIsLoopback) {
  absl::StatusOr<std::string> local = LocalAddressFor(HostPort{"127.0.0.1", 50051});
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(*local, "127.0.0.1");
}

TEST(NetUtilTest, LocalAddressForUnresolvableHostIsUnavailable) {
  EXPECT_EQ(LocalAddressFor(HostPort{"no-such-host.invalid", 1}).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tessera::trainer
