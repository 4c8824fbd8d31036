#!/usr/bin/env bash
# The layering rules of docs/design.md, checked on the sources and on the built
# core and store test binaries:
#   - nothing under worker/, cli/ or common/ includes coordinator/ headers;
#   - coordinator/core and coordinator/store include no gRPC, httplib or JSON
#     header, and only coordinator/store includes sqlite3.h;
#   - the core and store unit tests are linked without gRPC or httplib.
# Usage: layering_test.sh SOURCE_DIR TEST_BINARY...
set -u
src=$1
shift
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
cd "$src" || exit 2

hits=$(grep -rn '#include "coordinator/' worker cli common 2>/dev/null)
[ -z "$hits" ] || fail "worker/, cli/ or common/ include coordinator/ headers:"$'\n'"$hits"

hits=$(grep -rnE '#include [<"](grpcpp|grpc\+\+|grpc/|httplib|microhttpd|nlohmann/)' coordinator/core coordinator/store)
[ -z "$hits" ] || fail "core or store include a gRPC, HTTP or JSON header:"$'\n'"$hits"

hits=$(grep -rln 'sqlite3\.h' --include='*.h' --include='*.cc' common coordinator worker cli |
  grep -v '^coordinator/store/')
[ -z "$hits" ] || fail "sqlite3.h included outside coordinator/store:"$'\n'"$hits"

checked=0
for bin in "$@"; do
  if [ ! -x "$bin" ]; then
    fail "$bin is not built"
    continue
  fi
  linked=$(ldd "$bin" | grep -E 'libgrpc|libgpr|httplib|libcpp-httplib|libmicrohttpd' || true)
  [ -z "$linked" ] || fail "$(basename "$bin") links gRPC or an HTTP library:"$'\n'"$linked"
  checked=$((checked + 1))
done

echo "layering: sources checked, $checked test binaries checked, $failures failures"
[ "$failures" -eq 0 ]
