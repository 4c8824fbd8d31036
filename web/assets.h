// The dashboard's static files (index.html, app.js, app.css, ...), bundled by
// esbuild at build time and compiled into the binary by embed_assets.cmake, so
// the coordinator serves them without reading any file at run time.
//
// Usage: for a GET outside /api/, look the path up and serve the body with its
// content type; the dashboard routes with URL fragments (#/jobs/12), so only
// "/" and the exact asset paths are ever requested.
//
// Thread-safety: FindAsset may be called from any thread; the returned asset
// and the memory its views point to live for the whole program.
#ifndef TESSERA_WEB_ASSETS_H_
#define TESSERA_WEB_ASSETS_H_

#include <span>
#include <string_view>

namespace tessera::web {

struct Asset {
  std::string_view path;          // "/index.html", "/app.js", ...
  std::string_view content_type;  // e.g. "text/javascript; charset=utf-8"
  std::string_view body;          // the file's bytes
};

// Exact path such as "/index.html", "/app.js"; "/" gives index.html. nullptr if none.
const Asset* FindAsset(std::string_view path);

// Every embedded file, sorted by path.
std::span<const Asset> AllAssets();

}  // namespace tessera::web

#endif  // TESSERA_WEB_ASSETS_H_
