#include "frontend/webui.h"

#include <string>
#include <vector>

namespace hearth {
namespace {

std::string_view content_type_of(std::string_view path) {
  if (path.ends_with(".html")) return "text/html; charset=utf-8";
  if (path.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (path.ends_with(".css")) return "text/css; charset=utf-8";
  if (path.ends_with(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

struct Route {
  std::string path;
  WebAsset asset;
};

const std::vector<Route>& routes() {
  static const std::vector<Route> table = [] {
    std::vector<Route> out;
    for (const EmbeddedFile& f : webui_files()) {
      const WebAsset asset{f.bytes, content_type_of(f.path)};
      if (f.path == "index.html") out.push_back({"/", asset});
      out.push_back({"/webui/" + std::string(f.path), asset});
    }
    return out;
  }();
  return table;
}

}  // namespace

const WebAsset* webui_find(std::string_view path) {
  for (const Route& r : routes()) {
    if (r.path == path) return &r.asset;
  }
  return nullptr;
}

}  // namespace hearth
