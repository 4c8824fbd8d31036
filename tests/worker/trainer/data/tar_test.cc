#include <archive.h>
#include <archive_entry.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/data/data_test_util.h"
#include "worker/trainer/data/tar_reader.h"
#include "worker/trainer/data/tar_writer.h"

namespace tessera::trainer::data {
namespace {

using ::testing::HasSubstr;
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

// A 150-byte key with no '/' (ustar's 155-byte prefix cannot hold part of it),
// a 135-byte path that ustar splits at its '/', and a key that is not ASCII.
const std::string kLongKey = std::string(146, 'k') + ".jpg";
const std::string kLongPath = std::string(60, 'd') + "/" + std::string(70, 'n') + ".jpg";
const std::string kUtf8Key = "cl\xC3\xA9-\xC3\xB1.cls";  // "clé-ñ.cls"

std::map<std::string, std::string> Samples() {
  return {{"00000000.jpg", std::string(1000, '\xAB')},
          {"00000000.cls", "3"},
          {"empty.txt", ""},
          {"block.bin", std::string(512, 'x')},
          {kLongPath, "long path"},
          {kLongKey, "long key"},
          {kUtf8Key, "7"}};
}

void WriteSamples(const std::string& path) {
  auto writer = TarWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (const auto& [name, data] : Samples()) {
    const absl::Status added = (*writer)->Add(name, data);
    ASSERT_TRUE(added.ok()) << name << ": " << added;
  }
  ASSERT_TRUE((*writer)->Finish().ok());
  EXPECT_EQ((*writer)->bytes_written(),
            static_cast<int64_t>(std::filesystem::file_size(path)));
}

// Writes `members` with libarchive in `format` (ARCHIVE_FORMAT_TAR_*), as other
// tools write shards: full pax puts an 'x' header before every member, GNU tar
// an 'L' member before every long name.
void WriteWithLibarchive(const std::string& path, int format,
                         const std::map<std::string, std::string>& members) {
  archive* a = archive_write_new();
  ASSERT_EQ(archive_write_set_format(a, format), ARCHIVE_OK) << archive_error_string(a);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK);
  for (const auto& [name, data] : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_copy_pathname(e, name.c_str());
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
    EXPECT_GE(archive_write_header(a, e), ARCHIVE_WARN) << archive_error_string(a);
    EXPECT_EQ(archive_write_data(a, data.data(), data.size()),
              static_cast<la_ssize_t>(data.size()));
    archive_entry_free(e);
  }
  EXPECT_EQ(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
}

// A header's checksum field, recomputed after the header was changed.
void Rechecksum(std::string& archive, size_t header) {
  std::memset(archive.data() + header + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(archive[header + i]);
  std::snprintf(archive.data() + header + 148, 8, "%06o", sum);
}

TEST(TarTest, WriteThenReadRoundTrips) {
  ScratchDir dir;
  const std::string path = dir.File("a.tar");
  WriteSamples(path);
  EXPECT_EQ(std::filesystem::file_size(path) % 10240, 0u);
  auto reader = TarReader::OpenFile(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const auto samples = Samples();
  EXPECT_EQ(ReadAll(**reader), samples);
  // Read or skipped, data_offset and size locate the data in the file.
  const std::string archive = ReadFile(path);
  for (const bool read_data : {true, false}) {
    auto again = TarReader::OpenFile(path);
    int count = 0;
    for (;;) {
      auto m = (*again)->Next(read_data);
      ASSERT_TRUE(m.ok()) << m.status();
      if (!m->has_value()) break;
      EXPECT_EQ((*m)->data, read_data ? samples.at((*m)->name) : "");
      EXPECT_EQ((*m)->size, static_cast<int64_t>(samples.at((*m)->name).size()));
      EXPECT_EQ(archive.substr((*m)->data_offset, (*m)->size), samples.at((*m)->name));
      ++count;
    }
    EXPECT_EQ(count, static_cast<int>(samples.size()));
  }
}

TEST(TarTest, OurLongAndUtf8KeysGoInPaxHeaders) {
  ScratchDir dir;
  WriteSamples(dir.File("a.tar"));
  const std::string archive = ReadFile(dir.File("a.tar"));
  // The long key and the UTF-8 key each need a pax 'x' header with a path
  // record; the UTF-8 key goes in as its bytes.
  EXPECT_THAT(archive, HasSubstr(absl::StrCat(" path=", kLongKey, "\n")));
  EXPECT_THAT(archive,
              HasSubstr(absl::StrCat(" hdrcharset=BINARY\n20 path=", kUtf8Key, "\n")));
  EXPECT_THAT(archive, ::testing::Not(HasSubstr(kLongPath)));  // ustar splits it
}

TEST(TarTest, ReadsPaxAndGnuArchivesWithLongKeys) {
  ScratchDir dir;
  const auto samples = Samples();
  for (const int format : {ARCHIVE_FORMAT_TAR_PAX_INTERCHANGE, ARCHIVE_FORMAT_TAR_GNUTAR,
                           ARCHIVE_FORMAT_TAR_PAX_RESTRICTED}) {
    const std::string path = dir.File(absl::StrCat(format, ".tar"));
    WriteWithLibarchive(path, format, samples);
    const std::string archive = ReadFile(path);
    if (format == ARCHIVE_FORMAT_TAR_GNUTAR) {
      EXPECT_THAT(archive, HasSubstr("././@LongLink"));
    } else {
      EXPECT_THAT(archive, HasSubstr(absl::StrCat(" path=", kLongKey, "\n")));
    }
    auto reader = TarReader::OpenFile(path);
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_EQ(ReadAll(**reader), samples) << format;
    EXPECT_EQ(ReadAll(*TarReader::FromBuffer(archive)), samples) << format;
  }
}

// A pax path is UTF-8 unless the header says hdrcharset=BINARY; in the C
// locale libarchive cannot translate it, and the key keeps its bytes.
TEST(TarTest, Utf8PaxPathKeepsItsBytes) {
  ScratchDir dir;
  auto writer = TarWriter::Create(dir.File("a.tar"));
  ASSERT_TRUE((*writer)->Add(kUtf8Key, "7").ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  std::string archive = ReadFile(dir.File("a.tar"));
  const std::string binary = "21 hdrcharset=BINARY\n";
  ASSERT_EQ(archive.substr(512, binary.size()), binary);
  const std::string path_record = absl::StrCat("20 path=", kUtf8Key, "\n");
  ASSERT_EQ(archive.substr(512 + binary.size(), path_record.size()), path_record);
  archive.replace(512, 512, path_record + std::string(512 - path_record.size(), '\0'));
  std::snprintf(archive.data() + 124, 12, "%011o",
                static_cast<unsigned>(path_record.size()));
  Rechecksum(archive, 0);
  auto reader = TarReader::FromBuffer(archive);
  auto m = reader->Next();
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(m->has_value());
  EXPECT_EQ((*m)->name, kUtf8Key);
  EXPECT_EQ((*m)->data, "7");
}

TEST(TarTest, SystemTarReadsOursAndWeReadSystemTar) {
  if (RunCommand("tar --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no tar command";
  ScratchDir dir;
  const auto samples = Samples();
  WriteSamples(dir.File("ours.tar"));
  std::filesystem::create_directories(dir.File("out"));
  ASSERT_EQ(
      RunCommand(absl::StrCat("tar -xf ", dir.File("ours.tar"), " -C ", dir.File("out"))),
      0);
  for (const auto& [name, data] : samples)
    EXPECT_EQ(ReadFile(dir.File("out/" + name)), data) << name;
  // GNU (long names in 'L' members) and pax ('x' headers) archives of the tree
  // (ustar cannot hold the 150-byte key).
  for (const char* format : {"gnu", "pax"}) {
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

std::string TwoMemberArchive() {
  ScratchDir dir;
  auto writer = TarWriter::Create(dir.File("x.tar"));
  EXPECT_TRUE((*writer)->Add("a.jpg", std::string(700, 'a')).ok());
  EXPECT_TRUE((*writer)->Add("b.jpg", std::string(100, 'b')).ok());
  EXPECT_TRUE((*writer)->Finish().ok());
  return ReadFile(dir.File("x.tar"));  // headers at 0 and 1536
}

void ExpectDataLoss(const absl::StatusOr<std::optional<TarMember>>& m,
                    const std::vector<std::string>& parts) {
  ASSERT_TRUE(absl::IsDataLoss(m.status())) << m.status();
  for (const std::string& part : parts)
    EXPECT_THAT(m.status().message(), HasSubstr(part));
}

TEST(TarTest, BadChecksumsAreDataLossNamingTheOffset) {
  const std::string good = TwoMemberArchive();
  std::string bad = good;
  bad[10] ^= 1;  // inside the first name: the checksum no longer matches
  ExpectDataLoss(TarReader::FromBuffer(bad)->Next(),
                 {"in-memory archive", "offset 0", "checksum"});
  bad = good;
  bad[1536 + 10] ^= 1;  // the second header
  auto reader = TarReader::FromBuffer(bad);
  ASSERT_TRUE(reader->Next().ok());
  ExpectDataLoss(reader->Next(), {"offset 1536", "checksum"});
  ExpectDataLoss(reader->Next(), {"offset 1536", "checksum"});  // sticky
}

TEST(TarTest, TruncatedShardsAreDataLossNamingTheMember) {
  const std::string good = TwoMemberArchive();
  ExpectDataLoss(TarReader::FromBuffer(good.substr(0, 100))->Next(), {"offset 0"});
  for (const bool read_data : {true, false}) {
    auto reader = TarReader::FromBuffer(good.substr(0, 512 + 300));
    ExpectDataLoss(reader->Next(read_data), {"'a.jpg' at offset 0", "truncated"});
    EXPECT_TRUE(absl::IsDataLoss(reader->Next().status())) << "errors are sticky";
  }
  // A file cut inside its last member's data: skipping must not seek past the end.
  ScratchDir dir;
  WriteFile(dir.File("cut.tar"), good.substr(0, 1536 + 512 + 50));
  for (const bool read_data : {true, false}) {
    auto reader = TarReader::OpenFile(dir.File("cut.tar"));
    ASSERT_TRUE((*reader)->Next(read_data).ok());
    ExpectDataLoss((*reader)->Next(read_data),
                   {dir.File("cut.tar"), "'b.jpg' at offset 1536", "truncated"});
  }
  // An archive cut right after its last member (no end blocks) is accepted.
  auto cut = TarReader::FromBuffer(good.substr(0, 1536 + 1024));
  EXPECT_EQ(ReadAll(*cut).size(), 2u);
  EXPECT_TRUE(TarReader::FromBuffer("")->Next()->has_value() == false);
}

TEST(TarTest, MalformedHeadersAndLimitsAreDataLoss) {
  const std::string good = TwoMemberArchive();
  TarReaderOptions small;
  small.max_member_bytes = 100;
  auto limited = TarReader::FromBuffer(good, small);
  ExpectDataLoss(limited->Next(), {"'a.jpg' at offset 0", "size limit"});
  // A size field that is not octal.
  std::string bad = good;
  std::memcpy(bad.data() + 124, "99999999999", 11);
  Rechecksum(bad, 0);
  EXPECT_TRUE(absl::IsDataLoss(TarReader::FromBuffer(bad)->Next().status()));
  // A pax header whose record length runs past its data.
  ScratchDir dir;
  WriteWithLibarchive(dir.File("pax.tar"), ARCHIVE_FORMAT_TAR_PAX_RESTRICTED,
                      {{kLongKey, "aaaa"}});
  std::string pax = ReadFile(dir.File("pax.tar"));
  ASSERT_EQ(pax[156], 'x');
  const size_t record = pax.find(" path=", 512);
  ASSERT_NE(record, std::string::npos);
  pax[record - 1] = '9';  // "160 path=k...\n" now claims more bytes than there are
  ExpectDataLoss(TarReader::FromBuffer(pax)->Next(), {"offset 0"});
  // An archive that ends after an extended header.
  ExpectDataLoss(
      TarReader::FromBuffer(ReadFile(dir.File("pax.tar")).substr(0, 1024))->Next(),
      {"offset 0"});
  // Not a tar archive at all: gzip's magic.
  ExpectDataLoss(
      TarReader::FromBuffer(std::string("\x1f\x8b\x08\x00", 4) + std::string(1020, '\0'))
          ->Next(),
      {"not an uncompressed tar archive"});
  EXPECT_TRUE(absl::IsNotFound(TarReader::OpenFile("/nonexistent/x.tar").status()));
}

}  // namespace
}  // namespace tessera::trainer::data
