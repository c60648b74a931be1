#pragma once
// Command-line flags the examples share: how a transfer is done.

#include <CLI/CLI.hpp>
#include <map>
#include <nvmeio/nvmeio.hpp>
#include <string>

namespace example {

struct transfer_flags {
    std::string strategy = "overlapped";
    std::string submit = "block";
    unsigned queue_depth = 32;
    std::size_t block_kib = 1024;
    std::string direct = "on";

    void add_to(CLI::App& app) {
        app.add_option("--strategy", strategy, "sequential or overlapped")
            ->check(CLI::IsMember({"sequential", "overlapped"}))
            ->capture_default_str();
        app.add_option("--submit", submit, "single (one request per call) or block")
            ->check(CLI::IsMember({"single", "block"}))
            ->capture_default_str();
        app.add_option("--queue-depth", queue_depth, "requests in flight")->capture_default_str();
        app.add_option("--block-kib", block_kib, "request size in KiB")->capture_default_str();
        app.add_option("--direct", direct, "O_DIRECT: on, off or auto")
            ->check(CLI::IsMember({"on", "off", "auto"}))
            ->capture_default_str();
    }

    nvmeio::transfer_config config(bool measure = true) const {
        return {strategy == "sequential" ? nvmeio::strategy_kind::sequential
                                         : nvmeio::strategy_kind::overlapped,
                submit == "single" ? nvmeio::submit_mode::single : nvmeio::submit_mode::block,
                measure};
    }
    nvmeio::context_options context() const { return {queue_depth, block_kib * 1024}; }
    nvmeio::direct_io direct_mode() const {
        return direct == "off"    ? nvmeio::direct_io::off
               : direct == "auto" ? nvmeio::direct_io::automatic
                                  : nvmeio::direct_io::on;
    }
    std::string label(const char* op) const {
        return std::string(op) + " " + strategy + "/" + submit +
               " qd=" + std::to_string(queue_depth) + " bs=" + std::to_string(block_kib) + "K";
    }
};

}  // namespace example
