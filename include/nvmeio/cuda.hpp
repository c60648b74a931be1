#pragma once
/// \file cuda.hpp
/// The GPU's copy engine for staged transfers (staged.hpp), on NVIDIA's driver API opened at
/// run time (`libcuda.so.1`): nothing of CUDA is needed to build. The ring's slots are
/// page-locked with `cuMemHostRegister` (so copies run at the pinned rate, asynchronously),
/// copies go on a stream of the engine's own, and each slot has one event.
///
/// The engine works in the primary context of its device (the one the CUDA runtime, and so
/// PyTorch, uses), pushed around each call and popped after it, so any thread may drive it and
/// the calling thread's current device is left as it was. Device addresses are `CUdeviceptr`s
/// of that context (a tensor's `data_ptr()`). One thread at a time.
///
/// Where the driver or the device is missing, the constructor throws std::system_error saying
/// which (ENOENT: no driver library; ENODEV: no device); a device index past the devices there
/// is std::invalid_argument.

#include <dlfcn.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "nvmeio/error.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

/// Each entry of `cuda_driver` beside the driver symbol it is loaded from, the ABI version the
/// engine was written for (`X(member, symbol)`): one list for `cuda_driver::open()` and for the
/// test that checks each entry's type against the prototype in CUDA's `cuda.h`
/// (tests/cuda_header_test.cpp).
#define NVMEIO_CUDA_DRIVER_ENTRIES(X)                \
    X(init, cuInit)                                  \
    X(device_count, cuDeviceGetCount)                \
    X(device_get, cuDeviceGet)                       \
    X(primary_retain, cuDevicePrimaryCtxRetain)      \
    X(primary_release, cuDevicePrimaryCtxRelease_v2) \
    X(push, cuCtxPushCurrent_v2)                     \
    X(pop, cuCtxPopCurrent_v2)                       \
    X(stream_create, cuStreamCreate)                 \
    X(stream_destroy, cuStreamDestroy_v2)            \
    X(stream_synchronize, cuStreamSynchronize)       \
    X(event_create, cuEventCreate)                   \
    X(event_destroy, cuEventDestroy_v2)              \
    X(event_record, cuEventRecord)                   \
    X(event_synchronize, cuEventSynchronize)         \
    X(event_query, cuEventQuery)                     \
    X(host_register, cuMemHostRegister_v2)           \
    X(host_unregister, cuMemHostUnregister)          \
    X(copy_to_device, cuMemcpyHtoDAsync_v2)          \
    X(copy_to_host, cuMemcpyDtoHAsync_v2)            \
    X(error_name, cuGetErrorName)                    \
    X(allocate, cuMemAlloc_v2)                       \
    X(free, cuMemFree_v2)                            \
    X(copy_back, cuMemcpyDtoH_v2)

/// The driver API functions the engine uses, as a table: `cuda_driver::open()` fills it from
/// `libcuda.so.1`; tests may fill it with functions of their own. A table filled by hand needs
/// every entry but `error_name`, `allocate`, `free` and `copy_back`, which only the helpers of
/// the same names (and messages) call.
struct cuda_driver {
    using result = int;  ///< CUresult: 0 is success, 600 "not ready".
    using context = void*;
    using stream = void*;
    using event = void*;
    using device_pointer = unsigned long long;  // NOLINT(google-runtime-int): CUdeviceptr

    result (*init)(unsigned) = nullptr;                               ///< cuInit
    result (*device_count)(int*) = nullptr;                           ///< cuDeviceGetCount
    result (*device_get)(int*, int) = nullptr;                        ///< cuDeviceGet
    result (*primary_retain)(context*, int) = nullptr;                ///< cuDevicePrimaryCtxRetain
    result (*primary_release)(int) = nullptr;                         ///< cuDevicePrimaryCtxRelease
    result (*push)(context) = nullptr;                                ///< cuCtxPushCurrent
    result (*pop)(context*) = nullptr;                                ///< cuCtxPopCurrent
    result (*stream_create)(stream*, unsigned) = nullptr;             ///< cuStreamCreate
    result (*stream_destroy)(stream) = nullptr;                       ///< cuStreamDestroy
    result (*stream_synchronize)(stream) = nullptr;                   ///< cuStreamSynchronize
    result (*event_create)(event*, unsigned) = nullptr;               ///< cuEventCreate
    result (*event_destroy)(event) = nullptr;                         ///< cuEventDestroy
    result (*event_record)(event, stream) = nullptr;                  ///< cuEventRecord
    result (*event_synchronize)(event) = nullptr;                     ///< cuEventSynchronize
    result (*event_query)(event) = nullptr;                           ///< cuEventQuery
    result (*host_register)(void*, std::size_t, unsigned) = nullptr;  ///< cuMemHostRegister
    result (*host_unregister)(void*) = nullptr;                       ///< cuMemHostUnregister
    result (*copy_to_device)(device_pointer, const void*, std::size_t, stream) = nullptr;
    ///< cuMemcpyHtoDAsync
    result (*copy_to_host)(void*, device_pointer, std::size_t, stream) = nullptr;
    ///< cuMemcpyDtoHAsync
    result (*error_name)(result, const char**) = nullptr;               ///< cuGetErrorName
    result (*allocate)(device_pointer*, std::size_t) = nullptr;         ///< cuMemAlloc
    result (*free)(device_pointer) = nullptr;                           ///< cuMemFree
    result (*copy_back)(void*, device_pointer, std::size_t) = nullptr;  ///< cuMemcpyDtoH

    /// The process's driver, opened once (thread-safe); std::system_error ENOENT naming the
    /// library and why it could not be opened, or the function it lacks.
    static const cuda_driver& open() {
        static const std::pair<cuda_driver, std::string> loaded = load();
        if (!loaded.second.empty()) {
            throw std::system_error(detail::errno_code(ENOENT), "nvmeio: " + loaded.second);
        }
        return loaded.first;
    }

  private:
    static std::pair<cuda_driver, std::string> load() {
        cuda_driver d;
        void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (library == nullptr) {
            const char* why = ::dlerror();
            return {d, std::string("the CUDA driver (libcuda.so.1) could not be opened: ") +
                           (why != nullptr ? why : "unknown reason") +
                           "; copies to a GPU need NVIDIA's driver installed"};
        }
        std::string missing;
        const auto find = [&](auto& function, const char* name) {
            void* symbol = ::dlsym(library, name);
            if (symbol == nullptr && missing.empty()) missing = name;
            function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(symbol);
        };
#define NVMEIO_FIND_ENTRY(member, symbol) find(d.member, #symbol);
        NVMEIO_CUDA_DRIVER_ENTRIES(NVMEIO_FIND_ENTRY)
#undef NVMEIO_FIND_ENTRY
        if (!missing.empty()) return {d, "the CUDA driver (libcuda.so.1) lacks " + missing};
        return {d, ""};  // the library stays open for the process
    }
};

namespace detail {

// CUDA driver results as error codes: value() is the CUresult (its name goes in the message of
// the exception, from the driver that returned it).
class cuda_category_impl : public std::error_category {
  public:
    const char* name() const noexcept override { return "cuda"; }
    std::string message(int value) const override {
        return "CUDA driver error " + std::to_string(value);
    }
};

}  // namespace detail

/// The category of CUDA driver results.
[[nodiscard]] inline const std::error_category& cuda_category() noexcept {
    static const detail::cuda_category_impl category;
    return category;
}

/// Copies between a staging ring's slots and one GPU's memory (the copy engine concept of
/// staged.hpp).
class cuda_copy_engine {
  public:
    /// An engine for CUDA device `device` (as `cuda:N`), through `driver` (by default the
    /// process's libcuda). Throws as the file comment says; std::invalid_argument, before any
    /// call, for a table without an entry the engine calls, naming it.
    explicit cuda_copy_engine(int device, const cuda_driver* driver = nullptr)
        : driver_(driver != nullptr ? *driver : cuda_driver::open()), device_(device) {
        if (const char* missing = first_missing_entry(driver_)) {
            detail::throw_invalid(std::string("cuda_copy_engine: the driver table lacks ") +
                                  missing);
        }
        if (const int r = driver_.init(0); r != 0) {
            const int code = r == 100 ? ENODEV : EIO;  // CUDA_ERROR_NO_DEVICE
            throw std::system_error(
                detail::errno_code(code),
                "nvmeio: cuInit failed (" + name_of(r) +
                    "): no usable CUDA device for a copy to cuda:" + std::to_string(device));
        }
        int count = 0;
        check(driver_.device_count(&count), "cuDeviceGetCount");
        if (count == 0) {
            throw std::system_error(detail::errno_code(ENODEV),
                                    "nvmeio: the CUDA driver sees no device");
        }
        if (device < 0 || device >= count) {
            detail::throw_invalid("nvmeio: CUDA device " + std::to_string(device) +
                                  " asked for; the driver sees " + std::to_string(count));
        }
        check(driver_.device_get(&handle_, device), "cuDeviceGet");
        check(driver_.primary_retain(&context_, handle_), "cuDevicePrimaryCtxRetain");
        try {
            current guard(*this);
            check(driver_.stream_create(&stream_, 1), "cuStreamCreate");  // NON_BLOCKING
        } catch (...) {
            (void)driver_.primary_release(handle_);
            throw;
        }
    }
    cuda_copy_engine(const cuda_copy_engine&) = delete;
    cuda_copy_engine& operator=(const cuda_copy_engine&) = delete;
    /// Waits for the engine's copies, and lets go of its stream, events and context.
    ~cuda_copy_engine() {
        detach();
        if (driver_.push(context_) == 0) {
            (void)driver_.stream_destroy(stream_);
            cuda_driver::context popped = nullptr;
            (void)driver_.pop(&popped);
        }
        (void)driver_.primary_release(handle_);
    }

    /// The device index.
    [[nodiscard]] int device() const noexcept { return device_; }

    /// Page-locks the ring's memory and makes one event per slot.
    void attach(std::byte* memory, std::size_t slot_size, unsigned slots) {
        if (memory_ != nullptr) detail::throw_invalid("cuda_copy_engine: already serves a ring");
        current guard(*this);
        check(driver_.host_register(memory, slot_size * slots, 1), "cuMemHostRegister",
              slot_size * slots);  // PORTABLE
        memory_ = memory;
        try {
            for (unsigned s = 0; s < slots; ++s) {
                cuda_driver::event e = nullptr;
                check(driver_.event_create(&e, 2), "cuEventCreate");  // DISABLE_TIMING
                events_.push_back(e);
            }
        } catch (...) {
            forget_ring();
            throw;
        }
    }

    /// Waits for every copy started (recorded or not), destroys the events and unlocks the
    /// memory.
    void detach() noexcept {
        if (memory_ == nullptr) return;
        (void)wait_all();
        forget_ring();
    }

    /// Starts copying `n` bytes of a slot to device address `to`.
    void copy_from_slot(unsigned, std::uintptr_t to, const std::byte* from, std::size_t n) {
        current guard(*this);
        check(driver_.copy_to_device(to, from, n, stream_), "cuMemcpyHtoDAsync", n);
    }
    /// Starts copying `n` bytes at device address `from` into a slot.
    void copy_to_slot(unsigned, std::byte* to, std::uintptr_t from, std::size_t n) {
        current guard(*this);
        check(driver_.copy_to_host(to, from, n, stream_), "cuMemcpyDtoHAsync", n);
    }
    /// Marks the slot's copies started so far with its event.
    void record(unsigned slot) {
        current guard(*this);
        check(driver_.event_record(events_.at(slot), stream_), "cuEventRecord");
    }
    /// Blocks until the slot's marked copies completed; throws std::system_error if one failed.
    void wait(unsigned slot) {
        current guard(*this);
        check(driver_.event_synchronize(events_.at(slot)), "cuEventSynchronize");
    }
    /// Blocks until every copy started on the engine's stream has ended, recorded or not (a
    /// copy queued before a rejected call still runs); false if one failed.
    bool wait_all() noexcept {
        const bool pushed = driver_.push(context_) == 0;
        const bool synchronized = driver_.stream_synchronize(stream_) == 0;
        cuda_driver::context popped = nullptr;
        if (pushed) (void)driver_.pop(&popped);
        return pushed && synchronized;
    }
    /// `bytes` of device memory (for callers without a framework's allocator); free it with
    /// `free_device`. std::system_error when the device has too little.
    [[nodiscard]] std::uintptr_t allocate_device(std::size_t bytes) {
        require(driver_.allocate, "allocate (cuMemAlloc)");
        current guard(*this);
        cuda_driver::device_pointer p = 0;
        check(driver_.allocate(&p, bytes), "cuMemAlloc", bytes);
        return static_cast<std::uintptr_t>(p);
    }
    /// Frees memory from `allocate_device`.
    void free_device(std::uintptr_t memory) noexcept {
        if (driver_.free == nullptr || driver_.push(context_) != 0) return;
        (void)driver_.free(memory);
        cuda_driver::context popped = nullptr;
        (void)driver_.pop(&popped);
    }
    /// Copies `n` bytes at device address `from` to host memory `to` and waits (to check what
    /// a transfer left on the device).
    void copy_back(void* to, std::uintptr_t from, std::size_t n) {
        require(driver_.copy_back, "copy_back (cuMemcpyDtoH)");
        current guard(*this);
        check(driver_.copy_back(to, from, n), "cuMemcpyDtoH", n);
    }

    /// True when the slot's marked copies completed (a failed copy shows in `wait`).
    [[nodiscard]] bool ready(unsigned slot) {
        current guard(*this);
        return driver_.event_query(events_.at(slot)) != 600;  // CUDA_ERROR_NOT_READY
    }

  private:
    // The engine's context, current in this thread for one call.
    class current {
      public:
        explicit current(const cuda_copy_engine& engine) : engine_(engine) {
            engine_.check(engine_.driver_.push(engine_.context_), "cuCtxPushCurrent");
        }
        current(const current&) = delete;
        current& operator=(const current&) = delete;
        ~current() {
            cuda_driver::context popped = nullptr;
            (void)engine_.driver_.pop(&popped);
        }

      private:
        const cuda_copy_engine& engine_;
    };

    // The first entry of `d` the engine calls that is null (its name and the driver's), or
    // nullptr.
    static const char* first_missing_entry(const cuda_driver& d) noexcept {
        const std::pair<bool, const char*> entries[] = {
            {d.init != nullptr, "init (cuInit)"},
            {d.device_count != nullptr, "device_count (cuDeviceGetCount)"},
            {d.device_get != nullptr, "device_get (cuDeviceGet)"},
            {d.primary_retain != nullptr, "primary_retain (cuDevicePrimaryCtxRetain)"},
            {d.primary_release != nullptr, "primary_release (cuDevicePrimaryCtxRelease)"},
            {d.push != nullptr, "push (cuCtxPushCurrent)"},
            {d.pop != nullptr, "pop (cuCtxPopCurrent)"},
            {d.stream_create != nullptr, "stream_create (cuStreamCreate)"},
            {d.stream_destroy != nullptr, "stream_destroy (cuStreamDestroy)"},
            {d.stream_synchronize != nullptr, "stream_synchronize (cuStreamSynchronize)"},
            {d.event_create != nullptr, "event_create (cuEventCreate)"},
            {d.event_destroy != nullptr, "event_destroy (cuEventDestroy)"},
            {d.event_record != nullptr, "event_record (cuEventRecord)"},
            {d.event_synchronize != nullptr, "event_synchronize (cuEventSynchronize)"},
            {d.event_query != nullptr, "event_query (cuEventQuery)"},
            {d.host_register != nullptr, "host_register (cuMemHostRegister)"},
            {d.host_unregister != nullptr, "host_unregister (cuMemHostUnregister)"},
            {d.copy_to_device != nullptr, "copy_to_device (cuMemcpyHtoDAsync)"},
            {d.copy_to_host != nullptr, "copy_to_host (cuMemcpyDtoHAsync)"},
        };
        for (const auto& [present, name] : entries) {
            if (!present) return name;
        }
        return nullptr;
    }

    // A helper's entry, which the constructor does not require.
    template <class Function>
    static void require(Function* entry, const char* name) {
        if (entry == nullptr) {
            detail::throw_invalid(std::string("cuda_copy_engine: the driver table lacks ") + name);
        }
    }

    void check(int result, const char* call, std::size_t bytes = 0) const {
        if (result == 0) return;
        std::string what = std::string("nvmeio: ") + call;
        if (bytes != 0) what += " of " + std::to_string(bytes) + " bytes";
        throw std::system_error(
            std::error_code(result, cuda_category()),
            what + " on cuda:" + std::to_string(device_) + " failed (" + name_of(result) + ")");
    }

    std::string name_of(int result) const {
        const char* text = nullptr;
        if (driver_.error_name != nullptr && driver_.error_name(result, &text) == 0 &&
            text != nullptr) {
            return text;
        }
        return "CUDA error " + std::to_string(result);
    }

    // Destroys the events and unlocks the ring's memory.
    void forget_ring() noexcept {
        if (driver_.push(context_) == 0) {
            for (cuda_driver::event e : events_)
                (void)driver_.event_destroy(e);
            if (memory_ != nullptr) (void)driver_.host_unregister(memory_);
            cuda_driver::context popped = nullptr;
            (void)driver_.pop(&popped);
        }
        events_.clear();
        memory_ = nullptr;
    }

    cuda_driver driver_;
    int device_;
    int handle_ = 0;
    cuda_driver::context context_ = nullptr;
    cuda_driver::stream stream_ = nullptr;
    std::vector<cuda_driver::event> events_;
    std::byte* memory_ = nullptr;
};

NVMEIO_END_NAMESPACE
