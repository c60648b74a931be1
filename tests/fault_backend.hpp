#pragma once
// A test-only Backend policy that wraps a real one and injects the failures a kernel can produce,
// on a schedule or at random from a seed. The library never sees it: tests instantiate
// `basic_aio_context<fault_backend<libaio_backend>>` and pass a fault_plan after the options.
// Contexts that a parallel or async context creates get no plan: they start disarmed and are
// armed through the registry of live backends (`fault_backend<Inner>::each`).
// With `fault_plan::late_completions`, a request uses its memory as late as a kernel may: until
// its completion is reaped, or the backend is destroyed (io_destroy waits for it).

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nvmeio/backend/request.hpp>
#include <nvmeio/file.hpp>

namespace nvmeio_test {

// What goes wrong. Each kind has its own count of opportunities (calls or events it could hit).
enum class fault {
    partial_submit,   // io_submit accepts fewer than asked (possibly none, with no error)
    submit_eagain,    // io_submit returns -EAGAIN and accepts nothing
    submit_error,     // io_submit returns -EINVAL and accepts nothing (a hard error)
    reap_eintr,       // io_getevents returns -EINTR and reaps nothing
    reap_error,       // io_getevents returns -EFAULT and reaps nothing (a hard error)
    short_result,     // an event reports fewer bytes than were asked (at least 1)
    event_eagain,     // an event reports -EAGAIN (transient: the range must be asked again)
    event_ecanceled,  // an event reports -ECANCELED (io_uring under a signal storm; transient)
    event_eio,        // an event reports -EIO
    write_enospc,     // a write event reports -ENOSPC
    write_zero,       // a write event reports 0 bytes (the device accepted nothing)
    over_result,      // an event reports more bytes than were asked (a broken driver)
    count_            // not a fault: the number of kinds
};

inline const char* to_string(fault f) {
    switch (f) {
        case fault::partial_submit:
            return "partial_submit";
        case fault::submit_eagain:
            return "submit_eagain";
        case fault::submit_error:
            return "submit_error";
        case fault::reap_eintr:
            return "reap_eintr";
        case fault::reap_error:
            return "reap_error";
        case fault::short_result:
            return "short_result";
        case fault::event_eagain:
            return "event_eagain";
        case fault::event_ecanceled:
            return "event_ecanceled";
        case fault::event_eio:
            return "event_eio";
        case fault::write_enospc:
            return "write_enospc";
        case fault::write_zero:
            return "write_zero";
        case fault::over_result:
            return "over_result";
        case fault::count_:
            break;
    }
    return "?";
}

// Faults after which a transfer must still complete with exact bytes.
inline const std::vector<fault>& recoverable_faults() {
    static const std::vector<fault> kinds = {fault::partial_submit, fault::submit_eagain,
                                             fault::reap_eintr,     fault::short_result,
                                             fault::event_eagain,   fault::event_ecanceled};
    return kinds;
}

// Faults that must surface as an io_error naming the failed request.
inline const std::vector<fault>& fatal_faults() {
    static const std::vector<fault> kinds = {fault::event_eio, fault::write_enospc,
                                             fault::write_zero, fault::submit_error,
                                             fault::over_result};
    return kinds;
}

inline bool applies_to_reads(fault f) {
    return f != fault::write_enospc && f != fault::write_zero;
}

// When faults strike. With a non-empty `schedule`, a kind strikes at exactly those (0-based)
// opportunities of its own; otherwise each opportunity strikes with `probability`, drawn from a
// generator seeded with `seed`. At most `max_faults` strike in all.
struct fault_plan {
    std::vector<fault> kinds;
    std::vector<std::uint64_t> schedule;
    double probability = 0.0;
    std::uint64_t seed = 1;
    std::uint64_t max_faults = std::numeric_limits<std::uint64_t>::max();
    // A request's memory stays the kernel's until its completion is reaped: a read's bytes land
    // in it then (the kernel reads into a bounce of the backend's until then), and a write's
    // bytes are taken from it again then. So memory freed or reused while a request may still
    // be in flight (a stray, left by a failed reap) is caught: by ASan, or as wrong bytes.
    // Requests still in flight when the backend is destroyed complete there, as io_destroy
    // waits for them (destroy a ring's on the thread it serves). Not a fault: it stays on
    // through disarm().
    bool late_completions = false;
};

// The last request a fault struck, so a test can check what the error names.
struct struck_request {
    fault kind = fault::event_eio;
    nvmeio::operation op = nvmeio::operation::read;
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
};

template <class Inner>
class fault_backend {
  public:
    static constexpr const char* name = "fault";

    fault_backend(unsigned queue_depth, fault_plan plan)
        : inner_(queue_depth), plan_(std::move(plan)), random_(plan_.seed) {
        std::lock_guard<std::mutex> lock(registry_mutex());
        registry().push_back(this);
    }
    explicit fault_backend(unsigned queue_depth) : fault_backend(queue_depth, fault_plan{}) {}

    fault_backend(const fault_backend&) = delete;
    fault_backend& operator=(const fault_backend&) = delete;
    ~fault_backend() {
        complete_the_rest();
        std::lock_guard<std::mutex> lock(registry_mutex());
        auto& all = registry();
        for (std::size_t i = 0; i < all.size(); ++i) {
            if (all[i] == this) {
                all.erase(all.begin() + static_cast<std::ptrdiff_t>(i));
                break;
            }
        }
    }

    // Calls f(backend) for every live fault backend over Inner. Only between transfers: the
    // pools' job queues order these calls before and after the workers' use.
    template <class F>
    static void each(F&& f) {
        std::lock_guard<std::mutex> lock(registry_mutex());
        for (fault_backend* b : registry())
            f(*b);
    }

    int submit(const nvmeio::io_request* requests, std::size_t count) noexcept {
        if (count == 0) return inner_.submit(requests, count);
        if (strikes(fault::submit_eagain)) return note(fault::submit_eagain, requests[0], -EAGAIN);
        if (strikes(fault::submit_error)) return note(fault::submit_error, requests[0], -EINVAL);
        std::size_t allowed = count;
        if (strikes(fault::partial_submit)) {
            allowed = static_cast<std::size_t>(random_() % count);  // 0 .. count-1
            note(fault::partial_submit, requests[allowed], 0);
            if (allowed == 0) return 0;
        }
        if (!plan_.late_completions) {
            const int accepted = inner_.submit(requests, allowed);
            for (int i = 0; i < accepted; ++i)
                inflight_[requests[i].user_data] = {requests[i], nullptr, false};
            return accepted;
        }
        // A late read goes to the kernel through a bounce; its memory is left alone until reaped.
        std::vector<nvmeio::io_request> sent(requests, requests + allowed);
        std::vector<bounce_ptr> bounces(allowed);
        for (std::size_t i = 0; i < allowed; ++i) {
            if (sent[i].op != nvmeio::operation::read) continue;
            bounces[i] = make_bounce(sent[i].length);
            sent[i].buffer = bounces[i].get();
            sent[i].pins = nullptr;  // the bounce is no buffer's
        }
        const int accepted = inner_.submit(sent.data(), allowed);
        for (int i = 0; i < accepted; ++i)
            inflight_[requests[i].user_data] = {requests[i], std::move(bounces[i]), true};
        return accepted;
    }

    int reap(nvmeio::io_completion* out, std::size_t min, std::size_t max,
             const timespec* timeout) noexcept {
        if (strikes(fault::reap_eintr)) {
            ++injected_;
            return -EINTR;
        }
        if (strikes(fault::reap_error)) {
            struck_.kind = fault::reap_error;
            ++injected_;
            return -EFAULT;
        }
        const int got = inner_.reap(out, min, max, timeout);
        for (int i = 0; i < got; ++i)
            alter(out[i]);
        return got;
    }

    [[nodiscard]] unsigned queue_depth() const noexcept { return inner_.queue_depth(); }

    [[nodiscard]] std::size_t in_flight() const noexcept { return inner_.in_flight(); }

    // Requests on a block device are cut as the inner backend's are (backend/request.hpp), and
    // every block is cut (none stays whole), so that faults strike the pieces of cut requests.
    template <class I = Inner>
    auto limits_for(const nvmeio::file& f, std::size_t block_size) const
        -> decltype(std::declval<const I&>().limits_for(f, block_size)) {
        return inner_.limits_for(f, block_size);
    }
    bool segment_stays_whole(const std::byte*, std::size_t, const nvmeio::request_limits&) const {
        return false;
    }
    std::size_t request_length(const nvmeio::request_limits& limits, bool, const std::byte*,
                               std::size_t) const {
        return limits.request_size;
    }

    // Requests the kernel accepted and the engine has not reaped yet, by this backend's own
    // tally (a check of the in_flight() it reports, which is the inner backend's).
    [[nodiscard]] std::size_t unreaped() const noexcept { return inflight_.size(); }
    // How many faults struck.
    [[nodiscard]] std::uint64_t injected() const noexcept { return injected_; }
    // The last request a fault struck.
    [[nodiscard]] const struck_request& struck() const noexcept { return struck_; }
    // Stops injecting (the context stays usable for a clean transfer).
    void disarm() noexcept { plan_.kinds.clear(); }
    // Starts over with another plan. Reusing one context matters: io_destroy waits for an RCU
    // grace period (tens of milliseconds), so a context per case would dominate the test's time.
    void rearm(fault_plan plan) {
        plan_ = std::move(plan);
        random_.seed(plan_.seed);
        for (std::uint64_t& n : opportunities_)
            n = 0;
        injected_ = 0;
        struck_ = {};
    }

  private:
    bool armed(fault f) const noexcept {
        if (injected_ >= plan_.max_faults) return false;
        for (fault k : plan_.kinds) {
            if (k == f) return true;
        }
        return false;
    }

    // Counts an opportunity for `f` and says whether the fault strikes it.
    bool strikes(fault f) noexcept {
        if (!armed(f)) return false;
        const std::uint64_t opportunity = opportunities_[static_cast<int>(f)]++;
        if (!plan_.schedule.empty()) {
            for (std::uint64_t at : plan_.schedule) {
                if (at == opportunity) return true;
            }
            return false;
        }
        return std::uniform_real_distribution<double>(0.0, 1.0)(random_) < plan_.probability;
    }

    int note(fault f, const nvmeio::io_request& r, int rc) noexcept {
        struck_ = {f, r.op, r.offset, r.length};
        ++injected_;
        return rc;
    }

    struct free_memory {
        void operator()(unsigned char* memory) const noexcept { std::free(memory); }
    };
    using bounce_ptr = std::unique_ptr<unsigned char, free_memory>;

    // A request the kernel accepted and nobody reaped yet.
    struct submitted {
        nvmeio::io_request request;  // as the engine gave it
        bounce_ptr bounce;           // a late read's bytes until they land, or null
        bool late = false;           // fault_plan::late_completions was on at its submit
    };

    static bounce_ptr make_bounce(std::size_t length) noexcept {
        void* memory = std::aligned_alloc(page, (length + page - 1) / page * page);
        if (memory == nullptr) std::abort();
        return bounce_ptr(static_cast<unsigned char*>(memory));
    }

    // The request completed with `result`: a late one uses its memory now, as the kernel
    // could have.
    static void land(const submitted& s, std::int64_t result) noexcept {
        if (!s.late || result <= 0) return;
        const nvmeio::io_request& r = s.request;
        const auto moved = static_cast<std::size_t>(result);
        if (r.op == nvmeio::operation::read) {
            std::memcpy(r.buffer, s.bounce.get(), moved);
        } else {
            write_to_file(r, 0, static_cast<std::int64_t>(moved),
                          static_cast<const unsigned char*>(r.buffer));
        }
    }

    // Requests still in flight complete now, as io_destroy waits for them, and late ones use
    // their memory (the kernel's waits are not faults: the plan does not reach them).
    void complete_the_rest() noexcept {
        bool late = false;
        for (const auto& entry : inflight_)
            late = late || entry.second.late;
        nvmeio::io_completion done[64];
        while (late && inner_.in_flight() > 0) {
            const int got = inner_.reap(done, 1, 64, nullptr);
            if (got < 0) std::abort();  // the wait cannot be simulated faithfully: stop loudly
            for (int i = 0; i < got; ++i) {
                const auto found = inflight_.find(done[i].user_data);
                if (found == inflight_.end()) continue;
                land(found->second, done[i].result);
                inflight_.erase(found);
            }
        }
    }

    void alter(nvmeio::io_completion& c) noexcept {
        const auto found = inflight_.find(c.user_data);
        if (found == inflight_.end()) return;  // not ours: leave it for the engine to judge
        land(found->second, c.result);
        const nvmeio::io_request r = found->second.request;
        inflight_.erase(found);
        if (c.result < 0) return;  // a real error passes through untouched
        if (c.result >= 2 && strikes(fault::short_result)) {
            // Half the time the claim ends on a 4 KiB boundary, so both the asynchronous
            // resubmission and the synchronous finish of an unaligned remnant run.
            auto claimed =
                static_cast<std::int64_t>(1 + random_() % static_cast<std::uint64_t>(c.result - 1));
            if (random_() % 2 == 0 && claimed >= 4096) claimed -= claimed % 4096;
            note(fault::short_result, r, 0);
            unmove(r, claimed, c.result);
            c.result = claimed;
            return;
        }
        if (strikes(fault::event_eagain)) {
            note(fault::event_eagain, r, 0);
            unmove(r, 0, c.result);
            c.result = -EAGAIN;
            return;
        }
        if (strikes(fault::event_ecanceled)) {
            note(fault::event_ecanceled, r, 0);
            unmove(r, 0, c.result);
            c.result = -ECANCELED;
            return;
        }
        if (strikes(fault::event_eio)) {
            c.result = note(fault::event_eio, r, -EIO);
            return;
        }
        if (r.op == nvmeio::operation::write && strikes(fault::write_enospc)) {
            c.result = note(fault::write_enospc, r, -ENOSPC);
            return;
        }
        if (strikes(fault::over_result)) {
            c.result = note(fault::over_result, r, static_cast<int>(r.length) + 1);
            return;
        }
        if (r.op == nvmeio::operation::write && strikes(fault::write_zero)) {
            c.result = note(fault::write_zero, r, 0);
            return;
        }
    }

    // The kernel moved bytes [from, to) of the request, but the fault says it did not: garble
    // them, so that an engine which trusts the fault and then forgets those bytes is caught.
    // A read's bytes are garbled in the buffer; a write's in the file, through a second
    // descriptor. On an O_DIRECT file that descriptor is O_DIRECT too and garbles the whole
    // 4 KiB pages inside the range only: a buffered write there would bring a page into the
    // cache whose writeback can land after (and over) another thread's O_DIRECT write to the
    // rest of that page (what file.hpp explains for write_at), a race of the simulation, not
    // of the engine.
    static void unmove(const nvmeio::io_request& r, std::int64_t from, std::int64_t to) noexcept {
        if (to <= from) return;
        const auto count = static_cast<std::size_t>(to - from);
        if (r.op == nvmeio::operation::read) {
            std::memset(static_cast<unsigned char*>(r.buffer) + from, 0xEE, count);
            return;
        }
        write_to_file(r, from, to, nullptr);
    }

    // Writes bytes [from, to) of request `r`'s range into its file (on an O_DIRECT file the whole
    // pages among them only, as unmove explains): those of `bytes`, the request's memory, or
    // 0xEE garbage where it is null.
    static void write_to_file(const nvmeio::io_request& r, std::int64_t from, std::int64_t to,
                              const unsigned char* bytes) noexcept {
        const bool direct = (::fcntl(r.fd, F_GETFL) & O_DIRECT) != 0;
        std::uint64_t begin = r.offset + static_cast<std::uint64_t>(from);
        std::uint64_t end = r.offset + static_cast<std::uint64_t>(to);
        if (direct) {
            begin = (begin + page - 1) / page * page;
            end = end / page * page;
            if (end <= begin) return;
        }
        const std::string self = "/proc/self/fd/" + std::to_string(r.fd);
        const int fd = ::open(self.c_str(), O_WRONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
        if (fd < 0) std::abort();  // the fault cannot be simulated faithfully: stop loudly
        const auto length = static_cast<std::size_t>(end - begin);
        void* out = std::aligned_alloc(page, (length + page - 1) / page * page);
        if (out == nullptr) std::abort();
        if (bytes != nullptr) {
            std::memcpy(out, bytes + (begin - r.offset), length);
        } else {
            std::memset(out, 0xEE, length);
        }
        const bool written =
            ::pwrite(fd, out, length, static_cast<off_t>(begin)) == static_cast<ssize_t>(length);
        std::free(out);
        ::close(fd);
        if (!written) std::abort();
    }
    static constexpr std::uint64_t page = 4096;

    static std::mutex& registry_mutex() {
        static std::mutex m;
        return m;
    }
    static std::vector<fault_backend*>& registry() {
        static std::vector<fault_backend*> all;
        return all;
    }

    Inner inner_;
    fault_plan plan_;
    std::mt19937_64 random_;
    std::uint64_t opportunities_[static_cast<int>(fault::count_)] = {};
    std::uint64_t injected_ = 0;
    struck_request struck_;
    std::unordered_map<std::uint64_t, submitted> inflight_;
};

}  // namespace nvmeio_test
