// The chat page's files, embedded in the binary at build time from src/server/page (cmake/EmbedFiles.cmake).
#pragma once

#include <cstddef>
#include <span>

namespace df::server {

struct PageAsset {
  const char* path;  // "/index.html"
  const char* mime;  // the Content-Type to send
  const unsigned char* data;
  size_t size;
};

std::span<const PageAsset> page_assets();

}  // namespace df::server
