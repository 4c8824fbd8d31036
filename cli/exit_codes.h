// tessctl's process exit codes, documented in every --help footer and in
// docs/tessctl.md. Scripts rely on them; never renumber.
#ifndef TESSERA_CLI_EXIT_CODES_H_
#define TESSERA_CLI_EXIT_CODES_H_

namespace tessera::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;       // job/sweep failed or cancelled; other errors
inline constexpr int kExitUsage = 2;        // bad command line or invalid spec
inline constexpr int kExitNotFound = 3;     // no such job or sweep
inline constexpr int kExitUnreachable = 4;  // coordinator did not answer
inline constexpr int kExitTimeout = 124;    // `wait --timeout` ran out

}  // namespace tessera::cli

#endif  // TESSERA_CLI_EXIT_CODES_H_
