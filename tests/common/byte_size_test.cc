#include "common/byte_size.h"

#include <cstdint>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

TEST(ByteSizeTest, UnitsAreBinaryMultiplesWithOrWithoutAnI) {
  EXPECT_EQ(*ParseByteSize("3GiB", "x"), int64_t{3} << 30);
  EXPECT_EQ(*ParseByteSize("3GB", "x"), int64_t{3} << 30);
  EXPECT_EQ(*ParseByteSize("3g", "x"), int64_t{3} << 30);
  EXPECT_EQ(*ParseByteSize("3000MB", "x"), int64_t{3000} << 20);
  EXPECT_EQ(*ParseByteSize("512k", "x"), int64_t{512} << 10);
  EXPECT_EQ(*ParseByteSize("2TiB", "x"), int64_t{2} << 40);
  EXPECT_EQ(*ParseByteSize("3 GiB", "x"), int64_t{3} << 30);
  EXPECT_EQ(*ParseByteSize("1048576", "x"), 1048576);
  EXPECT_EQ(*ParseByteSize("7B", "x"), 7);
  EXPECT_EQ(*ParseByteSize("0", "x"), 0);
}

TEST(ByteSizeTest, AnythingElseIsRejectedNamingWhatWasParsed) {
  for (const char* bad : {"", "GiB", "-3GiB", "1.5GiB", "3XB", "3 G i B", "3iB", "lots",
                          "99999999999999999999", "9000000000000G"}) {
    absl::StatusOr<int64_t> parsed = ParseByteSize(bad, "memory_per_rank");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("memory_per_rank: '")) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("is not a size")) << bad;
  }
}

TEST(ByteSizeTest, FormatsInTheLargestUnitWithADecimalOnlyWhenNeeded) {
  EXPECT_EQ(FormatByteSize(int64_t{3} << 30), "3 GiB");
  EXPECT_EQ(FormatByteSize(int64_t{3000} << 20), "2.9 GiB");
  EXPECT_EQ(FormatByteSize(int64_t{1536} << 20), "1.5 GiB");
  EXPECT_EQ(FormatByteSize(int64_t{64} << 20), "64 MiB");
  EXPECT_EQ(FormatByteSize(512), "512 B");
  EXPECT_EQ(FormatByteSize(0), "0 B");
}

TEST(ByteSizeTest, WhatIsFormattedParsesBackWhenWhole) {
  for (int64_t bytes : {int64_t{3} << 30, int64_t{64} << 20, int64_t{5} << 40}) {
    EXPECT_EQ(*ParseByteSize(FormatByteSize(bytes), "x"), bytes);
  }
}

}  // namespace
}  // namespace tessera
