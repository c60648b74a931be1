#pragma once
// A real block device for tests: a loop device over an image file in the scratch folder, with
// the logical block size asked for (512 or 4096). Needs root and /dev/loop-control. The device
// is created with LO_FLAGS_AUTOCLEAR and this object holds it open, so it goes away when the
// object dies, and with the process if the test crashes.

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace nvmeio_test {

class loop_device {
  public:
    // An image of `size` bytes filled with pattern(size, seed), attached with `sector_size`.
    loop_device(std::uint64_t size, unsigned sector_size, std::uint64_t seed)
        : image_("loop_image") {
        if (::access("/dev/loop-control", F_OK) != 0) {
            why_not_ =
                "/dev/loop-control does not exist (no loop driver in this kernel or container)";
            return;
        }
        const std::vector<unsigned char> bytes = pattern(size, seed);
        spew(image_.str(), bytes.data(), bytes.size());
        if (file_size(image_.str()) != size) {
            why_not_ = "could not write the image " + image_.str();
            return;
        }
        const int backing = ::open(image_.str().c_str(), O_RDWR | O_CLOEXEC);
        const int control = ::open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        if (backing < 0 || control < 0) {
            why_not_ =
                std::string("open of the image or /dev/loop-control: ") + std::strerror(errno);
        }
        // Another process may take the free device between the two calls: try again.
        for (int attempt = 0; attempt < 50 && backing >= 0 && control >= 0 && fd_ < 0; ++attempt) {
            const int number = ::ioctl(control, LOOP_CTL_GET_FREE);
            if (number < 0) {
                why_not_ = std::string("LOOP_CTL_GET_FREE: ") + std::strerror(errno);
                break;
            }
            const std::string path = "/dev/loop" + std::to_string(number);
            const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
            if (fd < 0) continue;
            loop_config config{};
            config.fd = static_cast<std::uint32_t>(backing);
            config.block_size = sector_size;
            config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
            if (::ioctl(fd, LOOP_CONFIGURE, &config) == 0) {
                fd_ = fd;
                path_ = path;
                break;
            }
            why_not_ = "LOOP_CONFIGURE on " + path + ": " + std::strerror(errno);
            ::close(fd);
            if (errno != EBUSY) break;
        }
        if (backing >= 0) ::close(backing);  // the loop device holds its own reference
        if (control >= 0) ::close(control);
    }
    loop_device(const loop_device&) = delete;
    loop_device& operator=(const loop_device&) = delete;
    ~loop_device() {
        if (fd_ >= 0) ::close(fd_);  // the last close detaches it (LO_FLAGS_AUTOCLEAR)
    }

    // The device node, or empty when it could not be made (why_not() says why).
    const std::string& path() const { return path_; }
    const std::string& why_not() const { return why_not_; }
    // The image file: the device's bytes, read without going through the device.
    const std::string& image() const { return image_.str(); }

  private:
    temp_path image_;
    std::string path_;
    std::string why_not_;
    int fd_ = -1;
};

}  // namespace nvmeio_test
