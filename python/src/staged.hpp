#pragma once
// Staged transfers for Python: a staging ring (nvmeio/staged.hpp) on a copy engine (the host's,
// or a CUDA device's, nvmeio/cuda.hpp), and jobs over it, each run on an async context its
// caller lends (several windows' I/O in flight at once). The rings live in ring_pool.hpp. Nothing
// of Python here: module.cpp converts and releases the GIL.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nvmeio/async.hpp>
#include <nvmeio/cuda.hpp>
#include <nvmeio/staged.hpp>

#include "crc32.hpp"
#include "file_source.hpp"

namespace nvmeio_torch {

struct ring_settings {
    int device = -1;  ///< CUDA device index; -1: the host engine (memcpy), for CPU memory.
    nvmeio::ring_options ring{};
};

/// One staged transfer in progress on a ring: its files, and the run (which holds the ring).
class staged_job {
  public:
    virtual ~staged_job() = default;
    /// One step; the ranges completed since the last.
    virtual std::vector<std::size_t> advance() = 0;
    [[nodiscard]] virtual bool pending() const = 0;
    [[nodiscard]] virtual nvmeio::staged_outcome outcome() const = 0;
    /// Jobs asked to checksum: each range's CRC-32 (zlib's) of the bytes moved, complete once
    /// the job is.
    [[nodiscard]] const std::vector<std::uint32_t>& crcs() const { return crcs_; }

  protected:
    std::vector<std::uint32_t> crcs_;
};

/// A ring and its copy engine.
class staging_ring_base {
  public:
    virtual ~staging_ring_base() = default;
    [[nodiscard]] const ring_settings& settings() const { return settings_; }
    [[nodiscard]] std::size_t bytes() const {
        return std::size_t{settings_.ring.slots} * settings_.ring.slot_size;
    }
    /// Opens the files, takes the ring and plans, for a job run on `context` (which must
    /// outlive it): io_error for an open, std::logic_error when another job has the ring,
    /// std::invalid_argument for a bad plan.
    virtual std::unique_ptr<staged_job> start(nvmeio::async_context& context, nvmeio::operation op,
                                              const std::vector<file_source>& paths,
                                              std::vector<nvmeio::staged_range> ranges,
                                              bool checksum) = 0;

  protected:
    explicit staging_ring_base(ring_settings s) : settings_(s) {}

  private:
    ring_settings settings_;
};

template <class Engine>
class staging_ring_of final : public staging_ring_base {
  public:
    staging_ring_of(ring_settings s, std::unique_ptr<Engine> engine)
        : staging_ring_base(s), engine_(std::move(engine)), ring_(*engine_, s.ring) {}

    std::unique_ptr<staged_job> start(nvmeio::async_context& context, nvmeio::operation op,
                                      const std::vector<file_source>& paths,
                                      std::vector<nvmeio::staged_range> ranges,
                                      bool checksum) override {
        return std::make_unique<job>(*this, context, op, paths, std::move(ranges), checksum);
    }

  private:
    class job final : public staged_job {
      public:
        job(staging_ring_of& owner, nvmeio::async_context& context, nvmeio::operation op,
            const std::vector<file_source>& paths, std::vector<nvmeio::staged_range> ranges,
            bool checksum)
            : files_(open_all(paths, op)),
              count_(ranges.size()),
              run_(context, owner.ring_, pointers(files_), std::move(ranges), op) {
            if (checksum) {
                crcs_.assign(count_, 0);
                run_.observe([this](std::size_t range, const std::byte* data, std::size_t n) {
                    crcs_[range] = crc32::compute(crcs_[range], data, n);
                });
            }
        }
        std::vector<std::size_t> advance() override { return run_.advance(); }
        bool pending() const override { return run_.pending(); }
        nvmeio::staged_outcome outcome() const override { return run_.outcome(); }

      private:
        static std::vector<nvmeio::file> open_all(const std::vector<file_source>& paths,
                                                  nvmeio::operation op) {
            std::vector<nvmeio::file> files;
            files.reserve(paths.size());
            for (const file_source& source : paths) {
                files.push_back(open_source(source,
                                            op == nvmeio::operation::read
                                                ? nvmeio::open_mode::read
                                                : nvmeio::open_mode::read_write,
                                            nvmeio::direct_io::automatic));
            }
            return files;
        }
        static std::vector<const nvmeio::file*> pointers(const std::vector<nvmeio::file>& files) {
            std::vector<const nvmeio::file*> out;
            for (const nvmeio::file& f : files)
                out.push_back(&f);
            return out;
        }

        std::vector<nvmeio::file> files_;
        std::size_t count_;
        nvmeio::staged_run<nvmeio::async_context, Engine> run_;
    };

    std::unique_ptr<Engine> engine_;
    nvmeio::staging_ring<Engine> ring_;
};

/// A ring on the host engine (device -1) or on CUDA device `device`; the ring checks its
/// settings.
inline std::unique_ptr<staging_ring_base> make_staging_ring(const ring_settings& s) {
    if (s.device < 0) {
        return std::make_unique<staging_ring_of<nvmeio::host_copy_engine>>(
            s, std::make_unique<nvmeio::host_copy_engine>());
    }
    return std::make_unique<staging_ring_of<nvmeio::cuda_copy_engine>>(
        s, std::make_unique<nvmeio::cuda_copy_engine>(s.device));
}

}  // namespace nvmeio_torch
