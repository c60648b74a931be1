// nvmeio_torch._C: the Python face of handle.hpp. Everything here is argument checking and
// conversion at the boundary; every call that can block runs with the GIL released, and
// tensors are let go of only with the GIL held.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include <nvmeio/version.hpp>

#include "crc32.hpp"
#include "handle.hpp"
#include "mapped.hpp"
#include "pinned.hpp"
#include "ring_pool.hpp"
#include "staged.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

// A file argument: a path (str, bytes or os.PathLike), or an open descriptor (int) that is
// reopened through /proc/self/fd, never by name (file_source.hpp). Anything else (a bool too)
// is a TypeError.
namespace pybind11::detail {
template <>
struct type_caster<nvmeio_torch::file_source> {
    PYBIND11_TYPE_CASTER(nvmeio_torch::file_source, const_name("str | bytes | os.PathLike | int"));
    bool load(handle source, bool) {
        if (!PyLong_Check(source.ptr())) {
            object path = reinterpret_steal<object>(PyOS_FSPath(source.ptr()));
            if (!path) {
                PyErr_Clear();
                return false;
            }
            if (PyUnicode_Check(path.ptr())) {  // as os.fsencode: the file system's encoding
                path = reinterpret_steal<object>(PyUnicode_EncodeFSDefault(path.ptr()));
                if (!path) {
                    PyErr_Clear();
                    return false;
                }
            }
            value = nvmeio_torch::file_source::named(
                std::string(PyBytes_AS_STRING(path.ptr()),
                            static_cast<std::size_t>(PyBytes_GET_SIZE(path.ptr()))));
            return true;
        }
        if (PyBool_Check(source.ptr())) return false;
        int overflow = 0;
        const long fd = PyLong_AsLongAndOverflow(source.ptr(), &overflow);
        if (overflow != 0 || fd < std::numeric_limits<int>::min() ||
            fd > std::numeric_limits<int>::max()) {
            PyErr_Clear();
            return false;
        }
        value = nvmeio_torch::file_source::of_descriptor(static_cast<int>(fd));
        return true;
    }
};
}  // namespace pybind11::detail

namespace nvmeio_torch {
namespace {

// std::invalid_argument, named by `what()`, for a tensor whose bytes alone are not its value:
// sparse (any layout but strided), nested, or quantized (its scale lives elsewhere).
template <class Name>
void refuse_unmovable(const torch::Tensor& t, Name what) {
    if (t.is_nested() || t.layout() != c10::kStrided) {
        std::ostringstream layout;
        layout << t.layout();
        throw std::invalid_argument(what() + " is a " +
                                    (t.is_nested() ? std::string("nested") : layout.str()) +
                                    " tensor; nvmeio_torch moves the bytes of dense tensors");
    }
    if (t.is_quantized()) {
        throw std::invalid_argument(what() + " is quantized (" +
                                    std::string(c10::toString(t.scalar_type())) +
                                    "); move its int_repr() and keep its scale and zero point");
    }
}

// The bytes of `buffer` as a piece of a request: a contiguous CPU tensor (any dtype, any view).
// Messages start with the method and name the arguments as `tensor` and `offset_name` return
// (called only on failure, so that a batch of many tensors builds no strings).
template <class TensorName, class OffsetName>
nvmeio::batch_request piece_of(const torch::Tensor& buffer, std::int64_t offset, const char* method,
                               TensorName tensor, OffsetName offset_name) {
    const auto what = [&] { return std::string(method) + ": " + tensor(); };
    if (!buffer.defined()) throw std::invalid_argument(what() + " is an undefined tensor");
    refuse_unmovable(buffer, what);
    if (!buffer.is_cpu()) {
        throw std::invalid_argument(what() + " is on " + buffer.device().str() +
                                    "; this call moves CPU tensors (CUDA tensors go by file name, "
                                    "through a staging ring)");
    }
    if (!buffer.is_contiguous()) {
        throw std::invalid_argument(what() + " is not contiguous (call .contiguous() on it)");
    }
    if (offset < 0) {
        throw std::invalid_argument(std::string(method) + ": " + offset_name() +
                                    " must not be negative (got " + std::to_string(offset) + ")");
    }
    return {memory_of(buffer), static_cast<std::uint64_t>(offset)};
}

std::unique_ptr<request> make_request(nvmeio::operation op, const torch::Tensor& buffer,
                                      std::int64_t offset, bool validate, const char* method) {
    auto r = std::make_unique<request>();
    r->op = op;
    r->pieces.push_back(piece_of(
        buffer, offset, method, [] { return std::string("the buffer"); },
        [] { return std::string("file_offset"); }));
    r->tensors.push_back(buffer);
    check_memory(op, r->tensors, r->pieces, method, [](std::size_t) { return "the buffer"; });
    r->storages = storage_hold(r->tensors);
    r->validate = validate;
    return r;
}

// A batch: tensors[i] at offsets[i] of one file.
std::unique_ptr<request> make_batch(nvmeio::operation op, const std::vector<torch::Tensor>& tensors,
                                    const std::vector<std::int64_t>& offsets, const char* method) {
    if (tensors.size() != offsets.size()) {
        throw std::invalid_argument(std::string(method) + ": " + std::to_string(tensors.size()) +
                                    " tensors but " + std::to_string(offsets.size()) + " offsets");
    }
    auto r = std::make_unique<request>();
    r->op = op;
    r->batch = true;
    r->pieces.reserve(tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        r->pieces.push_back(piece_of(
            tensors[i], offsets[i], method, [i] { return "tensor " + std::to_string(i); },
            [i] { return "offsets[" + std::to_string(i) + "]"; }));
    }
    r->tensors = tensors;
    check_memory(op, r->tensors, r->pieces, method,
                 [](std::size_t i) { return "tensor " + std::to_string(i); });
    r->storages = storage_hold(r->tensors);
    return r;
}

// A Python handle: the C++ handle, with the GIL released where it blocks.
class py_handle {
  public:
    explicit py_handle(handle_settings s) : handle_(std::move(s)) {}

    ~py_handle() {
        request_list released;
        {
            py::gil_scoped_release unlocked;
            handle_.close(released);
        }
    }  // `released` (the tensors) goes here, with the GIL held

    const handle_settings& settings() const { return handle_.settings(); }

    // Opens the file (GIL released: an open can block) and queues or runs the request. Locals
    // go in reverse order: `unlocked` takes the GIL back before `released` lets go of tensors.
    int start(std::unique_ptr<request> r, const file_source& source, bool async) {
        handle_.require_usable();  // before the open, which may create the file
        request_list released;
        py::gil_scoped_release unlocked;
        r->file = open_for(source, r->op, r->pieces, handle_.settings().block_size);
        if (async) {
            handle_.submit(std::move(r));
            return 0;
        }
        return handle_.run(std::move(r), released);
    }

    int wait() {
        request_list released;
        py::gil_scoped_release unlocked;
        return handle_.wait(released) + staged_done_.exchange(0);
    }

    // Tensors on a CUDA device (CPU ones beside them): through a staging ring of that device,
    // in the call itself, after the requests queued before it have finished; an async call
    // returns 0 and leaves those and itself for the next wait() to count.
    int start_staged(nvmeio::operation op, const std::vector<torch::Tensor>& tensors,
                     const std::vector<std::int64_t>& offsets, const file_source& source,
                     bool async, const char* method) {
        handle_.require_usable();
        // Released after the ring's copies (declared before `unlocked`, so with the GIL).
        const storage_hold held(tensors);
        int device = -1;
        std::vector<nvmeio::staged_range> ranges;
        for (std::size_t i = 0; i < tensors.size(); ++i) {
            const torch::Tensor& t = tensors[i];
            const std::string what = std::string(method) + ": tensor " + std::to_string(i);
            if (!t.defined()) throw std::invalid_argument(what + " is an undefined tensor");
            refuse_unmovable(t, [&] { return what; });
            if (!t.is_contiguous()) {
                throw std::invalid_argument(what + " is not contiguous (call .contiguous() on it)");
            }
            if (offsets[i] < 0) {
                throw std::invalid_argument(what + ": its offset must not be negative (got " +
                                            std::to_string(offsets[i]) + ")");
            }
            if (t.is_cuda()) {
                if (device >= 0 && device != t.get_device()) {
                    throw std::invalid_argument(what + " is on " + t.device().str() +
                                                ", another tensor on cuda:" +
                                                std::to_string(device) + ": one device a call");
                }
                device = t.get_device();
            } else if (!t.is_cpu()) {
                throw std::invalid_argument(what + " is on " + t.device().str() +
                                            "; nvmeio_torch moves CPU and CUDA tensors");
            }
            const std::size_t n = t.nbytes();
            ranges.push_back({0, static_cast<std::uint64_t>(offsets[i]), n,
                              n == 0 ? 0 : reinterpret_cast<std::uintptr_t>(t.data_ptr()),
                              t.is_cpu()});
        }
        // The tensors were written, or allocated, on torch's stream; the ring copies on its own.
        py::module_::import("torch").attr("cuda").attr("current_stream")(device).attr(
            "synchronize")();
        // Requests queued before this one finish first (so no queued write of the same bytes
        // runs beside the ring's), and count towards this call's or the next wait()'s number.
        int earlier = 0;
        request_list released;
        {
            py::gil_scoped_release unlocked;
            earlier = handle_.wait(released) + staged_done_.exchange(0);
            std::lock_guard<std::mutex> lock(staged_mutex_);
            ring_pool& pool = ring_pool::process();
            const ring_lease ring(pool, pool.take(device, 0));
            auto job = ring->start(staged_context(), op, {source}, std::move(ranges), false);
            while (job->pending())
                (void)job->advance();
        }
        if (async) {
            staged_done_ += earlier + 1;
            return 0;
        }
        return earlier + 1;
    }

  private:
    // The context the handle lends the pool's rings: its queue depth and block size, and as
    // many workers (windows in flight) as its intra-op parallelism, at least two.
    nvmeio::async_context& staged_context() {
        if (!staged_context_) {
            const handle_settings& s = handle_.settings();
            staged_context_ = std::make_unique<nvmeio::async_context>(nvmeio::async_options{
                std::max(2u, s.intra_op_parallelism), {s.queue_depth, s.block_size}});
        }
        return *staged_context_;
    }

    aio_handle handle_;
    std::atomic<int> staged_done_{0};
    std::mutex staged_mutex_;  // one staged call at a time on the handle
    std::unique_ptr<nvmeio::async_context> staged_context_;  // made at the first staged call
};

bool any_cuda(const std::vector<torch::Tensor>& tensors) {
    for (const torch::Tensor& t : tensors)
        if (t.defined() && t.is_cuda()) return true;
    return false;
}

// io_error and the other system errors become OSError(errno, message, filename), which Python
// turns into FileNotFoundError, PermissionError... by errno.
void translate(std::exception_ptr error) {
    try {
        if (error) std::rethrow_exception(error);
    } catch (const nvmeio::io_error& e) {
        py::object filename = e.path().empty() ? py::none() : py::object(py::str(e.path()));
        PyErr_SetObject(PyExc_OSError,
                        py::make_tuple(e.code().value(), std::string(e.what()), filename).ptr());
    } catch (const std::system_error& e) {
        // A CUDA driver result is no errno: RuntimeError, as torch raises for CUDA errors.
        if (e.code().category() == nvmeio::cuda_category()) {
            PyErr_SetString(PyExc_RuntimeError, e.what());
            return;
        }
        PyErr_SetObject(PyExc_OSError, py::make_tuple(e.code().value(), e.what()).ptr());
    } catch (const std::logic_error& e) {
        if (dynamic_cast<const std::invalid_argument*>(&e) != nullptr) throw;
        PyErr_SetString(PyExc_RuntimeError, e.what());
    }
}

handle_settings settings_from(std::int64_t block_size, std::int64_t queue_depth, bool single_submit,
                              bool overlap_events, std::int64_t intra_op_parallelism,
                              std::string backend) {
    auto positive = [](const char* name, std::int64_t value, std::int64_t most) {
        if (value < 1 || value > most) {
            throw std::invalid_argument(std::string("aio_handle: ") + name +
                                        " must be between 1 and " + std::to_string(most) +
                                        " (got " + std::to_string(value) + ")");
        }
    };
    positive("block_size", block_size, std::int64_t{1} << 40);
    positive("queue_depth", queue_depth, 65536);
    positive("intra_op_parallelism", intra_op_parallelism, 1024);
    handle_settings s;
    s.block_size = static_cast<std::size_t>(block_size);
    s.queue_depth = static_cast<unsigned>(queue_depth);
    s.single_submit = single_submit;
    s.overlap_events = overlap_events;
    s.intra_op_parallelism = static_cast<unsigned>(intra_op_parallelism);
    s.backend = std::move(backend);
    return s;
}

// DeepSpeed's module functions aio_read/aio_write: one transfer on a handle of its own.
int one_shot(nvmeio::operation op, const torch::Tensor& buffer, const std::string& filename,
             std::int64_t block_size, std::int64_t queue_depth, bool single_submit,
             bool overlap_events, bool validate) {
    py_handle h(settings_from(block_size, queue_depth, single_submit, overlap_events, 1, "libaio"));
    h.start(make_request(op, buffer, 0, validate,
                         op == nvmeio::operation::read ? "aio_read" : "aio_write"),
            file_source::named(filename), false);
    return 0;
}

void refuse_validate(bool validate, const char* method) {
    if (validate) {
        throw std::invalid_argument(std::string(method) +
                                    ": validate compares CPU tensors with the file; pass "
                                    "validate=False for a CUDA tensor");
    }
}

// DeepSpeed's read and write methods, in its three shapes: (buffer, filename, validate,
// file_offset) returning 0; (..., validate, async, file_offset) returning DeepSpeed's count;
// and the sync_/async_ (buffer, filename, file_offset) forms.
void def_transfers(py::class_<py_handle>& c) {
    for (const nvmeio::operation op : {nvmeio::operation::read, nvmeio::operation::write}) {
        const bool read = op == nvmeio::operation::read;
        const char* plain = read ? "read" : "write";
        c.def(
            plain,
            [op, plain](py_handle& h, const torch::Tensor& buffer, const std::string& filename,
                        bool validate, std::int64_t file_offset) {
                if (buffer.defined() && buffer.is_cuda()) {
                    refuse_validate(validate, plain);
                    h.start_staged(op, {buffer}, {file_offset}, file_source::named(filename), false,
                                   plain);
                    return 0;
                }
                h.start(make_request(op, buffer, file_offset, validate, plain),
                        file_source::named(filename), false);
                return 0;
            },
            "buffer"_a, "filename"_a, "validate"_a, "file_offset"_a = 0);
        const char* either = read ? "pread" : "pwrite";
        c.def(
            either,
            [op, either](py_handle& h, const torch::Tensor& buffer, const std::string& filename,
                         bool validate, bool async, std::int64_t file_offset) {
                if (buffer.defined() && buffer.is_cuda()) {
                    refuse_validate(validate, either);
                    return h.start_staged(op, {buffer}, {file_offset}, file_source::named(filename),
                                          async, either);
                }
                return h.start(make_request(op, buffer, file_offset, validate, either),
                               file_source::named(filename), async);
            },
            "buffer"_a, "filename"_a, "validate"_a, "async"_a, "file_offset"_a = 0);
        for (const bool async : {false, true}) {
            const char* name = async ? (read ? "async_pread" : "async_pwrite")
                                     : (read ? "sync_pread" : "sync_pwrite");
            c.def(
                name,
                [op, async, name](py_handle& h, const torch::Tensor& buffer,
                                  const file_source& filename, std::int64_t file_offset) {
                    if (buffer.defined() && buffer.is_cuda()) {
                        return h.start_staged(op, {buffer}, {file_offset}, filename, async, name);
                    }
                    return h.start(make_request(op, buffer, file_offset, false, name), filename,
                                   async);
                },
                "buffer"_a, "filename"_a, "file_offset"_a = 0);
        }
        for (const bool async : {false, true}) {
            const char* name = async ? (read ? "async_pread_batch" : "async_pwrite_batch")
                                     : (read ? "sync_pread_batch" : "sync_pwrite_batch");
            c.def(
                name,
                [op, async, name](py_handle& h, const std::vector<torch::Tensor>& tensors,
                                  const file_source& filename,
                                  const std::vector<std::int64_t>& offsets) {
                    if (any_cuda(tensors)) {
                        if (tensors.size() != offsets.size()) {
                            throw std::invalid_argument(
                                std::string(name) + ": " + std::to_string(tensors.size()) +
                                " tensors but " + std::to_string(offsets.size()) + " offsets");
                        }
                        return h.start_staged(op, tensors, offsets, filename, async, name);
                    }
                    return h.start(make_batch(op, tensors, offsets, name), filename, async);
                },
                "tensors"_a, "filename"_a, "offsets"_a,
                async ? "Queues the batch (one request to wait()); returns 0."
                      : "Moves every tensor at its offset in one call, waiting for it and every "
                        "request "
                        "queued before it; returns how many requests that was (the batch is one).");
        }
    }
}

// DeepSpeed's pin_handle: the locked-tensor methods alone.
struct pin_handle {};

// new_cpu_locked_tensor, free_cpu_locked_tensor, is_pinned: the process-wide registry's, on
// both handle classes.
template <class Class>
void def_locked_tensors(Class& c) {
    using self = typename Class::type;
    c.def(
         "new_cpu_locked_tensor",
         [](self&, std::int64_t num_elem, const torch::Tensor& example_tensor) {
             const c10::ScalarType type = example_tensor.scalar_type();
             py::gil_scoped_release unlocked;  // locking a large buffer takes a while
             return pinned_registry::shared().allocate(num_elem, type);
         },
         "num_elem"_a, "example_tensor"_a)
        .def(
            "free_cpu_locked_tensor",
            [](self&, const torch::Tensor& tensor) {
                return pinned_registry::shared().release(tensor);
            },
            "tensor"_a)
        .def(
            "is_pinned",
            [](self&, const torch::Tensor& buffer) {
                return (buffer.is_cpu() && buffer.is_pinned()) ||
                       pinned_registry::shared().owns(buffer);
            },
            "buffer"_a)
        .def("_locked_tensors", [](self&) { return pinned_registry::shared().live(); })
        .def("_carries_pin_record", [](self&, const torch::Tensor& buffer) {
            return buffer.is_cpu() && buffer.is_contiguous() && memory_of(buffer).pins() != nullptr;
        });
}

// A staged job for Python: the job, and what Python must keep alive while it runs (the tensors
// its ranges point into), declared first so that it goes last, after the job has waited for its
// copies. One thread at a time: a second gets a RuntimeError.
struct py_staged_job {
    py::object keep;
    storage_hold held;  // the storages of the tensors in `keep`
    std::unique_ptr<staged_job> job;
    std::atomic<bool> busy{false};

    ~py_staged_job() {
        if (job) {
            py::gil_scoped_release unlocked;  // waits for copies in flight
            job.reset();
        }
    }

    // The job, marked in use for the guard's life.
    struct use {
        explicit use(py_staged_job& owner) : owner(owner) {
            if (owner.busy.exchange(true)) {
                throw std::logic_error("staged_job: in use by another thread");
            }
        }
        use(const use&) = delete;
        use& operator=(const use&) = delete;
        ~use() { owner.busy = false; }
        py_staged_job& owner;
    };

    std::vector<std::size_t> advance() {
        use guard(*this);
        if (!job) throw std::logic_error("staged_job: closed");
        try {
            py::gil_scoped_release unlocked;
            return job->advance();
        } catch (const nvmeio::staged_error& e) {
            // OSError(errno, message, filename), with the range the failed bytes belong to.
            py::object error =
                py::module_::import("builtins")
                    .attr("OSError")(e.code().value(), std::string(e.what()), e.path());
            error.attr("range") = e.range();
            PyErr_SetObject(PyExc_OSError, error.ptr());
            throw py::error_already_set();
        }
    }

    void close() {
        use guard(*this);
        std::unique_ptr<staged_job> ending = std::move(job);
        {
            py::gil_scoped_release unlocked;  // waits for copies in flight
            ending.reset();
        }
        held.release();
        keep = py::none();
    }
};

std::vector<nvmeio::staged_range> staged_ranges(const std::vector<std::int64_t>& files,
                                                const std::vector<std::int64_t>& offsets,
                                                const std::vector<std::int64_t>& lengths,
                                                const std::vector<std::uint64_t>& addresses,
                                                const std::vector<bool>& on_host) {
    const std::size_t n = files.size();
    if (offsets.size() != n || lengths.size() != n || addresses.size() != n ||
        on_host.size() != n) {
        throw std::invalid_argument(
            "staging_ring.start: files, offsets, lengths, addresses and "
            "on_host must be of one length");
    }
    std::vector<nvmeio::staged_range> ranges(n);
    for (std::size_t i = 0; i < n; ++i) {
        if (files[i] < 0 || offsets[i] < 0 || lengths[i] < 0) {
            throw std::invalid_argument("staging_ring.start: range " + std::to_string(i) +
                                        " has a negative file, offset or length");
        }
        ranges[i] = {static_cast<std::size_t>(files[i]), static_cast<std::uint64_t>(offsets[i]),
                     static_cast<std::size_t>(lengths[i]),
                     static_cast<std::uintptr_t>(addresses[i]), static_cast<bool>(on_host[i])};
    }
    return ranges;
}

void def_staged(py::module_& m) {
    py::class_<py_staged_job>(m, "staged_job")
        .def("advance", &py_staged_job::advance,
             "Moves one slot's bytes; returns the ranges completed since the last call.")
        .def_property_readonly("pending",
                               [](const py_staged_job& j) { return j.job && j.job->pending(); })
        .def_property_readonly("outcome",
                               [](const py_staged_job& j) {
                                   if (!j.job) throw std::logic_error("staged_job: closed");
                                   const nvmeio::staged_outcome o = j.job->outcome();
                                   return py::dict("file_bytes"_a = o.file_bytes,
                                                   "windows"_a = o.windows, "copies"_a = o.copies);
                               })
        .def_property_readonly("crcs",
                               [](const py_staged_job& j) {
                                   if (!j.job) throw std::logic_error("staged_job: closed");
                                   return j.job->crcs();
                               })
        .def("close", &py_staged_job::close,
             "Waits for copies in flight and lets the ring serve another job.");

    py::class_<staging_ring_base>(m, "staging_ring")
        .def(py::init([](int device, std::int64_t slots, std::int64_t slot_size) {
                 // Only what the conversion to unsigned needs; the ring checks the rest.
                 const auto in_range = [](const char* name, std::int64_t value, std::int64_t most) {
                     if (value < 0 || value > most) {
                         throw std::invalid_argument(
                             std::string("staging_ring: ") + name + " must be between 0 and " +
                             std::to_string(most) + " (got " + std::to_string(value) + ")");
                     }
                     return value;
                 };
                 ring_settings s;
                 s.device = device;
                 s.ring.slots = static_cast<unsigned>(in_range("slots", slots, 1 << 16));
                 s.ring.slot_size = static_cast<std::size_t>(
                     in_range("slot_size", slot_size, std::int64_t{1} << 40));
                 py::gil_scoped_release unlocked;  // page-locking the slots takes a while
                 return make_staging_ring(s);
             }),
             "device"_a = -1, "slots"_a = nvmeio::ring_options{}.slots,
             "slot_size"_a = nvmeio::ring_options{}.slot_size,
             "A ring of its own (not the pool's); its jobs run on the pool's context.")
        .def_property_readonly("device",
                               [](const staging_ring_base& r) { return r.settings().device; })
        .def_property_readonly("bytes", &staging_ring_base::bytes)
        .def_property_readonly("slots",
                               [](const staging_ring_base& r) { return r.settings().ring.slots; })
        .def_property_readonly(
            "slot_size", [](const staging_ring_base& r) { return r.settings().ring.slot_size; })
        .def(
            "start",
            [](staging_ring_base& ring, const std::string& op,
               const std::vector<file_source>& paths, const std::vector<std::int64_t>& files,
               const std::vector<std::int64_t>& offsets, const std::vector<std::int64_t>& lengths,
               const std::vector<std::uint64_t>& addresses, const std::vector<bool>& on_host,
               bool checksum, py::object keep) {
                if (op != "read" && op != "write") {
                    throw std::invalid_argument(
                        "staging_ring.start: op must be 'read' or "
                        "'write', not '" +
                        op + "'");
                }
                auto ranges = staged_ranges(files, offsets, lengths, addresses, on_host);
                auto job = std::make_unique<py_staged_job>();
                // The tensors kept: their storages stay put until the job closes.
                std::vector<torch::Tensor> tensors;
                if (THPVariable_Check(keep.ptr())) {
                    tensors.push_back(THPVariable_Unpack(keep.ptr()));
                } else if (!keep.is_none()) {
                    if (!py::isinstance<py::list>(keep) && !py::isinstance<py::tuple>(keep)) {
                        throw py::type_error(
                            "staging_ring.start: keep must be a tensor or a list of tensors");
                    }
                    for (const py::handle item : keep) {
                        if (!THPVariable_Check(item.ptr())) {
                            throw py::type_error(
                                "staging_ring.start: keep must be a tensor or a list of tensors");
                        }
                        tensors.push_back(THPVariable_Unpack(item.ptr()));
                    }
                }
                job->held = storage_hold(tensors);
                {
                    py::gil_scoped_release unlocked;  // opening files can block
                    job->job = ring.start(
                        ring_pool::process().context(),
                        op == "read" ? nvmeio::operation::read : nvmeio::operation::write, paths,
                        std::move(ranges), checksum);
                }
                job->keep = std::move(keep);
                return job;
            },
            py::keep_alive<0, 1>(), "op"_a, "paths"_a, "files"_a, "offsets"_a, "lengths"_a,
            "addresses"_a, "on_host"_a, "checksum"_a = false, "keep"_a = py::none(),
            "Starts a staged read or write of ranges (files[i] indexes paths, each a path or an "
            "open descriptor); keep (a tensor or a list of them) is held until the job closes, "
            "and the tensors' storages stay put.");

    py::class_<ring_lease>(m, "ring_lease")
        .def_property_readonly(
            "ring", [](ring_lease& lease) -> staging_ring_base& { return *lease; },
            py::return_value_policy::reference_internal,
            "The ring, the pool's until the lease (and every job of the ring) is gone.");
    m.def(
        "take_ring",
        [](int device, std::int64_t max_bytes) {
            if (max_bytes < 0) {
                throw std::invalid_argument("take_ring: max_bytes must not be negative (got " +
                                            std::to_string(max_bytes) + ")");
            }
            ring_pool& pool = ring_pool::process();
            py::gil_scoped_release unlocked;  // a new ring page-locks its slots
            return std::make_unique<ring_lease>(
                pool, pool.take(device, static_cast<std::size_t>(max_bytes)));
        },
        "device"_a, "max_bytes"_a = 0,
        "A ring of the process's pool for device (-1: the host's engine) within max_bytes of "
        "host memory (0: nvmeio's default ring), given back when the lease is gone.");
    m.def(
        "ring_shape",
        [](std::int64_t max_bytes) {
            if (max_bytes < 0) throw std::invalid_argument("ring_shape: max_bytes is negative");
            const nvmeio::ring_options shape = ring_shape(static_cast<std::size_t>(max_bytes));
            return py::make_tuple(shape.slots, shape.slot_size);
        },
        "max_bytes"_a = 0, "(slots, slot size) of the pool's ring within max_bytes (0: none).");
    m.def(
        "release_staging_rings",
        [] {
            py::gil_scoped_release unlocked;
            ring_pool::process().release_idle();
        },
        "Frees the pool's kept rings (their page-locked memory).");
    m.def(
        "idle_ring_bytes", [] { return ring_pool::process().idle_bytes(); },
        "Bytes of the rings the pool keeps.");
    m.def("forget_staging_rings", &ring_pool::forget,
          "In a child after fork: an empty pool, the parent's rings left untouched.");
}

}  // namespace
}  // namespace nvmeio_torch

PYBIND11_MODULE(_C, m) {
    using nvmeio::operation;
    using nvmeio_torch::py_handle;
    m.doc() = "nvmeio_torch's extension: DeepSpeed's aio_handle over nvmeio";
    m.attr("nvmeio_version") = std::to_string(NVMEIO_VERSION_MAJOR) + "." +
                               std::to_string(NVMEIO_VERSION_MINOR) + "." +
                               std::to_string(NVMEIO_VERSION_PATCH);
    m.attr("io_uring_available") = py::bool_(NVMEIO_HAS_IO_URING != 0);
    py::register_exception_translator(&nvmeio_torch::translate);

    m.def(
        "aio_read",
        [](const torch::Tensor& buffer, const std::string& filename, std::int64_t block_size,
           std::int64_t queue_depth, bool single_submit, bool overlap_events, bool validate) {
            return nvmeio_torch::one_shot(operation::read, buffer, filename, block_size,
                                          queue_depth, single_submit, overlap_events, validate);
        },
        "Reads the buffer's bytes from the start of the file; returns 0.", "buffer"_a, "filename"_a,
        "block_size"_a, "queue_depth"_a, "single_submit"_a, "overlap_events"_a, "validate"_a);
    m.def(
        "aio_write",
        [](const torch::Tensor& buffer, const std::string& filename, std::int64_t block_size,
           std::int64_t queue_depth, bool single_submit, bool overlap_events, bool validate) {
            return nvmeio_torch::one_shot(operation::write, buffer, filename, block_size,
                                          queue_depth, single_submit, overlap_events, validate);
        },
        "Writes the buffer at the start of the file (never truncating it); returns 0.", "buffer"_a,
        "filename"_a, "block_size"_a, "queue_depth"_a, "single_submit"_a, "overlap_events"_a,
        "validate"_a);
    m.def(
        "aligned_tensor",
        [](std::int64_t nbytes, bool lock) {
            py::gil_scoped_release unlocked;  // locking a large buffer takes a while
            return nvmeio_torch::aligned_tensor(nbytes, lock);
        },
        "A uint8 tensor of nbytes bytes over fresh 4096-aligned memory that it owns (locked "
        "where lock asks and the kernel allows).",
        "nbytes"_a, "lock"_a = false);
    m.def("own_storage", &nvmeio_torch::own_storage,
          "A uint8 tensor over bytes [offset, offset + length) of a contiguous CPU tensor, with a "
          "storage of exactly those bytes (not resizable) that keeps the tensor's alive; no copy.",
          "tensor"_a, "offset"_a, "length"_a);
    m.def(
        "populate",
        [](const torch::Tensor& tensor, std::int64_t offset, std::int64_t length) {
            py::gil_scoped_release unlocked;  // loaders run it from helper threads
            return nvmeio_torch::populate(tensor, offset, length);
        },
        "Brings bytes [offset, offset + length) of a tensor from aligned_tensor into use for "
        "writing, without changing them (MADV_POPULATE_WRITE); False where the kernel cannot.",
        "tensor"_a, "offset"_a, "length"_a);
    m.def(
        "crc32",
        [](py::object data, const py::int_& start) {
            // As zlib.crc32: any integer, of which the low 32 bits count.
            const auto value =
                static_cast<std::uint32_t>(PyLong_AsUnsignedLongLongMask(start.ptr()));
            if (PyErr_Occurred() != nullptr) throw py::error_already_set();
            Py_buffer view;
            if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
                throw py::error_already_set();
            }
            const std::unique_ptr<Py_buffer, void (*)(Py_buffer*)> release(&view, PyBuffer_Release);
            py::gil_scoped_release unlocked;
            return nvmeio_torch::crc32::compute(value, view.buf,
                                                static_cast<std::size_t>(view.len));
        },
        "The CRC-32 of a C-contiguous buffer's bytes continuing value, as zlib.crc32(data, "
        "value); the GIL is released while it runs.",
        "data"_a, "value"_a = py::int_(0));
    m.attr("crc32_folds") = nvmeio_torch::crc32::has_fold();
    m.def(
        "deepspeed_memcpy",
        [](torch::Tensor& dest, const torch::Tensor& src) {
            if (dest.nbytes() != src.nbytes()) {
                throw std::invalid_argument("deepspeed_memcpy: dest holds " +
                                            std::to_string(dest.nbytes()) + " bytes, src " +
                                            std::to_string(src.nbytes()));
            }
            py::gil_scoped_release unlocked;
            dest.copy_(src);
            return 0;
        },
        "Copies src into dest (same number of bytes); returns 0.", "dest"_a, "src"_a);

    py::class_<py_handle> handle(m, "aio_handle");
    handle
        .def(py::init([](std::int64_t block_size, std::int64_t queue_depth, bool single_submit,
                         bool overlap_events, std::int64_t intra_op_parallelism,
                         std::string backend) {
                 auto s = nvmeio_torch::settings_from(block_size, queue_depth, single_submit,
                                                      overlap_events, intra_op_parallelism,
                                                      std::move(backend));
                 py::gil_scoped_release unlocked;  // io_setup and thread start can take a while
                 return std::make_unique<py_handle>(std::move(s));
             }),
             "block_size"_a = 1 << 20, "queue_depth"_a = 128, "single_submit"_a = false,
             "overlap_events"_a = false, "intra_op_parallelism"_a = 1, py::kw_only(),
             "backend"_a = "libaio")
        .def("get_block_size",
             [](const py_handle& h) { return static_cast<std::int64_t>(h.settings().block_size); })
        .def("get_queue_depth", [](const py_handle& h) { return h.settings().queue_depth; })
        .def("get_single_submit", [](const py_handle& h) { return h.settings().single_submit; })
        .def("get_overlap_events", [](const py_handle& h) { return h.settings().overlap_events; })
        .def("get_intra_op_parallelism",
             [](const py_handle& h) { return h.settings().intra_op_parallelism; })
        .def("get_alignment",
             [](const py_handle& h) { return 512 * h.settings().intra_op_parallelism; })
        .def("get_backend", [](const py_handle& h) { return h.settings().backend; })
        .def("wait", &py_handle::wait,
             "Waits for every pending request; returns how many (0 when none). Raises the first "
             "failure after all have finished.")
        .def(
            "async_pwrite",  // DeepSpeed's descriptor form, keyword `fd` included
            [](py_handle& h, const torch::Tensor& buffer, int fd, std::int64_t file_offset) {
                if (buffer.defined() && buffer.is_cuda()) {
                    return h.start_staged(operation::write, {buffer}, {file_offset},
                                          nvmeio_torch::file_source::of_descriptor(fd), true,
                                          "async_pwrite");
                }
                return h.start(nvmeio_torch::make_request(operation::write, buffer, file_offset,
                                                          false, "async_pwrite"),
                               nvmeio_torch::file_source::of_descriptor(fd), true);
            },
            "buffer"_a, "fd"_a, "file_offset"_a = 0);
    nvmeio_torch::def_transfers(handle);
    nvmeio_torch::def_locked_tensors(handle);

    nvmeio_torch::def_staged(m);

    // DeepSpeed's pin_memory op: the locked tensors without I/O.
    py::class_<nvmeio_torch::pin_handle> pin(m, "pin_handle");
    pin.def(py::init<>());
    nvmeio_torch::def_locked_tensors(pin);
}
