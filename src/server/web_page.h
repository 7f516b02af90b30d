#pragma once
// The page served at GET /: a streaming chat box and a live map of the KV cache blocks.
#include <string_view>

namespace kvserve::server {

std::string_view web_page_html();

}  // namespace kvserve::server
