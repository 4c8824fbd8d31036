#!/usr/bin/env bash
# The layering rules of docs/design.md, checked on the sources and on the built
# core and store test binaries:
#   - nothing under worker/, cli/ or common/ includes coordinator/ headers;
#   - coordinator/core and coordinator/store include no gRPC, httplib or JSON
#     header, and only coordinator/store includes sqlite3.h;
#   - the core and store unit tests are linked without gRPC or httplib;
#   - no function or lambda in the project's own C++ sources outside tests/
#     (generated *.pb.* files and build trees excluded) is longer than 80 lines,
#     as universal-ctags measures it (docs/design.md, "Function length"). Needs
#     universal-ctags (scripts/setup.sh installs it); fails without it.
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

# common/'s mechanisms that every binary links, the trainer-only build
# included (docs/design.md, "One mechanism, one home"): file I/O, retries,
# the JSON writer (with nlohmann's header-only printer), the seeded
# generator, byte sizes, flag checks and clock need absl and the C++ library
# only; no gRPC, protobuf, SQLite, LibTorch or YAML header.
for f in file_io retry json_writer seeded_random byte_size flag_checks clock status_macros; do
  for ext in h cc; do
    [ -f "common/$f.$ext" ] || continue
    hits=$(grep -nE '#include [<"](grpcpp|grpc/|google/protobuf|tessera/v1/|sqlite3|torch/|ATen/|c10/|yaml-cpp)' "common/$f.$ext")
    [ -z "$hits" ] || fail "common/$f.$ext includes more than absl and the C++ library:"$'\n'"$hits"
  done
done
for f in file_io retry json_writer seeded_random flag_checks; do
  [ -f "common/$f.h" ] || fail "common/$f.h is missing: one home for its mechanism"
done

# The trainer's folders (worker/trainer/README.md): run -> dist -> {data,
# model} -> gpu, with main.cc and export_main.cc above them all. A folder
# includes only itself and the folders below it; data and model not each
# other.
trainer_allowed() {  # FOLDER -> the folders it may include
  case "$1" in
    gpu) echo "gpu" ;;
    data) echo "data gpu" ;;
    model) echo "model gpu" ;;
    dist) echo "dist data model gpu" ;;
    run) echo "run dist data model gpu" ;;
  esac
}
for folder in gpu data model dist run; do
  [ -d "worker/trainer/$folder" ] || { fail "worker/trainer/$folder is missing"; continue; }
  allowed=$(trainer_allowed "$folder")
  while IFS= read -r hit; do
    [ -n "$hit" ] || continue
    target=$(sed -E 's|.*#include "worker/trainer/([a-z_]+)/.*|\1|' <<<"$hit")
    case " $allowed " in
      *" $target "*) ;;
      *) fail "worker/trainer/$folder includes $target/, above it or beside it: $hit" ;;
    esac
  done < <(grep -rnE '#include "worker/trainer/[a-z_]+/' "worker/trainer/$folder")
  hits=$(grep -rnE '#include "worker/trainer/[a-z_]+\.h"' "worker/trainer/$folder")
  [ -z "$hits" ] || fail "worker/trainer/$folder includes the top-level files:"$'\n'"$hits"
done
loose=$(find worker/trainer -maxdepth 1 -type f \( -name '*.cc' -o -name '*.h' \) \
  ! -name main.cc ! -name export_main.cc)
[ -z "$loose" ] || fail "trainer sources outside the folders by concern:"$'\n'"$loose"

# The device seam (worker/trainer/gpu/device.h): CUDA and NCCL headers and the
# CUDA build guards appear only under worker/trainer/gpu/.
hits=$(grep -rnE '#include [<"](cuda[a-z_]*\.h|cuda/|nccl\.h|c10/cuda/|ATen/cuda/|torch/cuda\.h|torch/csrc/cuda/)|TESSERA_TORCH_CUDA|TESSERA_HAVE_CUDA_RUNTIME' \
  --include='*.cc' --include='*.h' common coordinator worker cli 2>/dev/null |
  grep -v '^worker/trainer/gpu/')
[ -z "$hits" ] || fail "CUDA headers or guards outside worker/trainer/gpu/:"$'\n'"$hits"

# Function length. The sources are the component folders of the layout
# (docs/design.md); tests/, the build trees (build*/) and downloaded packages
# (gpu-deps/, web/node_modules/) lie outside them or are pruned.
max_function_lines=80
if ! ctags --version 2>/dev/null | grep -q 'Universal Ctags'; then
  fail "universal-ctags is not installed (scripts/setup.sh installs it): function lengths are not checked"
else
  dirs=()
  for d in proto common web coordinator worker cli bench examples scripts deploy; do
    [ -d "$d" ] && dirs+=("$d")
  done
  # One line per function or lambda longer than the limit: LINES file name,
  # the name with its class and enclosing function (lambda@LINE for a lambda),
  # longest first.
  hits=$(find "${dirs[@]}" -name node_modules -prune -o -type f \
      \( -name '*.cc' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' \
         -o -name '*.cuh' \) ! -name '*.pb.*' -print | sort |
    ctags -L - --language-force=C++ --kinds-C++=f --fields=+ne -o - |
    awk -F'\t' -v max="$max_function_lines" '
      {
        start = ""; end = ""; scope = ""
        for (i = 4; i <= NF; i++) {
          if ($i ~ /^line:/) start = substr($i, 6)
          else if ($i ~ /^end:/) end = substr($i, 5)
          else if ($i ~ /^(class|struct|union|namespace|function|enum):/) scope = substr($i, index($i, ":") + 1)
        }
        if (end == "" || end - start + 1 <= max) next
        name = ($1 ~ /^__anon/) ? "lambda@" start : $1
        gsub(/(^|::)__anon[0-9a-f]+/, "", scope)
        sub(/^::/, "", scope)
        sub(/^tessera(::|$)/, "", scope)
        print end - start + 1, $2, (scope == "" ? "" : scope "::") name
      }' | sort -k1,1nr -k2,2)
  [ -z "$hits" ] ||
    fail "functions longer than $max_function_lines lines (LINES file function):"$'\n'"$hits"
fi

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
