#pragma once
// A CUDA driver of test functions (a cuda_driver table) for cuda_copy_engine: one device, a
// context stack it counts, and one stream that is truly asynchronous, as a real one is: copies
// queue up and run only when an event recorded after them, or the stream, is synchronized. A copy
// still queued when the ring's memory is unregistered is counted: a real driver would go on
// reading memory that is no longer locked, and soon freed. Any copy or record call can be made to
// fail: its n-th call from now returns CUDA_ERROR_INVALID_VALUE and queues nothing.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <nvmeio/cuda.hpp>
#include <utility>

namespace nvmeio_test::queued_cuda {

constexpr int invalid_value = 1;  // CUDA_ERROR_INVALID_VALUE
constexpr int not_ready = 600;    // CUDA_ERROR_NOT_READY

struct driver_state {
    int devices = 1;
    int pushes = 0, pops = 0, registered = 0, unregistered = 0, events = 0;
    int copies = 0;                           // copies run
    std::size_t queued_at_unregister = 0;     // copies still queued when the memory was unlocked
    std::deque<std::function<void()>> queue;  // copies not yet run, in stream order
    std::uint64_t run_to = 0;                 // copies run since the reset
    // The n-th call from now fails; 0: none.
    std::size_t fail_to_device_call = 0, fail_to_host_call = 0, fail_record_call = 0;
};

inline driver_state state;

inline void reset() {
    state = driver_state{};
}

// Runs the stream's copies until `position` (copies since the reset) have run.
inline void run_until(std::uint64_t position) {
    while (state.run_to < position && !state.queue.empty()) {
        std::function<void()> copy = std::move(state.queue.front());
        state.queue.pop_front();
        copy();
        ++state.run_to;
        ++state.copies;
    }
}

inline bool due(std::size_t& calls_left) {
    return calls_left != 0 && --calls_left == 0;
}

inline int init(unsigned) {
    return state.devices == 0 ? 100 : 0;  // CUDA_ERROR_NO_DEVICE
}
inline int count(int* n) {
    return *n = state.devices, 0;
}
inline int get(int* d, int i) {
    return *d = i, 0;
}
inline int retain(void** c, int) {
    static int context;
    return *c = &context, 0;
}
inline int release(int) {
    return 0;
}
inline int push(void*) {
    return ++state.pushes, 0;
}
inline int pop(void**) {
    return ++state.pops, 0;
}
inline int stream_create(void** s, unsigned) {
    static int stream;
    return *s = &stream, 0;
}
inline int stream_destroy(void*) {
    return 0;
}
inline int stream_synchronize(void*) {
    run_until(~std::uint64_t{0});
    return 0;
}
// An event is the stream position it was last recorded at.
inline int event_create(void** e, unsigned) {
    *e = new std::uint64_t(0);
    return ++state.events, 0;
}
inline int event_destroy(void* e) {
    delete static_cast<std::uint64_t*>(e);
    return --state.events, 0;
}
inline int event_record(void* e, void*) {
    if (due(state.fail_record_call)) return invalid_value;
    *static_cast<std::uint64_t*>(e) = state.run_to + state.queue.size();
    return 0;
}
inline int event_synchronize(void* e) {
    run_until(*static_cast<std::uint64_t*>(e));
    return 0;
}
inline int event_query(void* e) {
    return state.run_to >= *static_cast<std::uint64_t*>(e) ? 0 : not_ready;
}
inline int host_register(void*, std::size_t, unsigned) {
    return ++state.registered, 0;
}
inline int host_unregister(void*) {
    state.queued_at_unregister += state.queue.size();
    return ++state.unregistered, 0;
}
inline int to_device(unsigned long long to, const void* from, std::size_t n, void*) {  // NOLINT
    if (due(state.fail_to_device_call)) return invalid_value;
    state.queue.push_back([=] { std::memcpy(reinterpret_cast<void*>(to), from, n); });
    return 0;
}
inline int to_host(void* to, unsigned long long from, std::size_t n, void*) {  // NOLINT
    if (due(state.fail_to_host_call)) return invalid_value;
    state.queue.push_back([=] { std::memcpy(to, reinterpret_cast<const void*>(from), n); });
    return 0;
}
inline int name(int r, const char** text) {
    *text = r == invalid_value ? "CUDA_ERROR_INVALID_VALUE" : "CUDA_ERROR_OTHER";
    return 0;
}

inline nvmeio::cuda_driver table() {
    nvmeio::cuda_driver d;
    d.init = init, d.device_count = count, d.device_get = get, d.primary_retain = retain;
    d.primary_release = release, d.push = push, d.pop = pop, d.stream_create = stream_create;
    d.stream_destroy = stream_destroy, d.stream_synchronize = stream_synchronize;
    d.event_create = event_create, d.event_destroy = event_destroy, d.event_record = event_record;
    d.event_synchronize = event_synchronize, d.event_query = event_query;
    d.host_register = host_register, d.host_unregister = host_unregister;
    d.copy_to_device = to_device, d.copy_to_host = to_host, d.error_name = name;
    return d;
}

}  // namespace nvmeio_test::queued_cuda
