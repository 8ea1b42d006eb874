// SHA-256 (FIPS 180-4) of a byte string: how a corpus enters a pair's key,
// so that a record names the very text it was trained on and `sha256sum`
// can check it.
#pragma once

#include <string>
#include <string_view>

namespace data {

// The digest of `bytes` as 64 lowercase hex digits, as sha256sum prints it.
std::string sha256_hex(std::string_view bytes);

}  // namespace data
