#pragma once
/// \file detail/file_open.ipp
/// nvmeio::file's opening: which files it refuses and why, the open itself (O_DIRECT, or why
/// not), and its size.

// Included by file.hpp after the class; not meant to be included on its own.

NVMEIO_BEGIN_NAMESPACE

namespace detail {

// A path as messages show it: a NUL byte as "\0".
inline std::string printable_path(const std::string& path) {
    std::string text;
    for (const char c : path)
        text += c == '\0' ? std::string("\\0") : std::string(1, c);
    return text;
}

// The open(2) flags for `mode`. O_NONBLOCK so that opening a FIFO does not wait for a peer;
// file::clear_nonblock takes it off again for what is served.
inline int open_flags(open_mode mode) noexcept {
    int flags = O_CLOEXEC | O_NONBLOCK;
    switch (mode) {
        case open_mode::read:
            flags |= O_RDONLY;
            break;
        case open_mode::write:
            flags |= O_RDWR | O_CREAT | O_TRUNC;
            break;
        case open_mode::read_write:
            flags |= O_RDWR | O_CREAT;
            break;
    }
    return flags;
}

// What fstat's st_mode says an open file is.
inline file_kind kind_of(mode_t mode) noexcept {
    return S_ISREG(mode)    ? file_kind::regular
           : S_ISBLK(mode)  ? file_kind::block_device
           : S_ISCHR(mode)  ? file_kind::character_device
           : S_ISFIFO(mode) ? file_kind::fifo
           : S_ISSOCK(mode) ? file_kind::socket
                            : file_kind::other;
}

}  // namespace detail

inline const char* file::refusal(file_kind kind, dev_t device) noexcept {
    switch (kind) {
        case file_kind::regular:
        case file_kind::block_device:
            return nullptr;
        case file_kind::character_device:
            // The memory devices (major 1) that answer at once and read or write anything:
            // null (3), zero (5), random (8), urandom (9).
            if (major(device) == 1) {
                const unsigned number = minor(device);
                if (number == 3 || number == 5 || number == 8 || number == 9) return nullptr;
            }
            return "a character device other than /dev/null, /dev/zero, /dev/random or "
                   "/dev/urandom: it may have no file offsets or wait for input (a terminal), "
                   "and an NVMe controller such as /dev/nvme0 is not its namespace; nvmeio needs "
                   "a regular file or a block device such as /dev/nvme0n1";
        case file_kind::fifo:
            return "a FIFO has no file offsets; nvmeio needs a regular file or a block device";
        case file_kind::socket:
            return "a socket has no file offsets; nvmeio needs a regular file or a block device";
        case file_kind::other:
            break;
    }
    return "not a regular file, a block device or a memory character device";
}

inline io_failure file::open_impl(std::string path, open_mode mode, direct_io direct,
                                  bool existing) {
    if (const std::size_t nul = path.find('\0'); nul != std::string::npos) {
        detail::throw_invalid("open of '" + detail::printable_path(path) +
                              "': the path has a NUL byte at position " + std::to_string(nul) +
                              " (the system would open '" + path.substr(0, nul) + "' instead)");
    }
    close_quietly();
    path_ = std::make_shared<const std::string>(std::move(path));
    mode_ = mode;
    direct_ = may_use_o_direct(direct);
    rw_flags_ = 0;
    const int flags = detail::open_flags(mode) & ~(existing ? O_CREAT | O_TRUNC : 0);
    const int fd = open_descriptor(flags);
    if (fd < 0) return open_failure(-fd);
    // The filesystem refused O_DIRECT and the file was opened buffered instead.
    const bool refused = may_use_o_direct(direct) && !direct_;
    struct stat st {};
    io_failure failure = classify_opened(fd, direct, refused, st);
    if (!failure) failure = probe_uncached(fd, direct, refused);
    if (!failure) failure = clear_nonblock(fd);
    if (failure) {
        ::close(fd);
        return failure;
    }
    adopt(fd, st);
    return {};
}

inline io_failure file::reopen_impl(int descriptor, open_mode mode, direct_io direct) {
    const std::string link = "/proc/self/fd/" + std::to_string(descriptor);
    struct stat given {};
    if (descriptor < 0 || ::fstat(descriptor, &given) != 0) {
        const int error = descriptor < 0 ? EBADF : errno;
        close_quietly();
        path_ = std::make_shared<const std::string>(link);
        return {detail::errno_code(error), "reopen of descriptor " + std::to_string(descriptor),
                link, 0, 0};
    }
    // The name messages give the file: the link's target now, else the link.
    std::string name(4096, '\0');
    const ssize_t n = ::readlink(link.c_str(), name.data(), name.size());
    name = n > 0 && static_cast<std::size_t>(n) < name.size()
               ? name.substr(0, static_cast<std::size_t>(n))
               : link;
    // Neither created nor truncated until checked: the magic link opens the descriptor's own
    // inode, and anything else (the number closed and reused meanwhile, a /proc that is not
    // procfs) is refused untouched.
    if (io_failure failure = open_impl(link, mode, direct, true)) {
        const int error = failure.code.value();
        if (error == EACCES || error == EPERM || error == ENOENT || error == ENXIO) {
            return share_descriptor(descriptor, mode, direct, name);
        }
        failure.path = name;
        return failure;
    }
    struct stat opened {};
    if (::fstat(fd_, &opened) != 0 || opened.st_dev != given.st_dev ||
        opened.st_ino != given.st_ino) {
        close_quietly();
        return {detail::errno_code(ESTALE),
                "reopen of descriptor " + std::to_string(descriptor) + " (another file opened)",
                link, 0, 0};
    }
    path_ = std::make_shared<const std::string>(std::move(name));
    return truncate_for(mode);
}

inline io_failure file::share_descriptor(int descriptor, open_mode mode, direct_io direct,
                                         std::string name) {
    close_quietly();
    path_ = std::make_shared<const std::string>(std::move(name));
    mode_ = mode;
    rw_flags_ = 0;
    const std::string what = "reopen of descriptor " + std::to_string(descriptor);
    const int flags = ::fcntl(descriptor, F_GETFL);
    direct_ = flags >= 0 && (flags & O_DIRECT) != 0;
    if (direct == direct_io::on && !direct_) {
        return {detail::errno_code(EINVAL),
                what +
                    " with O_DIRECT (/proc refused to reopen it, and the descriptor has no "
                    "O_DIRECT of its own)",
                *path_, 0, 0};
    }
    const int fd = ::fcntl(descriptor, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return {detail::errno_code(errno), what + " (duplicating it)", *path_, 0, 0};
    struct stat st {};
    io_failure failure = classify_opened(fd, direct, false, st);
    if (!failure) failure = probe_uncached(fd, direct, false);
    if (failure) {
        ::close(fd);
        return failure;
    }
    adopt(fd, st);  // its O_NONBLOCK, like its other flags, is the caller's: left as it is
    return truncate_for(mode);
}

inline io_failure file::truncate_for(open_mode mode) {
    if (mode != open_mode::write || kind_ != file_kind::regular || ::ftruncate(fd_, 0) == 0) {
        return {};
    }
    const int error = errno;
    io_failure failure{detail::errno_code(error), "ftruncate after reopen", path(), 0, 0};
    close_quietly();
    return failure;
}

inline int file::open_descriptor(int flags) {
    const std::string& name = *path_;
    const auto open_with = [&](int extra) {
        int fd;
        do {
            fd = ::open(name.c_str(), flags | extra, 0666);
        } while (fd < 0 && errno == EINTR);
        return fd < 0 ? -errno : fd;
    };
    const int fd = open_with(direct_ ? O_DIRECT : 0);
    if (fd != -EINVAL || !direct_) return fd;
    // EINVAL may mean "no O_DIRECT here" or something else entirely (a directory, say):
    // a buffered open tells which.
    direct_ = false;
    return open_with(0);
}

inline io_failure file::open_failure(int error) const {
    const std::string& name = *path_;
    struct stat st {};
    // A socket's path answers ENXIO; say why rather than "no such device".
    if (error == ENXIO && ::stat(name.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
        return {detail::errno_code(error),
                std::string("open (") + refusal(file_kind::socket, 0) + ")", name, 0, 0};
    }
    return {detail::errno_code(error), direct_ ? "open with O_DIRECT" : "open", name, 0, 0};
}

inline io_failure file::classify_opened(int fd, direct_io direct, bool refused, struct stat& st) {
    const std::string& name = *path_;
    if (::fstat(fd, &st) != 0) return {detail::errno_code(errno), "fstat after open", name, 0, 0};
    if (S_ISDIR(st.st_mode)) return {detail::errno_code(EISDIR), "open", name, 0, 0};
    kind_ = detail::kind_of(st.st_mode);
    if (const char* why = refusal(kind_, st.st_rdev)) {
        return {detail::errno_code(kind_ == file_kind::fifo ? ESPIPE : ENOTSUP),
                std::string("open (") + why + ")", name, 0, 0};
    }
    if (refused && direct == direct_io::on) {
        return {detail::errno_code(EINVAL),
                kind_ == file_kind::character_device
                    ? "open with O_DIRECT (a character device has no direct I/O; use "
                      "direct_io::automatic or direct_io::off)"
                    : "open with O_DIRECT (the filesystem refuses direct I/O; use "
                      "direct_io::automatic or direct_io::off)",
                name, 0, 0};
    }
    return {};
}

inline io_failure file::probe_uncached(int fd, direct_io direct, bool refused) {
    // Uncached: asked for, or what automatic takes where O_DIRECT was refused.
    if (direct != direct_io::uncached && !(refused && direct == direct_io::automatic)) return {};
    // A one-byte read with the flag asks the kernel and the filesystem (EOPNOTSUPP: no such
    // mode here).
    std::byte probe{};
    const iovec one{&probe, 1};
    ssize_t rc;
    do {
        rc = ::preadv2(fd, &one, 1, 0, detail::rwf_dontcache);
    } while (rc < 0 && errno == EINTR);
    if (rc >= 0) {
        rw_flags_ = detail::rwf_dontcache;
        return {};
    }
    if (direct != direct_io::uncached) return {};  // automatic: stays buffered
    const int error = errno;
    return {detail::errno_code(error),
            error == EOPNOTSUPP || error == EINVAL
                ? "open for uncached I/O (RWF_DONTCACHE: this kernel or filesystem has no "
                  "uncached buffered I/O, which needs Linux 6.14+ and a filesystem that "
                  "supports it; use direct_io::automatic or direct_io::off)"
                : "open for uncached I/O (a one-byte RWF_DONTCACHE read failed)",
            *path_, 0, 0};
}

inline io_failure file::clear_nonblock(int fd) const {
    // Served files wait: io_uring would otherwise answer EAGAIN instead of waiting for the device.
    const int status = ::fcntl(fd, F_GETFL);
    if (status < 0 || ::fcntl(fd, F_SETFL, status & ~O_NONBLOCK) != 0)
        return {detail::errno_code(errno), "fcntl(F_SETFL) after open", *path_, 0, 0};
    return {};
}

inline void file::adopt(int fd, const struct stat& st) {
    fd_ = fd;
    alignment_ = query_dio_alignment(fd_);
    queue_limits_ = {};
    if (kind_ == file_kind::block_device) {
        try {
            queue_limits_ = detail::read_queue_limits(st.st_rdev);
        } catch (...) {
            // Unreadable sysfs: requests stay as asked.
        }
    }
    if (kind_ == file_kind::regular)
        size_lock_ = detail::size_lock_registry::instance().lock_for(st.st_dev, st.st_ino);
}

inline file_identity file::identity(std::error_code& ec) const noexcept {
    ec.clear();
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
        ec = detail::errno_code(errno);
        return {};
    }
    const bool device = S_ISBLK(st.st_mode) || S_ISCHR(st.st_mode);
    return {kind_, device ? st.st_rdev : st.st_dev, device ? 0 : st.st_ino};
}

inline std::uint64_t file::size(std::error_code& ec) const noexcept {
    ec.clear();
    if (!is_open()) {
        ec = detail::errno_code(EBADF);
        return 0;
    }
    if (kind_ == file_kind::block_device) {
        std::uint64_t bytes = 0;
        if (::ioctl(fd_, BLKGETSIZE64, &bytes) == 0) return bytes;
        ec = detail::errno_code(errno);
        return 0;
    }
    struct stat st {};
    if (::fstat(fd_, &st) == 0) return static_cast<std::uint64_t>(st.st_size);
    ec = detail::errno_code(errno);
    return 0;
}

NVMEIO_END_NAMESPACE
