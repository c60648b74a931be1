#pragma once
/// \file backend/io_uring_files.hpp
/// An io_uring ring's registered files (io_uring_backend::register_files): the kernel holds
/// their descriptors, so a request on one skips the descriptor lookup (IOSQE_FIXED_FILE). The
/// files are kept open here until they are unregistered, so none is closed while registered.

#include "nvmeio/backend/io_uring_support.hpp"

#include <cstddef>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"

#if NVMEIO_HAS_IO_URING

namespace nvmeio {
inline namespace v0 {

namespace detail {

// The files registered with one ring, in registration order. Not thread-safe: the ring's
// thread uses it.
class ring_files {
  public:
    // Registers `files` with `ring`; on success `files` is left empty, on failure untouched.
    // Throws std::invalid_argument when files are already registered, when `files` is empty or
    // one is not open; io_error when the kernel refuses.
    void add(io_uring& ring, std::vector<file>&& files) {
        if (!files_.empty()) throw_invalid("register_files: files are already registered");
        if (files.empty()) throw_invalid("register_files: no files given");
        std::vector<int> descriptors;
        descriptors.reserve(files.size());
        for (std::size_t i = 0; i < files.size(); ++i) {
            if (!files[i].is_open()) {
                throw_invalid("register_files: file " + std::to_string(i) + " (" + files[i].path() +
                              ") is not open");
            }
            descriptors.push_back(files[i].native_handle());
        }
        const int rc = ::io_uring_register_files(&ring, descriptors.data(),
                                                 static_cast<unsigned>(descriptors.size()));
        if (rc < 0) {
            throw io_error({errno_code(-rc),
                            "io_uring_register_files (" + std::to_string(files.size()) + " files)",
                            files.front().path(), 0, 0});
        }
        files_ = std::exchange(files, {});
        descriptors_ = std::move(descriptors);
    }

    // Registers the same descriptors with a new ring (one that takes the old one's place);
    // 0 or -errno.
    int add_again(io_uring& ring) const noexcept {
        if (descriptors_.empty()) return 0;
        const int rc = ::io_uring_register_files(&ring, descriptors_.data(),
                                                 static_cast<unsigned>(descriptors_.size()));
        return rc < 0 ? rc : 0;
    }

    // Unregisters the files from `ring` and gives them back, still open (the caller checked
    // that none is in flight). Throws io_error when the kernel refuses.
    std::vector<file> take(io_uring& ring) {
        if (files_.empty()) return {};
        const int rc = ::io_uring_unregister_files(&ring);
        if (rc < 0) throw io_error({errno_code(-rc), "io_uring_unregister_files", "", 0, 0});
        descriptors_.clear();
        return std::exchange(files_, {});
    }

    [[nodiscard]] std::size_t count() const noexcept { return files_.size(); }

    // File `index`, const so that no one closes or replaces it; throws std::invalid_argument
    // past the registered ones.
    [[nodiscard]] const file& at(std::size_t index) const {
        if (index >= files_.size()) {
            throw_invalid("registered_file(" + std::to_string(index) +
                          "): " + std::to_string(files_.size()) + " files are registered");
        }
        return files_[index];
    }

    // The registered index of descriptor `fd`, or -1. The file's current descriptor must still
    // be the registered one: a registered file closed behind the backend (through a const_cast)
    // matches nothing, whatever file reuses its number.
    [[nodiscard]] int index_of(int fd) const noexcept {
        for (std::size_t i = 0; i < descriptors_.size(); ++i) {
            if (descriptors_[i] == fd && files_[i].native_handle() == fd)
                return static_cast<int>(i);
        }
        return -1;
    }

  private:
    std::vector<file> files_;
    std::vector<int> descriptors_;  // files_' descriptors as registered
};

}  // namespace detail

}  // namespace v0
}  // namespace nvmeio

#endif  // NVMEIO_HAS_IO_URING
