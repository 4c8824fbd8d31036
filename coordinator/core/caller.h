// Caller: who is calling the coordinator's user API, as the core sees it. The
// API adapters build one from the request's user token (Authenticator::
// AuthenticateUser) and pass it to every JobManager and SweepManager call that
// reads or changes a job or sweep; the core decides there, once, what the
// caller may see.
//
// A user sees and acts on what they submitted; an admin sees and acts on
// everything. What a caller may not see does not exist for them: the core
// answers NotFound, as for an id that was never used, so ids of others' jobs
// do not leak.
//
// Thread-safety: a plain value.
#ifndef TESSERA_COORDINATOR_CORE_CALLER_H_
#define TESSERA_COORDINATOR_CORE_CALLER_H_

#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace tessera {

struct Caller {
  // The user token's name; jobs it submits run as this account.
  std::string name;
  // Given by `token create --admin` or by membership of the admin group.
  bool admin = false;

  // Whether this caller may see and act on what `owner` submitted.
  bool MaySee(absl::string_view owner) const { return admin || owner == name; }

  // Everyone is an admin when authentication is off (--insecure-no-auth), and
  // in tests and tools that act for the operator.
  static Caller Admin(std::string name = "") { return Caller{std::move(name), true}; }
  static Caller User(std::string name) { return Caller{std::move(name), false}; }
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_CALLER_H_
