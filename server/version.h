#pragma once
namespace sinew::server {
inline constexpr const char* kVersion = "0.1.0";
}
