// tessera-data as a user runs it: pack an image folder, check both kinds.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/data/data_test_util.h"

namespace tessera::trainer::data {
namespace {

using testing::MakeImageFolder;
using testing::MakeJpeg;
using testing::ScratchDir;
using testing::WriteFile;

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Result RunTool(const std::string& args) {
  const char* bin = std::getenv("TESSERA_BIN_DIR");
  const std::string tool = absl::StrCat(bin != nullptr ? bin : "bin", "/tessera-data");
  Result r;
  FILE* pipe = popen(absl::StrCat(tool, " ", args, " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(TesseraDataCliTest, HelpShowsAnExample) {
  const Result r = RunTool("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tessera-data pack /data/pets --out"), std::string::npos)
      << r.output;
  EXPECT_EQ(RunTool("pack").exit_code, 2);
}

TEST(TesseraDataCliTest, ABadNumberIsOneLineSayingWhatWasExpectedAndAUsageExit) {
  const std::string hint = "\nRun with --help for more information.\n";
  const Result workers = RunTool("check /data/pets --workers 257");
  EXPECT_EQ(workers.exit_code, 2) << workers.output;
  EXPECT_EQ(workers.output,
            "--workers: expected a whole number from 1 to 256, got \"257\"" + hint);
  const Result shard_size = RunTool("pack /data/pets --out /data/shards --shard-size x");
  EXPECT_EQ(shard_size.exit_code, 2) << shard_size.output;
  EXPECT_EQ(shard_size.output,
            "--shard-size: expected a whole number >= 1, got \"x\"" + hint);
}

TEST(TesseraDataCliTest, PacksAFolderAndChecksBothKinds) {
  ScratchDir dir;
  MakeImageFolder(dir.File("pets"), {"cat", "dog"}, {{"train", 3}, {"val", 2}}, 32);
  const Result pack = RunTool(absl::StrCat("pack ", dir.File("pets"), " --out ",
                                           dir.File("shards"), " --shard-size 2"));
  ASSERT_EQ(pack.exit_code, 0) << pack.output;
  EXPECT_NE(pack.output.find("2 classes, 5 shards"), std::string::npos) << pack.output;
  for (const std::string root : {dir.File("pets"), dir.File("shards")}) {
    const Result check = RunTool(absl::StrCat("check ", root));
    EXPECT_EQ(check.exit_code, 0) << check.output;
    EXPECT_NE(check.output.find("train: 6 samples, 0 unreadable"), std::string::npos)
        << check.output;
    EXPECT_NE(check.output.find("val: 4 samples, 0 unreadable"), std::string::npos)
        << check.output;
    EXPECT_NE(check.output.find("min 39x32, max 39x32"), std::string::npos)
        << check.output;
  }
}

TEST(TesseraDataCliTest, CheckNamesUnreadableFilesAndFails) {
  ScratchDir dir;
  MakeImageFolder(dir.path(), {"cat"}, {{"train", 2}});
  const std::string jpeg = MakeJpeg(50, 40, 1);
  WriteFile(dir.path() + "/train/cat/truncated.jpg", jpeg.substr(0, jpeg.size() / 2));
  WriteFile(dir.path() + "/train/cat/zero.jpg", "");
  const Result r = RunTool(absl::StrCat("check ", dir.path(), " --workers 3"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("train: 4 samples, 2 unreadable"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("unreadable: " + dir.path() + "/train/cat/truncated.jpg"),
            std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("unreadable: " + dir.path() + "/train/cat/zero.jpg: empty file"),
      std::string::npos)
      << r.output;
}

TEST(TesseraDataCliTest, MissingFolderFailsNamingIt) {
  ScratchDir dir;
  const Result r =
      RunTool(absl::StrCat("pack ", dir.File("none"), " --out ", dir.File("o")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir.File("none")), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tessera::trainer::data
