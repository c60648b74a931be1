#pragma once
/// \file support/parse.hpp
/// Checked parsing of the numbers the tools and examples read from a command line: counts, sizes
/// with binary unit suffixes and seconds. Nothing here wraps around, saturates or accepts a sign:
/// "-1", "1X", "", "0x10", "1e3" and values that do not fit are std::invalid_argument whose
/// message quotes the text. No dependency beyond the standard library.

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

namespace nvmeio::support {

/// Reads a decimal unsigned integer: digits only, at most `max`.
[[nodiscard]] inline std::uint64_t parse_unsigned(const std::string& text,
                                                  std::uint64_t max = UINT64_MAX) {
    if (text.empty()) throw std::invalid_argument("expected a number, got nothing");
    std::uint64_t value = 0;
    for (const char c : text) {
        if (c < '0' || c > '9') {
            throw std::invalid_argument("'" + text + "' is not a whole number (digits only)");
        }
        const auto digit = static_cast<std::uint64_t>(c - '0');
        // digit > max first: for a maximum below 9, max - digit would wrap around.
        if (digit > max || value > (max - digit) / 10) {
            throw std::invalid_argument("'" + text + "' is too large (at most " +
                                        std::to_string(max) + ")");
        }
        value = value * 10 + digit;
    }
    return value;
}

/// Reads a size in bytes: a whole number with an optional binary suffix K, M, G, T or P (either
/// case; "Ki", "KiB" and "KB" mean the same, and a bare "B" means bytes). "4096", "128K", "8M",
/// "1GiB". Throws std::invalid_argument for anything else and for sizes beyond 2^64 - 1.
[[nodiscard]] inline std::uint64_t parse_size(const std::string& text) {
    std::size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9')
        ++digits;
    const std::string suffix = text.substr(digits);
    const char* const hint =
        " (a size is a whole number of bytes with an optional K, M, G, T "
        "or P suffix, e.g. 4096, 128K, 8M, 1G)";
    if (digits == 0) throw std::invalid_argument("'" + text + "' is not a size" + hint);
    unsigned shift = 0;
    if (!suffix.empty()) {
        const std::string units = "KMGTP";
        const std::size_t unit = units.find(static_cast<char>(suffix[0] & ~0x20));
        const std::string rest = unit == std::string::npos ? suffix : suffix.substr(1);
        const bool bytes_only = unit == std::string::npos && (suffix == "B" || suffix == "b");
        const bool unit_ok =
            unit != std::string::npos && (rest.empty() || rest == "i" || rest == "iB" ||
                                          rest == "B" || rest == "ib" || rest == "b");
        if (!bytes_only && !unit_ok) {
            throw std::invalid_argument("'" + text + "' is not a size" + hint);
        }
        shift = unit == std::string::npos ? 0 : 10 * static_cast<unsigned>(unit + 1);
    }
    const std::uint64_t number = parse_unsigned(text.substr(0, digits));
    if (shift != 0 && number > (UINT64_MAX >> shift)) {
        throw std::invalid_argument("'" + text + "' is too large (more than 2^64 - 1 bytes)");
    }
    return number << shift;
}

/// The shortest exact binary spelling of a size: 131072 -> "128K", 1048576 -> "1M", 1000 ->
/// "1000". parse_size(format_size(n)) == n for every n.
[[nodiscard]] inline std::string format_size(std::uint64_t bytes) {
    const char* const units[] = {"", "K", "M", "G", "T", "P"};
    unsigned unit = 0;
    while (unit < 5 && bytes != 0 && bytes % 1024 == 0) {
        bytes /= 1024;
        ++unit;
    }
    return std::to_string(bytes) + units[unit];
}

/// Reads a non-negative, finite number of seconds ("0", "2.5", "1e-3"); at most `max`.
[[nodiscard]] inline double parse_seconds(const std::string& text, double max = 1e9) {
    const bool plain = !text.empty() && ((text[0] >= '0' && text[0] <= '9') || text[0] == '.');
    char* end = nullptr;
    const double value = plain ? std::strtod(text.c_str(), &end) : 0.0;
    if (!plain || end != text.c_str() + text.size() || !std::isfinite(value)) {
        throw std::invalid_argument("'" + text + "' is not a number of seconds");
    }
    if (value > max) {
        throw std::invalid_argument("'" + text + "' is too large (at most " + std::to_string(max) +
                                    " seconds)");
    }
    return value;
}

}  // namespace nvmeio::support
