#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/data/data_test_util.h"
#include "worker/trainer/data/tar_reader.h"
#include "worker/trainer/data/tar_writer.h"

namespace tessera::trainer::data {
namespace {

using testing::ReadFile;
using testing::RunCommand;
using testing::ScratchDir;
using testing::WriteFile;

std::map<std::string, std::string> ReadAll(TarReader& reader) {
  std::map<std::string, std::string> members;
  for (;;) {
    auto m = reader.Next();
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok() || !m->has_value()) break;
    members[(*m)->name] = (*m)->data;
  }
  return members;
}

std::map<std::string, std::string> Samples() {
  const std::string long_name =
      std::string(60, 'd') + "/" + std::string(70, 'n') + ".jpg";
  return {{"00000000.jpg", std::string(1000, '\xAB')},
          {"00000000.cls", "3"},
          {"empty.txt", ""},
          {"block.bin", std::string(512, 'x')},
          {long_name, "long"}};
}

TEST(TarTest, WriteThenReadRoundTrips) {
  ScratchDir dir;
  const std::string path = dir.File("a.tar");
  auto writer = TarWriter::Create(path);
  ASSERT_TRUE(writer.ok());
  const auto samples = Samples();
  for (const auto& [name, data] : samples) ASSERT_TRUE((*writer)->Add(name, data).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  EXPECT_EQ(std::filesystem::file_size(path) % 10240, 0u);
  auto reader = TarReader::OpenFile(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(ReadAll(**reader), samples);
  // Skipping the data still walks every member; data_offset locates it.
  const std::string archive = ReadFile(path);
  auto skipping = TarReader::OpenFile(path);
  int count = 0;
  for (;;) {
    auto m = (*skipping)->Next(/*read_data=*/false);
    ASSERT_TRUE(m.ok());
    if (!m->has_value()) break;
    EXPECT_TRUE((*m)->data.empty());
    EXPECT_EQ((*m)->size, static_cast<int64_t>(samples.at((*m)->name).size()));
    EXPECT_EQ(archive.substr((*m)->data_offset, (*m)->size), samples.at((*m)->name));
    ++count;
  }
  EXPECT_EQ(count, 5);
}

TEST(TarTest, SystemTarReadsOursAndWeReadSystemTar) {
  if (RunCommand("tar --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no tar command";
  ScratchDir dir;
  const auto samples = Samples();
  {
    auto writer = TarWriter::Create(dir.File("ours.tar"));
    for (const auto& [name, data] : samples) ASSERT_TRUE((*writer)->Add(name, data).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  std::filesystem::create_directories(dir.File("out"));
  ASSERT_EQ(
      RunCommand(absl::StrCat("tar -xf ", dir.File("ours.tar"), " -C ", dir.File("out"))),
      0);
  for (const auto& [name, data] : samples)
    EXPECT_EQ(ReadFile(dir.File("out/" + name)), data);
  // GNU (long names in 'L' members) and pax ('x' headers) archives of the tree.
  for (const char* format : {"gnu", "pax", "ustar"}) {
    const std::string tar = dir.File(absl::StrCat(format, ".tar"));
    ASSERT_EQ(RunCommand(absl::StrCat("cd ", dir.File("out"), " && tar --format=", format,
                                      " -cf ", tar, " *")),
              0)
        << format;
    auto reader = TarReader::OpenFile(tar);
    ASSERT_TRUE(reader.ok());
    EXPECT_EQ(ReadAll(**reader), samples) << format;
  }
}

std::string OneMemberArchive() {
  ScratchDir dir;
  auto writer = TarWriter::Create(dir.File("x.tar"));
  EXPECT_TRUE((*writer)->Add("a.jpg", std::string(700, 'a')).ok());
  EXPECT_TRUE((*writer)->Finish().ok());
  return ReadFile(dir.File("x.tar"));
}

TEST(TarTest, BadChecksumTruncationAndLimitsAreDataLoss) {
  const std::string good = OneMemberArchive();
  std::string bad = good;
  bad[10] ^= 1;  // inside the name: the checksum no longer matches
  auto m = TarReader::FromBuffer(bad)->Next();
  ASSERT_TRUE(absl::IsDataLoss(m.status())) << m.status();
  EXPECT_NE(m.status().message().find("checksum"), absl::string_view::npos);
  for (size_t keep : {size_t{100}, size_t{512 + 300}}) {
    auto reader = TarReader::FromBuffer(good.substr(0, keep));
    auto t = reader->Next();
    EXPECT_TRUE(absl::IsDataLoss(t.status())) << keep << ": " << t.status();
    EXPECT_TRUE(absl::IsDataLoss(reader->Next().status())) << "errors are sticky";
  }
  TarReaderOptions small;
  small.max_member_bytes = 100;
  EXPECT_TRUE(absl::IsDataLoss(TarReader::FromBuffer(good, small)->Next().status()));
  // An archive cut right after its last member (no end blocks) is accepted.
  auto cut = TarReader::FromBuffer(good.substr(0, 512 + 1024));
  ASSERT_TRUE(cut->Next().ok());
  auto end = cut->Next();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
  EXPECT_TRUE(absl::IsNotFound(TarReader::OpenFile("/nonexistent/x.tar").status()));
}

}  // namespace
}  // namespace tessera::trainer::data
