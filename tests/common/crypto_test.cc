#include "common/crypto.h"

#include <string>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string HexSha256(absl::string_view data) {
  return absl::BytesToHexString(Sha256(data));
}

TEST(CryptoTest, Sha256MatchesKnownVectors) {
  // FIPS 180-2 test vectors.
  EXPECT_EQ(HexSha256("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(HexSha256(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(HexSha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256("abc").size(), 32u);
}

TEST(CryptoTest, ConstantTimeEqualComparesContentAndLength) {
  EXPECT_TRUE(ConstantTimeEqual("secret", "secret"));
  EXPECT_TRUE(ConstantTimeEqual("", ""));
  EXPECT_FALSE(ConstantTimeEqual("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEqual("Secret", "secret"));
  EXPECT_FALSE(ConstantTimeEqual("secret", "secrets"));
  EXPECT_FALSE(ConstantTimeEqual("", "x"));
  const std::string with_nul("a\0b", 3);
  EXPECT_TRUE(ConstantTimeEqual(with_nul, std::string("a\0b", 3)));
  EXPECT_FALSE(ConstantTimeEqual(with_nul, std::string("a\0c", 3)));
}

TEST(CryptoTest, RandomBytesHaveTheAskedLengthAndDiffer) {
  for (int n : {0, 1, 16, 32, 1000}) {
    absl::StatusOr<std::string> bytes = RandomBytes(n);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(bytes->size(), static_cast<size_t>(n));
  }
  absl::StatusOr<std::string> a = RandomBytes(32);
  absl::StatusOr<std::string> b = RandomBytes(32);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);  // equal with probability 2^-256
}

TEST(CryptoTest, RandomBytesRefusesANegativeLength) {
  EXPECT_EQ(RandomBytes(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
