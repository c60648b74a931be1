#pragma once
/// \file support/cli.hpp
/// The command line of every nvmeio tool and example, on CLI11: checked numeric, size, seconds
/// and enum options whose errors name the flag, the transfer flags they all share, the one
/// mapping of nvmeio's enums to names, and `run_main`, which turns every command-line mistake
/// into exit status 2 and a message, never an abort.
///
/// CLI11 alone is not enough: it reads "-1" as 2^64 - 1 for an unsigned option and saturates
/// what overflows, so every number here goes through parse.hpp instead.

#include <CLI/CLI.hpp>
#include <nvmeio/nvmeio.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support/parse.hpp"

namespace nvmeio::support {

// ------------------------------------------------------------------------------ errors, main

/// A command-line value the program cannot use, found after parsing (a size that does not split
/// evenly, a missing file size...). `run_main` prints it and exits with status 2.
class usage_error : public std::invalid_argument {
  public:
    /// `flag` names the option ("--size"); `why` says what is wrong with its value.
    usage_error(const std::string& flag, const std::string& why)
        : std::invalid_argument(flag + ": " + why) {}
};

/// Thrown by `parse_command_line` to end the program with `status` (0 after --help).
struct exit_request {
    int status = 0;  ///< Exit status.
};

/// Parses the command line; on --help prints it and throws exit_request{0}; on any error prints
/// CLI11's message (which names the flag) and throws exit_request{2}.
inline void parse_command_line(CLI::App& app, int argc, char** argv) {
    try {
        app.parse(argc, argv);
    } catch (const CLI::Success& e) {
        throw exit_request{app.exit(e)};
    } catch (const CLI::ParseError& e) {
        (void)app.exit(e);
        throw exit_request{2};
    }
}

/// Runs `body()` (which returns the exit status) and maps what escapes it: exit_request to its
/// status, usage_error and std::invalid_argument (a value the library refuses, such as a queue
/// depth above fs.aio-max-nr) to 2, any other exception to `error_status`, each printed after
/// "`program`: ".
template <class Body>
int run_main(const char* program, int error_status, Body&& body) noexcept {
    try {
        return body();
    } catch (const exit_request& e) {
        return e.status;
    } catch (const usage_error& e) {
        std::cerr << program << ": " << e.what() << " (see --help)\n";
        return 2;
    } catch (const std::invalid_argument& e) {
        std::cerr << program << ": " << e.what() << "\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << program << ": " << e.what() << "\n";
        return error_status;
    } catch (...) {
        std::cerr << program << ": unknown exception\n";
        return error_status;
    }
}

// -------------------------------------------------------------------------- checked options

namespace detail {
/// The name errors use for an option declared as "-b,--block-size": "--block-size".
inline std::string flag_name(const std::string& flags) {
    const std::size_t comma = flags.rfind(',');
    return comma == std::string::npos ? flags : flags.substr(comma + 1);
}

/// Runs `convert(text)`, turning std::invalid_argument into CLI11's error for `flag`.
template <class Convert>
auto converted(const std::string& flag, const std::string& text, Convert&& convert) {
    try {
        return convert(text);
    } catch (const std::invalid_argument& e) {
        throw CLI::ValidationError(flag, e.what());
    }
}

template <class T>
T checked_count(const std::string& flag, const std::string& text, T min, T max) {
    return converted(flag, text, [&](const std::string& t) {
        const std::uint64_t v = parse_unsigned(t, static_cast<std::uint64_t>(max));
        if (v < static_cast<std::uint64_t>(min)) {
            throw std::invalid_argument("'" + t + "' is too small (at least " +
                                        std::to_string(min) + ")");
        }
        return static_cast<T>(v);
    });
}

inline std::uint64_t checked_size(const std::string& flag, const std::string& text,
                                  std::uint64_t min, std::uint64_t max, std::uint64_t multiple_of) {
    return converted(flag, text, [&](const std::string& t) {
        const std::uint64_t v = parse_size(t);
        if (v < min || v > max) {
            throw std::invalid_argument("'" + t + "' is out of range (" + format_size(min) +
                                        " to " + format_size(max) + " bytes)");
        }
        if (multiple_of > 1 && v % multiple_of != 0) {
            throw std::invalid_argument("'" + t + "' is not a multiple of " +
                                        std::to_string(multiple_of) + " bytes");
        }
        return v;
    });
}
}  // namespace detail

/// An unsigned count option (`T` an unsigned integer type) with values in [min, max].
template <class T>
CLI::Option* add_count_option(CLI::App& app, const std::string& flags, T& target,
                              const std::string& help, T min = 1,
                              T max = std::numeric_limits<T>::max()) {
    const std::string flag = detail::flag_name(flags);
    return app
        .add_option_function<std::string>(
            flags,
            [&target, flag, min, max](const std::string& text) {
                target = detail::checked_count<T>(flag, text, min, max);
            },
            help)
        ->default_str(std::to_string(target))
        ->type_name("N");
}

/// A comma-separated list of counts, each in [min, max].
template <class T>
CLI::Option* add_count_list_option(CLI::App& app, const std::string& flags, std::vector<T>& target,
                                   const std::string& help, T min = 1,
                                   T max = std::numeric_limits<T>::max()) {
    const std::string flag = detail::flag_name(flags);
    std::string shown;
    for (const T v : target)
        shown += (shown.empty() ? "" : ",") + std::to_string(v);
    return app
        .add_option_function<std::vector<std::string>>(
            flags,
            [&target, flag, min, max](const std::vector<std::string>& texts) {
                target.clear();
                for (const std::string& t : texts)
                    target.push_back(detail::checked_count<T>(flag, t, min, max));
            },
            help)
        ->delimiter(',')
        ->default_str(shown)
        ->type_name("N,...");
}

/// A size option in bytes with unit suffixes (parse_size), in [min, max], a multiple of
/// `multiple_of`.
inline CLI::Option* add_size_option(CLI::App& app, const std::string& flags, std::uint64_t& target,
                                    const std::string& help, std::uint64_t min = 1,
                                    std::uint64_t max = UINT64_MAX, std::uint64_t multiple_of = 1) {
    const std::string flag = detail::flag_name(flags);
    return app
        .add_option_function<std::string>(
            flags,
            [&target, flag, min, max, multiple_of](const std::string& text) {
                target = detail::checked_size(flag, text, min, max, multiple_of);
            },
            help)
        ->default_str(format_size(target))
        ->type_name("SIZE");
}

/// A comma-separated list of sizes, each in [min, max] and a multiple of `multiple_of`.
inline CLI::Option* add_size_list_option(CLI::App& app, const std::string& flags,
                                         std::vector<std::uint64_t>& target,
                                         const std::string& help, std::uint64_t min = 1,
                                         std::uint64_t max = UINT64_MAX,
                                         std::uint64_t multiple_of = 1) {
    const std::string flag = detail::flag_name(flags);
    std::string shown;
    for (const std::uint64_t v : target)
        shown += (shown.empty() ? "" : ",") + format_size(v);
    return app
        .add_option_function<std::vector<std::string>>(
            flags,
            [&target, flag, min, max, multiple_of](const std::vector<std::string>& texts) {
                target.clear();
                for (const std::string& t : texts)
                    target.push_back(detail::checked_size(flag, t, min, max, multiple_of));
            },
            help)
        ->delimiter(',')
        ->default_str(shown)
        ->type_name("SIZE,...");
}

/// A number of seconds (parse_seconds): finite, at least 0.
inline CLI::Option* add_seconds_option(CLI::App& app, const std::string& flags, double& target,
                                       const std::string& help) {
    const std::string flag = detail::flag_name(flags);
    return app
        .add_option_function<std::string>(
            flags,
            [&target, flag](const std::string& text) {
                target = detail::converted(flag, text,
                                           [](const std::string& t) { return parse_seconds(t); });
            },
            help)
        ->type_name("SECONDS");
}

// ------------------------------------------------------------------------------------ enums

/// The command-line names of an enum's values, in the order help lists them.
template <class Enum>
using enum_names = std::vector<std::pair<std::string, Enum>>;

/// The name of `value` in `names` ("?" when it has none).
template <class Enum>
[[nodiscard]] std::string name_of(const enum_names<Enum>& names, Enum value) {
    for (const auto& [name, v] : names)
        if (v == value) return name;
    return "?";
}

/// The value named `text`; std::invalid_argument listing the names when there is none.
template <class Enum>
[[nodiscard]] Enum parse_enum(const enum_names<Enum>& names, const std::string& text) {
    std::string known;
    for (const auto& [name, v] : names) {
        if (name == text) return v;
        known += (known.empty() ? "" : ", ") + name;
    }
    throw std::invalid_argument("'" + text + "' is not one of " + known);
}

/// An option taking one of `names`.
template <class Enum>
CLI::Option* add_enum_option(CLI::App& app, const std::string& flags, Enum& target,
                             const enum_names<Enum>& names, const std::string& help) {
    const std::string flag = detail::flag_name(flags);
    std::string choices;
    for (const auto& [name, v] : names)
        choices += (choices.empty() ? "" : "|") + name;
    return app
        .add_option_function<std::string>(
            flags,
            [&target, flag, names](const std::string& text) {
                target = detail::converted(
                    flag, text, [&](const std::string& t) { return parse_enum(names, t); });
            },
            help)
        ->default_str(name_of(names, target))
        ->type_name(choices);
}

/// A comma-separated list of `names`; each value at most once, in the order of `names`.
template <class Enum>
CLI::Option* add_enum_list_option(CLI::App& app, const std::string& flags,
                                  std::vector<Enum>& target, const enum_names<Enum>& names,
                                  const std::string& help) {
    const std::string flag = detail::flag_name(flags);
    std::string shown;
    for (const Enum v : target)
        shown += (shown.empty() ? "" : ",") + name_of(names, v);
    return app
        .add_option_function<std::vector<std::string>>(
            flags,
            [&target, flag, names](const std::vector<std::string>& texts) {
                std::vector<Enum> picked;
                for (const std::string& t : texts) {
                    picked.push_back(detail::converted(
                        flag, t, [&](const std::string& x) { return parse_enum(names, x); }));
                }
                target.clear();
                for (const auto& [name, v] : names)
                    if (std::find(picked.begin(), picked.end(), v) != picked.end())
                        target.push_back(v);
            },
            help)
        ->delimiter(',')
        ->default_str(shown);
}

/// read, write.
[[nodiscard]] inline const enum_names<operation>& operation_names() {
    static const enum_names<operation> names{{"read", operation::read},
                                             {"write", operation::write}};
    return names;
}
/// sequential, overlapped.
[[nodiscard]] inline const enum_names<strategy_kind>& strategy_names() {
    static const enum_names<strategy_kind> names{{"sequential", strategy_kind::sequential},
                                                 {"overlapped", strategy_kind::overlapped}};
    return names;
}
/// single, block.
[[nodiscard]] inline const enum_names<submit_mode>& submit_names() {
    static const enum_names<submit_mode> names{{"single", submit_mode::single},
                                               {"block", submit_mode::block}};
    return names;
}
/// on, off, auto.
[[nodiscard]] inline const enum_names<direct_io>& direct_names() {
    static const enum_names<direct_io> names{{"on", direct_io::on},
                                             {"off", direct_io::off},
                                             {"auto", direct_io::automatic},
                                             {"uncached", direct_io::uncached}};
    return names;
}

/// A switch.
[[nodiscard]] inline const enum_names<bool>& on_off_names() {
    static const enum_names<bool> names{{"on", true}, {"off", false}};
    return names;
}

/// The I/O backends a tool can run on.
enum class backend_kind {
    libaio,    ///< nvmeio::libaio_backend (always built).
    io_uring,  ///< nvmeio::io_uring_backend (built when liburing was found).
};

/// libaio, io_uring (both are accepted names; with_backend says when one is not built).
[[nodiscard]] inline const enum_names<backend_kind>& backend_names() {
    static const enum_names<backend_kind> names{{"libaio", backend_kind::libaio},
                                                {"io_uring", backend_kind::io_uring}};
    return names;
}

/// A type carrying a Backend policy, for with_backend's callable.
template <class Backend>
struct backend_tag {
    using type = Backend;  ///< The policy.
};

/// Calls `f(backend_tag<Backend>{})` with the policy `kind` names. Throws usage_error naming
/// --backend when this build lacks it; the kernel refusing io_uring is the io_error of the
/// context's constructor.
template <class F>
decltype(auto) with_backend(backend_kind kind, F&& f) {
    if (kind == backend_kind::io_uring) {
#if NVMEIO_HAS_IO_URING
        return f(backend_tag<io_uring_backend>{});
#else
        throw usage_error("--backend",
                          "io_uring is not built in (liburing was not found when "
                          "nvmeio was configured); use libaio");
#endif
    }
    return f(backend_tag<libaio_backend>{});
}

// --------------------------------------------------------------------------- transfer flags

/// Throws usage_error naming `flag` when `block_size` is not a multiple of the O_DIRECT alignment
/// of `f` (nothing when `f` is buffered).
inline void check_block_size(const std::string& flag, std::uint64_t block_size, const file& f) {
    const std::size_t unit = f.required_alignment();
    if (block_size % unit != 0) {
        throw usage_error(flag, format_size(block_size) + " is not a multiple of " +
                                    std::to_string(unit) + " bytes, the O_DIRECT alignment of '" +
                                    f.path() + "'");
    }
}

/// How a transfer is done, as every tool and example spells it: --strategy, --submit,
/// --queue-depth, --block-size, --direct, --backend.
struct transfer_flags {
    strategy_kind strategy = strategy_kind::overlapped;  ///< --strategy
    submit_mode submit = submit_mode::block;             ///< --submit
    unsigned queue_depth = 32;                           ///< --queue-depth, 1..65536
    std::uint64_t block_size = std::uint64_t{1} << 20;   ///< --block-size, 4K..1G
    direct_io direct = direct_io::on;                    ///< --direct
    backend_kind backend = backend_kind::libaio;         ///< --backend
    unsigned spin_us = 0;                                ///< --spin, microseconds, 0..1000000
    bool pin_once = true;                                ///< --pin-once
    bool single_issuer = true;                           ///< --single-issuer

    /// Largest --block-size accepted.
    static constexpr std::uint64_t max_block_size = std::uint64_t{1} << 30;
    /// The smallest O_DIRECT alignment a device can have: an O_DIRECT block size must be a
    /// multiple of it (and of the file's own alignment, see check_against).
    static constexpr std::uint64_t smallest_direct_alignment = 512;

    /// Adds the flags to `app`; `with_direct` false leaves out --direct (tools that are
    /// always O_DIRECT).
    void add_to(CLI::App& app, bool with_direct = true) {
        add_enum_option(app, "--strategy", strategy, strategy_names(),
                        "overlapped (refill the queue as requests complete) or sequential "
                        "(submit a batch, reap it whole)");
        add_enum_option(app, "--submit", submit, submit_names(),
                        "single (one request per submit call) or block (what is ready in paced "
                        "calls: at most as many as are in flight)");
        add_count_option(app, "-q,--queue-depth", queue_depth, "requests in flight", 1u, 65536u);
        add_size_option(app, "-b,--block-size", block_size,
                        "bytes per request (K, M, G suffixes), a multiple of the file's O_DIRECT "
                        "alignment",
                        1, max_block_size);
        if (with_direct) {
            add_enum_option(app, "--direct", direct, direct_names(),
                            "O_DIRECT: on (or an error), off (buffered), uncached (buffered "
                            "with RWF_DONTCACHE: nothing left in the page cache; Linux 6.14+, or "
                            "an error), or auto (O_DIRECT, else uncached, else buffered)");
        }
        add_enum_option(app, "--backend", backend, backend_names(),
                        "I/O backend (io_uring where built with liburing)");
        add_count_option(app, "--spin", spin_us,
                         "microseconds a wait for completions polls the completion ring before "
                         "it sleeps in the kernel (0: sleep at once); a poll that runs out of "
                         "time backs off for 1, 2, 4 ... 64 waits (context_options::spin)",
                         0u, 1000000u);
        add_enum_option(app, "--pin-once", pin_once, on_off_names(),
                        "io_uring: register the tool's buffers with each ring on first use, so "
                        "the kernel pins their pages once instead of per request "
                        "(context_options::pin_once)");
        add_enum_option(app, "--single-issuer", single_issuer, on_off_names(),
                        "io_uring: set each ring up for the one thread that uses it "
                        "(SINGLE_ISSUER | DEFER_TASKRUN where the kernel allows; "
                        "context_options::single_issuer)");
    }

    /// Checks what one flag alone cannot: an O_DIRECT block size that no device could take.
    /// Throws usage_error naming --block-size. Call after parsing.
    void check() const {
        if (may_use_o_direct(direct) && block_size % smallest_direct_alignment != 0) {
            throw usage_error("--block-size", format_size(block_size) +
                                                  " is not a multiple of 512 bytes, so O_DIRECT "
                                                  "cannot use it (or pass --direct off)");
        }
    }

    /// Checks --block-size against the O_DIRECT alignment of `f` (nothing when `f` is buffered).
    void check_against(const file& f) const { check_block_size("--block-size", block_size, f); }

    /// The run-time strategy and submit mode.
    [[nodiscard]] transfer_config config(bool measure = true) const {
        return {strategy, submit, measure};
    }
    /// Queue depth and block size of a context.
    [[nodiscard]] context_options context() const {
        return {queue_depth, static_cast<std::size_t>(block_size),
                std::chrono::microseconds{spin_us}, pin_once, single_issuer};
    }
    /// "read overlapped/block qd=32 bs=1M libaio".
    [[nodiscard]] std::string label(const std::string& op) const {
        return op + " " + name_of(strategy_names(), strategy) + "/" +
               name_of(submit_names(), submit) + " qd=" + std::to_string(queue_depth) +
               " bs=" + format_size(block_size) + " " + name_of(backend_names(), backend) +
               (spin_us != 0 ? " spin=" + std::to_string(spin_us) + "us" : "") +
               (!pin_once && backend == backend_kind::io_uring ? " unpinned" : "") +
               (!single_issuer && backend == backend_kind::io_uring ? " any-thread" : "");
    }
};

}  // namespace nvmeio::support
