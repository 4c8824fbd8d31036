// UnixAccount: a unix account a process can run as, looked up once before
// fork.
//
// Everything the child of a fork needs to switch to the account (uid, primary
// gid, every supplementary group, home) is read here, in the parent: after
// fork only async-signal-safe calls are allowed, and the passwd and group
// databases (NSS) are not. The lookups are the reentrant ones (getpwnam_r,
// getgrnam_r, getgrouplist).
//
// Thread-safety: the functions may be called from any thread at once.
#ifndef TESSERA_COMMON_PROCESS_UNIX_ACCOUNT_H_
#define TESSERA_COMMON_PROCESS_UNIX_ACCOUNT_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

struct UnixAccount {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;              // primary group
  std::vector<gid_t> groups;  // every group of the account, the primary one included
  std::string home;

  // Whether `group` is the primary group or one of the supplementary ones.
  bool InGroup(gid_t group) const;
};

// Looks `name` up in the passwd and group databases. NotFound when there is
// no such account; Unavailable when the databases cannot be read.
absl::StatusOr<UnixAccount> LookUpUnixAccount(const std::string& name);

// The id of group `name`. NotFound when there is no such group.
absl::StatusOr<gid_t> LookUpGroupId(const std::string& name);

}  // namespace tessera

#endif  // TESSERA_COMMON_PROCESS_UNIX_ACCOUNT_H_
