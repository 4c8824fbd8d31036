// A rank's "exit reason" line, read from the tail of its log by the worker.
#include "worker/exit_detail.h"

#include <unistd.h>

#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

TEST(ExitDetailTest, TheLastReasonLineWins) {
  EXPECT_EQ(ExitDetailIn("step 1\n"
                         "tessera-train: exit reason: first\n"
                         "step 2\n"
                         "tessera-train: exit reason: CUDA error: out of memory\n"
                         "teardown\n"),
            "CUDA error: out of memory");
}

TEST(ExitDetailTest, OnlyALineThatStartsWithThePrefixCounts) {
  EXPECT_EQ(ExitDetailIn("loss 0.3\n"), "");
  EXPECT_EQ(ExitDetailIn("echo tessera-train: exit reason: quoted\n"), "");
  // At the very start of the tail, and without a final newline.
  EXPECT_EQ(ExitDetailIn("tessera-train: exit reason: no newline"), "no newline");
}

TEST(ExitDetailTest, ControlCharactersAreBlankedAndLongReasonsCut) {
  EXPECT_EQ(ExitDetailIn("tessera-train: exit reason: a\tb\x1b[31mc\r\n"), "a b [31mc");
  const std::string detail =
      ExitDetailIn("tessera-train: exit reason: " + std::string(5000, 'x') + "\n");
  EXPECT_EQ(detail.size(), kMaxExitDetail);
}

TEST(ExitDetailTest, ReadsTheTailOfALogAndNotThroughALink) {
  testing::TempDir dir;
  const std::string log = dir.File("rank-0.log");
  Write(log, std::string(100000, '.') + "\n" +
                 "tessera-train: exit reason: collective timeout\n");
  EXPECT_EQ(ReadExitDetail(log), "collective timeout");
  // A reason further back than the tail is not read.
  Write(log, "tessera-train: exit reason: old\n" + std::string(100000, '.'));
  EXPECT_EQ(ReadExitDetail(log), "");
  // The log belongs to the rank's owner: a link in its place is not followed.
  const std::string target = dir.File("elsewhere");
  Write(target, "tessera-train: exit reason: via a link\n");
  const std::string link = dir.File("rank-1.log");
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_EQ(ReadExitDetail(link), "");
  EXPECT_EQ(ReadExitDetail(dir.File("missing.log")), "");
  EXPECT_EQ(ReadExitDetail(""), "");
}

}  // namespace
}  // namespace tessera
