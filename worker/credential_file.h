// The worker's own credential (coordinator/core/worker_identity.h), issued at
// its first registration and kept in its state dir as
// `state_dir`/worker-NAME.credential, mode 0600, so that a restarted worker
// (systemd's Restart=on-failure) takes its name back at once.
//
// The state dir must belong to the worker's user and not be writable by group
// or others (OpenPrivateDir in work_dir.h); it is created (0711) when missing.
// The file is read and written through the directory's descriptor without
// following symlinks, and replaced atomically and durably as a secret
// (WriteFileAtomicallyAt in common/file_io.h, mode 0600).
//
// Thread-safety: free functions without shared state.
#ifndef TESSERA_WORKER_CREDENTIAL_FILE_H_
#define TESSERA_WORKER_CREDENTIAL_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera {

// The file name of worker `name`'s credential in its state dir.
std::string WorkerCredentialFileName(const std::string& name);

// The credential kept for worker `name`; empty when none is kept.
// FailedPrecondition for a bad state dir, and for a file that is not a
// regular file of the worker's user or that group or others may read.
absl::StatusOr<std::string> LoadWorkerCredential(const std::string& state_dir,
                                                 const std::string& name);

// Keeps `credential` for worker `name`, replacing the one kept before.
absl::Status SaveWorkerCredential(const std::string& state_dir, const std::string& name,
                                  const std::string& credential);

}  // namespace tessera

#endif  // TESSERA_WORKER_CREDENTIAL_FILE_H_
