#include "common/process/unix_account.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera {

namespace {

// A database entry holding more than this is refused rather than followed.
constexpr size_t kMaxEntryBytes = 1u << 20;

// Calls `lookup(buffer, size)` (a getpwnam_r / getgrnam_r call) with a buffer
// of the size the system suggests (`which`), doubled while the entry does not
// fit. Returns the call's result: 0 or an errno value.
template <typename LookUp>
int WithGrowingBuffer(int which, LookUp lookup) {
  const long suggested = sysconf(which);
  std::vector<char> buf(suggested > 0 ? static_cast<size_t>(suggested) : 16384);
  int rc = 0;
  while ((rc = lookup(buf.data(), buf.size())) == ERANGE && buf.size() < kMaxEntryBytes) {
    buf.resize(buf.size() * 2);
  }
  return rc;
}

}  // namespace

bool UnixAccount::InGroup(gid_t group) const {
  return group == gid || std::find(groups.begin(), groups.end(), group) != groups.end();
}

absl::StatusOr<UnixAccount> LookUpUnixAccount(const std::string& name) {
  // The entry's strings point into the buffer: what is kept is copied out
  // inside the call.
  UnixAccount account;
  passwd* found = nullptr;
  const int rc = WithGrowingBuffer(_SC_GETPW_R_SIZE_MAX, [&](char* buf, size_t size) {
    passwd pw{};
    const int r = getpwnam_r(name.c_str(), &pw, buf, size, &found);
    if (r == 0 && found != nullptr) {
      account.uid = pw.pw_uid;
      account.gid = pw.pw_gid;
      account.home = pw.pw_dir != nullptr ? pw.pw_dir : "/";
    }
    return r;
  });
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot look up user ", name, ": ", std::strerror(rc)));
  }
  if (found == nullptr) return absl::NotFoundError(absl::StrCat("no user ", name));
  account.name = name;
  int n = 64;
  for (int tries = 0; tries < 8; ++tries) {
    account.groups.resize(static_cast<size_t>(n));
    int got = n;
    if (getgrouplist(name.c_str(), account.gid, account.groups.data(), &got) >= 0) {
      account.groups.resize(static_cast<size_t>(got));
      return account;
    }
    n = std::max(got, n * 2);  // `got` holds the count needed
  }
  return absl::UnavailableError(absl::StrCat("cannot list the groups of user ", name));
}

absl::StatusOr<gid_t> LookUpGroupId(const std::string& name) {
  group gr{};
  group* found = nullptr;
  const int rc = WithGrowingBuffer(_SC_GETGR_R_SIZE_MAX, [&](char* buf, size_t size) {
    return getgrnam_r(name.c_str(), &gr, buf, size, &found);
  });
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot look up group ", name, ": ", std::strerror(rc)));
  }
  if (found == nullptr) return absl::NotFoundError(absl::StrCat("no group ", name));
  return gr.gr_gid;
}

}  // namespace tessera
