#pragma once
/// \file error.hpp
/// The one exception type for I/O failures and the helpers that build it; at the public boundary
/// a failure is either an `io_error` or an `std::error_code&` out-parameter.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

/// Where an I/O failure happened: what was being done, to which file, and which byte range.
struct io_failure {
    std::error_code code;      ///< The operating system's (or nvmeio's) reason.
    std::string operation;     ///< A short verb phrase: "read", "write", "open", "io_submit"...
    std::string path;          ///< The file the operation was applied to (may be empty).
    std::uint64_t offset = 0;  ///< File offset of the failed range.
    std::uint64_t length = 0;  ///< Length in bytes of the failed range.

    /// True when a failure has been recorded.
    [[nodiscard]] explicit operator bool() const noexcept { return static_cast<bool>(code); }
};

/// The exception thrown for every I/O failure. Its `what()` reads like
/// `nvmeio: read of 4096 bytes at offset 8192 in '/data/x.bin' failed: Input/output error`.
class io_error : public std::system_error {
  public:
    /// Builds the exception from a recorded failure.
    explicit io_error(io_failure failure)
        : std::system_error(failure.code, describe(failure)), failure_(std::move(failure)) {}

    /// The operation that failed ("read", "write", "open"...).
    [[nodiscard]] const std::string& operation() const noexcept { return failure_.operation; }
    /// The file the failure concerns.
    [[nodiscard]] const std::string& path() const noexcept { return failure_.path; }
    /// File offset of the failed range.
    [[nodiscard]] std::uint64_t offset() const noexcept { return failure_.offset; }
    /// Length in bytes of the failed range.
    [[nodiscard]] std::uint64_t length() const noexcept { return failure_.length; }
    /// Everything recorded about the failure.
    [[nodiscard]] const io_failure& failure() const noexcept { return failure_; }

  private:
    static std::string describe(const io_failure& f) {
        std::string text = "nvmeio: " + f.operation;
        if (f.length != 0) text += " of " + std::to_string(f.length) + " bytes";
        if (f.length != 0 || f.offset != 0) text += " at offset " + std::to_string(f.offset);
        if (!f.path.empty()) text += " in '" + f.path + "'";
        return text + " failed";  // std::system_error appends ": " + code.message()
    }

    io_failure failure_;
};

namespace detail {

/// The error code for a positive errno value.
[[nodiscard]] inline std::error_code errno_code(int error_number) noexcept {
    return {error_number, std::generic_category()};
}

/// Throws `io_error` when `failure` holds an error; the throwing overloads are this over the
/// `std::error_code&` ones.
inline void throw_if(const io_failure& failure) {
    if (failure) throw io_error(failure);
}

/// Throws `std::invalid_argument` with "nvmeio: " prefixed to `message`.
[[noreturn]] inline void throw_invalid(const std::string& message) {
    throw std::invalid_argument("nvmeio: " + message);
}

}  // namespace detail
NVMEIO_END_NAMESPACE
