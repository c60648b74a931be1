#pragma once
/// \file model/load.hpp
/// Five ways to bring every tensor of a parsed model file into host memory, as model loaders do
/// it, each into fresh memory (allocation and page faults are part of a load), and the check of
/// every loaded byte:
///  - `load_arena`: one nvmeio transfer of the whole tensor span, split over the threads of a
///    parallel context, into one aligned arena (O_DIRECT by default);
///  - `load_per_tensor`: one nvmeio batch (`read_batch`) with one destination buffer per tensor;
///  - `load_mmap`: map the file and touch every page (llama.cpp's default loader);
///  - `load_read`: one buffered `pread` per tensor into an arena (llama.cpp with --no-mmap);
///  - `load_staged`: O_DIRECT reads into a few rotating staging buffers, each copied into the
///    arena as it arrives (llama.cpp's direct-I/O loader), the reads kept in flight by an async
///    context.

#include <sys/mman.h>
#include <unistd.h>

#include <nvmeio/async.hpp>
#include <nvmeio/batch.hpp>
#include <nvmeio/parallel.hpp>
#include <nvmeio/verify.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "model/format.hpp"
#include "support/pattern.hpp"

namespace example::model {

/// A read-only mapping of a whole file, unmapped on destruction. Move-only.
class file_mapping {
  public:
    file_mapping() = default;
    file_mapping(const std::string& path, std::uint64_t size) : length_(size) {
        if (size == 0) return;
        nvmeio::file f(path, nvmeio::open_mode::read, nvmeio::direct_io::off);
        void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, f.native_handle(), 0);
        if (map == MAP_FAILED) {
            throw nvmeio::io_error(
                {std::error_code(errno, std::generic_category()), "mmap", path, 0, size});
        }
        data_ = static_cast<const std::byte*>(map);
    }
    file_mapping(file_mapping&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)), length_(other.length_) {}
    file_mapping& operator=(file_mapping&& other) noexcept {
        std::swap(data_, other.data_);
        std::swap(length_, other.length_);
        return *this;
    }
    file_mapping(const file_mapping&) = delete;
    file_mapping& operator=(const file_mapping&) = delete;
    ~file_mapping() {
        if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), length_);
    }
    [[nodiscard]] const std::byte* data() const noexcept { return data_; }

  private:
    const std::byte* data_ = nullptr;
    std::size_t length_ = 0;
};

/// Where a load left the tensors: `tensors[i]` holds the bytes of the layout's tensor i, in
/// memory this object owns.
struct loaded_model {
    std::vector<const std::byte*> tensors;
    nvmeio::aligned_buffer arena;                 ///< load_arena, load_read, load_staged
    std::vector<nvmeio::aligned_buffer> buffers;  ///< load_per_tensor
    file_mapping mapping;                         ///< load_mmap
    std::uint64_t touched = 0;                    ///< load_mmap: sum of one byte per page
};

/// How the loaders open and move the file.
struct load_settings {
    std::string path;
    nvmeio::direct_io direct = nvmeio::direct_io::on;  ///< For the nvmeio and staged loaders.
    nvmeio::transfer_config config{};                  ///< Strategy and submit mode.
    std::size_t staging_buffers = 4;                   ///< load_staged: buffers in rotation.
    std::size_t staging_size = std::size_t{64} << 20;  ///< load_staged: bytes per buffer.
};

namespace detail {

// The byte range the tensors span, its start rounded down to `unit` for O_DIRECT.
struct tensor_span {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    [[nodiscard]] std::size_t length() const { return static_cast<std::size_t>(end - begin); }
};

inline tensor_span span_of(const model_layout& layout, std::uint64_t unit) {
    if (layout.tensors.empty()) return {};
    std::uint64_t end = 0;
    for (const tensor_info& t : layout.tensors)
        end = std::max(end, t.offset + t.size);
    const std::uint64_t first = layout.tensors.front().offset;
    return {first / unit * unit, end};
}

inline std::uint64_t unit_of(const nvmeio::file& f) {
    return std::max<std::uint64_t>(4096, f.required_alignment());
}

inline std::size_t memory_alignment(const nvmeio::file& f) {
    return std::max<std::size_t>(4096, f.alignment().memory);
}

// Points each tensor into an arena that holds the file's bytes from `span.begin`.
inline void point_into_arena(const model_layout& layout, const tensor_span& span,
                             loaded_model& out) {
    for (const tensor_info& t : layout.tensors)
        out.tensors.push_back(out.arena.data() + (t.offset - span.begin));
}

[[noreturn]] inline void file_changed(const std::string& path, std::uint64_t at) {
    throw nvmeio::io_error({std::make_error_code(std::errc::io_error),
                            "read (the file ended early: it changed since its header was read)",
                            path, at, 0});
}

}  // namespace detail

/// One parallel nvmeio transfer of the whole tensor span into one aligned arena.
template <class Backend>
loaded_model load_arena(nvmeio::basic_parallel_context<Backend>& context,
                        const model_layout& layout, const load_settings& settings) {
    nvmeio::file f(settings.path, nvmeio::open_mode::read, settings.direct);
    const detail::tensor_span span = detail::span_of(layout, detail::unit_of(f));
    loaded_model out;
    out.arena = nvmeio::aligned_buffer(span.length(), detail::memory_alignment(f));
    const nvmeio::transfer_result result =
        nvmeio::read(context, f, out.arena, span.begin, settings.config);
    if (result.bytes != span.length())
        detail::file_changed(settings.path, span.begin + result.bytes);
    detail::point_into_arena(layout, span, out);
    return out;
}

/// One nvmeio batch with a destination buffer per tensor. Each buffer also takes the padding
/// after its tensor (as ggml pads its allocations), and the header's tail before the first
/// tensor goes to a scratch buffer, so that the requests tile the span as O_DIRECT needs; when
/// the file aligns its tensors to the device (GGUF `general.alignment` 4096), every request
/// starts aligned and large ones go straight into their buffers without a copy.
template <class Context>
loaded_model load_per_tensor(Context& context, const model_layout& layout,
                             const load_settings& settings) {
    nvmeio::file f(settings.path, nvmeio::open_mode::read, settings.direct);
    const detail::tensor_span span = detail::span_of(layout, detail::unit_of(f));
    loaded_model out;
    std::vector<nvmeio::batch_request> requests;
    nvmeio::aligned_buffer scratch;
    if (!layout.tensors.empty() && layout.tensors.front().offset > span.begin) {
        scratch = nvmeio::aligned_buffer(
            static_cast<std::size_t>(layout.tensors.front().offset - span.begin));
        requests.push_back({scratch, span.begin});
    }
    for (std::size_t i = 0; i < layout.tensors.size(); ++i) {
        const tensor_info& t = layout.tensors[i];
        const std::uint64_t next =
            i + 1 < layout.tensors.size() ? layout.tensors[i + 1].offset : span.end;
        const auto length = static_cast<std::size_t>(std::max(next, t.offset + t.size) - t.offset);
        out.buffers.emplace_back(length, detail::memory_alignment(f));
        out.tensors.push_back(out.buffers.back().data());
        requests.push_back({out.buffers.back(), t.offset});
    }
    nvmeio::batch_options options;
    options.config = settings.config;
    const nvmeio::batch_outcome outcome = nvmeio::read_batch(context, f, requests, options);
    for (std::size_t i = 0; i < requests.size(); ++i) {
        if (outcome.results[i].bytes != requests[i].memory.size())
            detail::file_changed(settings.path, requests[i].offset + outcome.results[i].bytes);
    }
    return out;
}

/// Maps the file and reads one byte of every page of the tensor span.
inline loaded_model load_mmap(const model_layout& layout, const load_settings& settings) {
    loaded_model out;
    out.mapping = file_mapping(settings.path, layout.file_size);
    const detail::tensor_span span = detail::span_of(layout, 1);
    const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    std::uint64_t sum = 0;
    for (std::uint64_t at = span.begin; at < span.end; at = (at / page + 1) * page)
        sum += static_cast<std::uint64_t>(out.mapping.data()[at]);
    out.touched = sum;
    for (const tensor_info& t : layout.tensors)
        out.tensors.push_back(out.mapping.data() + t.offset);
    return out;
}

/// One buffered pread per tensor into an arena laid out as the file.
inline loaded_model load_read(const model_layout& layout, const load_settings& settings) {
    nvmeio::file f(settings.path, nvmeio::open_mode::read, nvmeio::direct_io::off);
    const detail::tensor_span span = detail::span_of(layout, 1);
    loaded_model out;
    out.arena = nvmeio::aligned_buffer(span.length());
    detail::point_into_arena(layout, span, out);
    for (std::size_t i = 0; i < layout.tensors.size(); ++i) {
        const tensor_info& t = layout.tensors[i];
        const std::size_t got = f.read_at(
            nvmeio::memory(out.arena).slice(static_cast<std::size_t>(t.offset - span.begin),
                                            static_cast<std::size_t>(t.size)),
            t.offset);
        if (got != t.size) detail::file_changed(settings.path, t.offset + got);
    }
    return out;
}

/// O_DIRECT reads of the span in `staging_size` chunks into `staging_buffers` rotating buffers,
/// each chunk copied into the arena when it arrives while the next ones are being read.
template <class Backend>
loaded_model load_staged(nvmeio::basic_async_context<Backend>& context, const model_layout& layout,
                         const load_settings& settings) {
    nvmeio::file f(settings.path, nvmeio::open_mode::read, settings.direct);
    const detail::tensor_span span = detail::span_of(layout, detail::unit_of(f));
    loaded_model out;
    out.arena = nvmeio::aligned_buffer(span.length());
    const std::size_t chunk = settings.staging_size;
    const std::size_t chunks = (span.length() + chunk - 1) / chunk;
    const std::size_t slots = std::min(settings.staging_buffers, std::max<std::size_t>(chunks, 1));
    std::vector<nvmeio::aligned_buffer> staging;
    for (std::size_t i = 0; i < slots; ++i)
        staging.emplace_back(std::min(chunk, span.length()), detail::memory_alignment(f));
    std::vector<nvmeio::transfer_handle> in_flight(slots);  // destroyed (waited) before staging
    const auto length_of = [&](std::size_t k) {
        return std::min(chunk, span.length() - k * chunk);
    };
    const auto submit = [&](std::size_t k) {
        in_flight[k % slots] =
            nvmeio::async_read(context, f, nvmeio::memory(staging[k % slots]).first(length_of(k)),
                               span.begin + k * chunk, settings.config);
    };
    for (std::size_t k = 0; k < std::min(slots, chunks); ++k)
        submit(k);
    for (std::size_t k = 0; k < chunks; ++k) {
        const nvmeio::transfer_result result = in_flight[k % slots].wait();
        if (result.bytes != length_of(k))
            detail::file_changed(settings.path, span.begin + k * chunk + result.bytes);
        std::memcpy(out.arena.data() + k * chunk, staging[k % slots].data(), length_of(k));
        if (k + slots < chunks) submit(k + slots);
    }
    detail::point_into_arena(layout, span, out);
    return out;
}

/// What checking a load found.
struct load_check {
    std::size_t bad_tensors = 0;
    std::string first_problem;  ///< The first bad tensor and its first wrong byte.
};

/// Checks every byte of every tensor: against the generated pattern when the file says it holds
/// one, else against a buffered read of the same range (verify_read).
inline load_check check_load(const model_layout& layout, const loaded_model& loaded,
                             const std::string& path) {
    load_check check;
    for (std::size_t i = 0; i < layout.tensors.size(); ++i) {
        const tensor_info& t = layout.tensors[i];
        const auto size = static_cast<std::size_t>(t.size);
        std::size_t wrong = 0;
        std::size_t first = 0;
        if (layout.pattern_seed) {
            const nvmeio::mismatch_summary m = nvmeio::support::pattern_mismatches(
                loaded.tensors[i], size, t.offset, *layout.pattern_seed);
            wrong = m.count;
            first = m.first;
        } else {
            const nvmeio::verify_result v =
                nvmeio::verify_read(path, nvmeio::memory(loaded.tensors[i], size), t.offset);
            wrong = v.equal() ? 0 : std::max<std::size_t>(1, v.mismatches.count);
            first = v.mismatches.count != 0 ? v.mismatches.first : v.file_bytes;
        }
        if (wrong == 0) continue;
        if (check.bad_tensors++ == 0) {
            check.first_problem = "tensor '" + t.name + "': " + std::to_string(wrong) +
                                  " wrong bytes, the first at file offset " +
                                  std::to_string(t.offset + first);
        }
    }
    return check;
}

}  // namespace example::model
