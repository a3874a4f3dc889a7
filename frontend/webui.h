// The chat page at / (frontend/webui/: index.html, app.js, style.css), built into the
// binary by cmake/embed_files.cmake: no files to install, nothing fetched from elsewhere.
// The page holds no data and calls this server's own API, so it is served without a key;
// --no-webui turns it off.
#pragma once

#include <span>
#include <string_view>

namespace hearth {

struct EmbeddedFile {
  std::string_view path;  // under frontend/webui/
  std::string_view bytes;
};

// Every file of the page.
std::span<const EmbeddedFile> webui_files();

struct WebAsset {
  std::string_view bytes;
  std::string_view content_type;
};

// The file a GET of `path` is answered with: / is index.html, /webui/NAME a file of the
// page; nullptr for anything else.
const WebAsset* webui_find(std::string_view path);

}  // namespace hearth
