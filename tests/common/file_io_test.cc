#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

void Put(const std::string& path, const std::string& text) {
  ASSERT_TRUE(WriteFileAtomically(path, text).ok()) << path;
}

// Sets the umask for one test and restores it.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old_); }

 private:
  mode_t old_;
};

// A WriteEnv that records the calls in order and fails the one it is told to.
class RecordingEnv : public WriteEnv {
 public:
  struct Call {
    std::string what;  // "open", "fsync", "rename"
    int fd = -1;
    mode_t mode = 0;
    std::string name;
  };
  std::string fail;  // the call to fail with EIO, e.g. "fsync" (the first one)
  std::vector<Call> calls;

  int OpenAt(int dir_fd, const char* name, int flags, mode_t mode) override {
    calls.push_back({"open", dir_fd, mode, name});
    if (Fails("open")) return -1;
    return WriteEnv::OpenAt(dir_fd, name, flags, mode);
  }
  int Fsync(int fd) override {
    calls.push_back({"fsync", fd, 0, ""});
    if (Fails("fsync")) return -1;
    return WriteEnv::Fsync(fd);
  }
  int RenameAt(int dir_fd, const char* from, const char* to) override {
    calls.push_back({"rename", dir_fd, 0, to});
    if (Fails("rename")) return -1;
    return WriteEnv::RenameAt(dir_fd, from, to);
  }

 private:
  bool Fails(const std::string& what) {
    if (fail != what) return false;
    fail.clear();
    errno = EIO;
    return true;
  }
};

TEST(WriteFileAtomicallyTest, ReplacesTheFileAndLeavesNoTemporaries) {
  testing::TempDir dir;
  const std::string path = dir.File("file");
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, std::string("sec\0ond", 7)).ok());
  EXPECT_EQ(testing::ReadFile(path), std::string("sec\0ond", 7));
  EXPECT_EQ(Entries(dir.path()), std::vector<std::string>{"file"});
}

TEST(WriteFileAtomicallyTest, AMissingDirectoryIsNotFoundNamingThePath) {
  testing::TempDir dir;
  const std::string path = dir.File("no/such/dir/file");
  const absl::Status status = WriteFileAtomically(path, "x");
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr(path));
}

TEST(WriteFileAtomicallyTest, AFailedSyncOfTheDataLeavesTheOldFileIntact) {
  testing::TempDir dir;
  const std::string path = dir.File("file");
  Put(path, "old");
  RecordingEnv env;
  env.fail = "fsync";  // the temporary's, after its data is written
  const absl::Status status = WriteFileAtomically(path, "new", {.env = &env});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("syncing"));
  EXPECT_EQ(testing::ReadFile(path), "old");
  EXPECT_EQ(Entries(dir.path()), std::vector<std::string>{"file"})
      << "the temporary is removed";
}

TEST(WriteFileAtomicallyTest, AFailedRenameLeavesTheOldFileIntact) {
  testing::TempDir dir;
  const std::string path = dir.File("file");
  Put(path, "old");
  RecordingEnv env;
  env.fail = "rename";
  EXPECT_FALSE(WriteFileAtomically(path, "new", {.env = &env}).ok());
  EXPECT_EQ(testing::ReadFile(path), "old");
  EXPECT_EQ(Entries(dir.path()), std::vector<std::string>{"file"});
}

TEST(WriteFileAtomicallyTest, SyncsTheDataBeforeTheRenameAndTheDirectoryAfterIt) {
  testing::TempDir dir;
  const std::string path = dir.File("file");
  RecordingEnv env;
  ASSERT_TRUE(WriteFileAtomically(path, "new", {.env = &env}).ok());
  ASSERT_EQ(env.calls.size(), 4u);
  EXPECT_EQ(env.calls[0].what, "open");
  EXPECT_EQ(env.calls[1].what, "fsync");
  EXPECT_NE(env.calls[1].fd, env.calls[0].fd) << "the temporary's own descriptor";
  EXPECT_EQ(env.calls[2].what, "rename");
  EXPECT_EQ(env.calls[2].name, "file");
  // The last call syncs the directory the rename happened in: the descriptor
  // the temporary was created and renamed in (which directory that is, the
  // next test shows).
  EXPECT_EQ(env.calls[3].what, "fsync");
  EXPECT_EQ(env.calls[3].fd, env.calls[0].fd);
  EXPECT_EQ(env.calls[3].fd, env.calls[2].fd);
}

TEST(WriteFileAtomicallyTest, TheDirectorySyncIsOfTheTargetsDirectory) {
  testing::TempDir dir;
  const std::string path = dir.File("file");
  struct stat want {};
  ASSERT_EQ(::stat(dir.path().c_str(), &want), 0);
  // Watches the descriptor while it is still open.
  class DirectoryWatch : public WriteEnv {
   public:
    std::vector<ino_t> synced;
    int Fsync(int fd) override {
      struct stat st {};
      if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) synced.push_back(st.st_ino);
      return WriteEnv::Fsync(fd);
    }
  } env;
  ASSERT_TRUE(WriteFileAtomically(path, "x", {.env = &env}).ok());
  EXPECT_EQ(env.synced, std::vector<ino_t>{want.st_ino});
}

TEST(WriteFileAtomicallyTest, TheModeOfAnExistingFileIsKept) {
  ScopedUmask umask(022);
  testing::TempDir dir;
  const std::string path = dir.File("file");
  Put(path, "old");
  EXPECT_EQ(ModeOf(path), 0644) << "a new file: 0666 less the umask";
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  Put(path, "new");
  EXPECT_EQ(ModeOf(path), 0640);
  ASSERT_EQ(::chmod(path.c_str(), 0604), 0);
  Put(path, "newer");
  EXPECT_EQ(ModeOf(path), 0604);
  EXPECT_EQ(testing::ReadFile(path), "newer");
}

TEST(WriteFileAtomicallyTest, TheOwnerOfAnExistingFileIsKeptWherePermitted) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another owner needs root";
  testing::TempDir dir;
  const std::string path = dir.File("file");
  Put(path, "old");
  ASSERT_EQ(::chown(path.c_str(), 4242, 4343), 0);
  Put(path, "new");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 4242u);
  EXPECT_EQ(st.st_gid, 4343u);
}

TEST(WriteFileAtomicallyTest, ASecretIsCreated0600WhateverTheUmaskOrTheOldMode) {
  ScopedUmask umask(0);
  testing::TempDir dir;
  const std::string path = dir.File("secret");
  Put(path, "old");
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  RecordingEnv env;
  ASSERT_TRUE(WriteFileAtomically(path, "s3cret", {.mode = 0600, .env = &env}).ok());
  EXPECT_EQ(ModeOf(path), 0600);
  ASSERT_FALSE(env.calls.empty());
  EXPECT_EQ(env.calls[0].what, "open");
  EXPECT_EQ(env.calls[0].mode, 0600u) << "the temporary is never open to others";
  EXPECT_EQ(testing::ReadFile(path), "s3cret");
}

TEST(WriteFileAtomicallyTest, ASecretRefusesALinkAtTheTemporaryPath) {
  testing::TempDir dir;
  const std::string outside = dir.File("outside");
  Put(outside, "precious");
  ASSERT_EQ(::mkdir(dir.File("state").c_str(), 0700), 0);
  const std::string path = dir.File("state/secret");
  Put(path, "old");
  // Plants a link to `outside` where the temporary is about to be created.
  class Planter : public WriteEnv {
   public:
    std::string target;
    int OpenAt(int dir_fd, const char* name, int flags, mode_t mode) override {
      if (::symlinkat(target.c_str(), dir_fd, name) != 0) return -1;
      return WriteEnv::OpenAt(dir_fd, name, flags, mode);
    }
  } env;
  env.target = outside;
  const absl::Status status =
      WriteFileAtomically(path, "s3cret", {.mode = 0600, .env = &env});
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_EQ(testing::ReadFile(outside), "precious") << "the link is not followed";
  EXPECT_EQ(testing::ReadFile(path), "old");
  // The link is left as it was: not the write's to remove.
  const std::vector<std::string> entries = Entries(dir.File("state"));
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_TRUE(fs::is_symlink(dir.File("state/" + entries[0]))) << entries[0];
  EXPECT_EQ(entries[1], "secret");
}

TEST(WriteFileAtomicallyTest, ReportsProgressAndWritesPartsInOrder) {
  testing::TempDir dir;
  const std::string path = dir.File("file");
  const std::string big(size_t{9} << 20, 'x');  // more than one 8 MiB piece
  const std::vector<std::string_view> parts = {"head:", big, ":tail"};
  std::vector<int64_t> seen;
  ASSERT_TRUE(WriteFileAtomicallyFromParts(
                  path, parts, {.progress = [&](int64_t n) { seen.push_back(n); }})
                  .ok());
  const std::string written = testing::ReadFile(path);
  EXPECT_EQ(written, "head:" + big + ":tail");
  ASSERT_GE(seen.size(), 4u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(seen.back(), static_cast<int64_t>(written.size()));
}

TEST(WriteFileAtomicallyTest, WritesInADirectoryOpenedByTheCaller) {
  testing::TempDir dir;
  const int dir_fd = ::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir_fd, 0);
  const std::vector<std::string_view> parts = {"a", "b"};
  EXPECT_TRUE(WriteFileAtomicallyAt(dir_fd, dir.path(), "f", parts).ok());
  const absl::Status bad = WriteFileAtomicallyAt(dir_fd, dir.path(), "../f", parts);
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  ::close(dir_fd);
  EXPECT_EQ(testing::ReadFile(dir.File("f")), "ab");
}

TEST(ReadFileTest, ReadsTheWholeFile) {
  testing::TempDir dir;
  const std::string path = dir.File("file");
  const std::string data = std::string("bin\0ary", 7) + std::string(100000, 'z');
  Put(path, data);
  absl::StatusOr<std::string> read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, data);
  Put(path, "");
  EXPECT_EQ(*ReadFile(path), "");
}

TEST(ReadFileTest, AMissingFileIsNotFoundNamingThePath) {
  testing::TempDir dir;
  const std::string path = dir.File("missing");
  absl::StatusOr<std::string> read = ReadFile(path);
  EXPECT_TRUE(absl::IsNotFound(read.status())) << read.status();
  EXPECT_THAT(read.status().message(), HasSubstr(path));
  EXPECT_THAT(read.status().message(), HasSubstr("No such file"));
  read = ReadFile(path, {.what = "spec file"});
  EXPECT_THAT(std::string(read.status().message()),
              StartsWith("cannot read spec file '" + path + "'"));
}

TEST(ReadFileTest, AFileOverTheBoundIsRefusedNamingThePath) {
  testing::TempDir dir;
  const std::string path = dir.File("big");
  Put(path, std::string(101, 'x'));
  EXPECT_EQ(*ReadFile(path, 101), std::string(101, 'x'));
  absl::StatusOr<std::string> read = ReadFile(path, 100);
  EXPECT_TRUE(absl::IsInvalidArgument(read.status())) << read.status();
  EXPECT_THAT(read.status().message(), HasSubstr(path));
  EXPECT_THAT(read.status().message(), HasSubstr("101 bytes, over the limit of 100"));
}

TEST(ReadFileTest, AStreamOverTheBoundIsRefusedWithoutReadingItAll) {
  // A pipe has no size beforehand, as /proc files have none: the bound is
  // found while reading.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string data(1000, 'p');
  ASSERT_EQ(::write(fds[1], data.data(), data.size()), 1000);
  ::close(fds[1]);
  absl::StatusOr<std::string> read = ReadOpenFile(fds[0], "the pipe", {.max_bytes = 999});
  ::close(fds[0]);
  EXPECT_TRUE(absl::IsInvalidArgument(read.status())) << read.status();
  EXPECT_THAT(read.status().message(), HasSubstr("'the pipe'"));
  EXPECT_THAT(read.status().message(), HasSubstr("over the limit of 999 bytes"));

  absl::StatusOr<std::string> status = ReadFile("/proc/self/status");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_THAT(*status, HasSubstr("VmHWM:"));
}

TEST(ReadFileTest, ADirectoryIsRefused) {
  testing::TempDir dir;
  absl::StatusOr<std::string> read = ReadFile(dir.path());
  EXPECT_TRUE(absl::IsFailedPrecondition(read.status())) << read.status();
  EXPECT_THAT(read.status().message(), HasSubstr(dir.path()));
}

TEST(RandomAccessFileTest, ReadsRangesAndCallsAShortOneTruncated) {
  testing::TempDir dir;
  const std::string path = dir.File("file");
  Put(path, "0123456789");
  absl::StatusOr<RandomAccessFile> file = RandomAccessFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::string got(4, '\0');
  ASSERT_TRUE(file->ReadExactly(3, 4, got.data()).ok());
  EXPECT_EQ(got, "3456");
  const absl::Status past = file->ReadExactly(8, 4, got.data());
  EXPECT_TRUE(absl::IsDataLoss(past)) << past;
  EXPECT_THAT(past.message(), HasSubstr("truncated"));
  EXPECT_THAT(past.message(), HasSubstr(path));

  EXPECT_EQ(*ReadFileRange(path, 8, 4), "89") << "short only at the end";
  EXPECT_EQ(*ReadFileRange(path, 0, 3), "012");
  absl::StatusOr<RandomAccessFile> missing = RandomAccessFile::Open(dir.File("none"));
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_THAT(missing.status().message(), HasSubstr(dir.File("none")));
}

}  // namespace
}  // namespace tessera
