// The coordinator's self-signed TLS identity (--tls-self-signed), kept in the
// store's secrets table so that it, and so every certificate pin handed out in
// join tokens, survives restarts. The database therefore holds a private key:
// it must be readable by the coordinator's user only.
//
// Thread-safety: as the Store's.
#ifndef TESSERA_COORDINATOR_CORE_TLS_IDENTITY_H_
#define TESSERA_COORDINATOR_CORE_TLS_IDENTITY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tls.h"
#include "coordinator/store/store.h"

namespace tessera {

// The identity stored in `store`; on first use generates one whose certificate
// names `hosts` (see GenerateSelfSignedIdentity) and stores it. Concurrent
// callers on one database agree on one identity.
absl::StatusOr<TlsIdentity> LoadOrCreateSelfSignedIdentity(
    Store& store, const std::vector<std::string>& hosts);

// The host part of "HOST:PORT" or "[V6]:PORT"; empty when there is none.
std::string HostOfAddress(const std::string& address);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_TLS_IDENTITY_H_
