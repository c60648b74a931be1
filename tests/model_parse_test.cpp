// The model-file parser (examples/model/parse.hpp), the one every model example uses: generated
// files parse back to their plan, hostile headers are malformed_model errors naming the file,
// the field and the rule, and thousands of mutated headers never crash, hang, throw anything
// else, or yield a tensor outside the file, outside the data section, of the wrong size, or
// overlapping another.
//
// NVMEIO_FUZZ_CASES  mutated headers per format (default 6000; a tenth under sanitizers)
// NVMEIO_FUZZ_SEED   first seed (default 1); a failure prints the seed that reproduces it

#define BOOST_TEST_MODULE model_parse_test
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/generate.hpp"
#include "model/parse.hpp"
#include "test_support.hpp"

namespace model = example::model;

namespace {

__extension__ typedef unsigned __int128 uint128;

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
    const char* text = std::getenv(name);
    return text != nullptr && *text != '\0' ? std::strtoull(text, nullptr, 10) : fallback;
}

model::planned_model small_plan(model::format kind, std::uint32_t version = 3,
                                std::uint32_t alignment = 32, std::uint64_t seed = 7) {
    model::model_spec spec;
    spec.kind = kind;
    spec.version = version;
    spec.alignment = alignment;
    spec.tensors = 24;
    spec.bytes = 1 << 20;
    spec.seed = seed;
    return model::plan_model(spec);
}

model::model_layout parse_header(const std::vector<std::byte>& header, std::uint64_t file_size,
                                 const std::string& path = "m") {
    return model::parse_model(header.data(), header.size(), file_size, path);
}

std::string malformed_message(const std::vector<std::byte>& header, std::uint64_t file_size,
                              const std::string& path = "hostile.model") {
    try {
        (void)parse_header(header, file_size, path);
    } catch (const model::malformed_model& e) {
        return e.what();
    }
    return "(accepted)";
}

// What a layout promises, checked with 128-bit arithmetic independent of the parser's.
std::string broken_promise(const model::model_layout& layout) {
    uint128 previous_end = 0;
    for (const model::tensor_info& t : layout.tensors) {
        const uint128 end = uint128{t.offset} + t.size;
        if (t.offset < layout.data_offset) return "tensor '" + t.name + "' before the data";
        if (end > layout.file_size) return "tensor '" + t.name + "' past the end of the file";
        uint128 elements = 1;
        for (std::uint64_t d : t.shape) {
            elements *= d;
            if (elements > (uint128{1} << 63)) return "tensor '" + t.name + "' overflows";
        }
        uint128 size = 0;
        if (layout.kind == model::format::gguf) {
            const model::ggml_type_info* type = model::find_ggml_type(t.type);
            if (type == nullptr) return "tensor '" + t.name + "' has unknown type " + t.type;
            if (!t.shape.empty() && t.shape[0] % type->block_elements != 0)
                return "tensor '" + t.name + "' splits a block";
            size = elements / type->block_elements * type->block_bytes;
            if (t.offset % layout.alignment != 0 || layout.data_offset % layout.alignment != 0)
                return "tensor '" + t.name + "' is misaligned";
        } else {
            const model::dtype_info* type = model::find_dtype(t.type);
            if (type == nullptr) return "tensor '" + t.name + "' has unknown dtype " + t.type;
            size = elements * type->bytes;
        }
        if (size != t.size) return "tensor '" + t.name + "' has the wrong size";
        if (t.size != 0 && t.offset < previous_end) return "tensor '" + t.name + "' overlaps";
        if (t.size != 0) previous_end = end;
    }
    return {};
}

void put_u64(std::vector<std::byte>& bytes, std::size_t at, std::uint64_t value) {
    for (std::size_t i = 0; i < 8 && at + i < bytes.size(); ++i)
        bytes[at + i] = static_cast<std::byte>(value >> (8 * i));
}

std::vector<std::byte> bytes_of(const std::string& text) {
    std::vector<std::byte> out(text.size());
    std::memcpy(out.data(), text.data(), text.size());
    return out;
}

// A safetensors header (length + JSON) for `json`.
std::vector<std::byte> safetensors_header(const std::string& json) {
    std::vector<std::byte> out(8);
    put_u64(out, 0, json.size());
    const std::vector<std::byte> text = bytes_of(json);
    out.insert(out.end(), text.begin(), text.end());
    return out;
}

constexpr std::uint64_t interesting[] = {0,
                                         1,
                                         2,
                                         4,
                                         5,
                                         31,
                                         33,
                                         4096,
                                         0x7FFFFFFFull,
                                         0xFFFFFFFFull,
                                         0x100000000ull,
                                         0x7FFFFFFFFFFFFFFFull,
                                         0x8000000000000000ull,
                                         0xFFFFFFFFFFFFFFE0ull,
                                         0xFFFFFFFFFFFFFFFFull};

// One random mutation of a valid header.
std::vector<std::byte> mutate(std::vector<std::byte> bytes, std::mt19937_64& random) {
    const auto pick = [&](std::size_t n) { return static_cast<std::size_t>(random() % n); };
    const unsigned edits = 1 + pick(4);
    for (unsigned e = 0; e < edits && !bytes.empty(); ++e) {
        switch (pick(6)) {
            case 0:  // flip a bit
                bytes[pick(bytes.size())] ^= static_cast<std::byte>(1u << pick(8));
                break;
            case 1:  // a random byte
                bytes[pick(bytes.size())] = static_cast<std::byte>(random());
                break;
            case 2:  // an interesting 64-bit value (counts, lengths, dimensions, offsets)
                put_u64(bytes, pick(bytes.size()), interesting[pick(std::size(interesting))]);
                break;
            case 3:  // an interesting 32-bit value (version, n_dims, types)
                for (std::size_t i = 0, at = pick(bytes.size()); i < 4 && at + i < bytes.size();
                     ++i)
                    bytes[at + i] = static_cast<std::byte>(
                        interesting[pick(std::size(interesting))] >> (8 * i));
                break;
            case 4:  // truncate
                bytes.resize(pick(bytes.size()));
                break;
            default: {  // duplicate a slice somewhere else
                const std::size_t from = pick(bytes.size());
                const std::size_t length = std::min<std::size_t>(1 + pick(64), bytes.size() - from);
                const std::vector<std::byte> slice(
                    bytes.begin() + static_cast<long>(from),
                    bytes.begin() + static_cast<long>(from + length));
                bytes.insert(bytes.begin() + static_cast<long>(pick(bytes.size())), slice.begin(),
                             slice.end());
            }
        }
    }
    return bytes;
}

// A structural safetensors mutation: one field of one tensor gets a hostile JSON value.
std::vector<std::byte> mutate_json(const std::vector<std::byte>& header, std::mt19937_64& random) {
    nlohmann::json json =
        nlohmann::json::parse(reinterpret_cast<const char*>(header.data() + 8),
                              reinterpret_cast<const char*>(header.data()) + header.size());
    const nlohmann::json values[] = {-1,
                                     -8,
                                     0,
                                     1,
                                     4294967296ull,
                                     9223372036854775807ull,
                                     18446744073709551615ull,
                                     1e30,
                                     0.5,
                                     "x",
                                     nullptr,
                                     nlohmann::json::array(),
                                     {4294967296ull, 4294967296ull},
                                     {1, 2, 3}};
    std::vector<std::string> names;
    for (const auto& item : json.items())
        names.push_back(item.key());
    const std::string& name = names[random() % names.size()];
    nlohmann::json& entry = json[name];
    const nlohmann::json& value = values[random() % std::size(values)];
    if (!entry.is_object()) {
        entry = value;
    } else {
        switch (random() % 6) {
            case 0:
                entry["shape"] = value;
                break;
            case 1:
                entry["data_offsets"][random() % 2] = value;
                break;
            case 2:
                if (entry["shape"].is_array() && !entry["shape"].empty())
                    entry["shape"][random() % entry["shape"].size()] = value;
                break;
            case 3:
                entry["dtype"] = random() % 2 != 0 ? nlohmann::json("Q9") : value;
                break;
            case 4:
                entry["data_offsets"] = value;
                break;
            default:
                entry.erase(random() % 2 != 0 ? "dtype" : "shape");
        }
    }
    return safetensors_header(json.dump());
}

// Runs the parser on `header` as the start of a file of `file_size` bytes; returns a broken
// promise, or an empty string when the parser refused it properly or kept its promises.
std::string fuzz_one(const std::vector<std::byte>& header, std::uint64_t file_size,
                     unsigned& accepted) {
    try {
        const model::model_layout layout = parse_header(header, file_size);
        ++accepted;
        return broken_promise(layout);
    } catch (const model::malformed_model&) {
        return {};
    } catch (const model::detail::need_more_bytes& more) {
        if (header.size() >= file_size || more.at_least <= header.size())
            return "asked for more bytes than the whole file";
        return {};
    } catch (const std::exception& e) {
        return std::string("threw something else: ") + e.what();
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(generated_files_parse_back_to_their_plan) {
    for (const auto& [kind, version, alignment] :
         {std::tuple{model::format::gguf, 2u, 32u}, std::tuple{model::format::gguf, 3u, 64u},
          std::tuple{model::format::gguf, 3u, 4096u},
          std::tuple{model::format::safetensors, 0u, 1u}}) {
        const model::planned_model plan =
            small_plan(kind, version == 0 ? 3 : version, alignment == 1 ? 32 : alignment);
        const model::model_layout got = parse_header(plan.header, plan.layout.file_size);
        BOOST_TEST(got.version == plan.layout.version);
        BOOST_TEST(got.data_offset == plan.layout.data_offset);
        BOOST_TEST(got.alignment == plan.layout.alignment);
        BOOST_TEST(got.metadata_count == plan.layout.metadata_count);
        BOOST_TEST(got.pattern_seed.value_or(0) == 7u);
        BOOST_REQUIRE(got.tensors.size() == plan.layout.tensors.size());
        for (std::size_t i = 0; i < got.tensors.size(); ++i) {
            BOOST_TEST(got.tensors[i].name == plan.layout.tensors[i].name);
            BOOST_TEST(got.tensors[i].type == plan.layout.tensors[i].type);
            BOOST_TEST(got.tensors[i].shape == plan.layout.tensors[i].shape);
            BOOST_TEST(got.tensors[i].offset == plan.layout.tensors[i].offset);
            BOOST_TEST(got.tensors[i].size == plan.layout.tensors[i].size);
        }
        BOOST_TEST(broken_promise(got).empty());
    }
}

BOOST_AUTO_TEST_CASE(a_header_cut_short_asks_for_more_of_the_file_then_parses) {
    const model::planned_model plan = small_plan(model::format::gguf);
    const std::vector<std::byte> cut(plan.header.begin(), plan.header.begin() + 100);
    try {
        (void)parse_header(cut, plan.layout.file_size);
        BOOST_FAIL("a cut header was accepted");
    } catch (const model::detail::need_more_bytes& more) {
        BOOST_TEST(more.at_least > 100u);
        BOOST_TEST(more.at_least <= plan.header.size());
    }
    // The same cut as the whole file is malformed.
    const std::string message = malformed_message(cut, cut.size());
    BOOST_TEST(message.find("'hostile.model' is not a valid GGUF file: ") == 0u, message);
}

BOOST_AUTO_TEST_CASE(hostile_safetensors_headers_name_the_file_the_tensor_and_the_rule) {
    struct hostile {
        const char* json;
        std::uint64_t data_bytes;
        const char* expected;
    };
    const hostile cases[] = {
        // the shape product passes 2^63 with no data behind it
        {R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0,
         "tensor 't' shape: [4294967296,4294967296] has more than 2^63 - 1 elements"},
        {R"({"t":{"dtype":"U8","shape":[4294967296,1048576],"data_offsets":[0,0]}})", 0,
         "tensor 't' data_offsets: [0, 0) holds 0 bytes but shape [4294967296,1048576] of U8 "
         "needs 4503599627370496"},
        {R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[-8,-6]}})", 2,
         "tensor 't' data_offsets: must be two non-negative integers"},
        {R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[18446744073709551615,1]}})", 2,
         "end 1 is before begin 18446744073709551615"},
        {R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[18446744073709551614,18446744073709551616]}})",
         2, "tensor 't' data_offsets: must be two non-negative integers"},
        {R"({"t":{"dtype":"U8","shape":[16],"data_offsets":[18446744073709551600,18446744073709551616]}})",
         2, "must be two non-negative integers"},
        {R"({"t":{"dtype":"U8","shape":[8],"data_offsets":[18446744073709551608,18446744073709551615]}})",
         2, "holds 7 bytes but shape [8] of U8 needs 8"},
        {R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}})",
         2, "tensor 't' data_offsets: begin passes 2^64 bytes"},
        {R"({"t":{"dtype":"Q9","shape":[2],"data_offsets":[0,2]}})", 2,
         "tensor 't' dtype: unknown dtype 'Q9'"},
        {R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
         6, "overlap tensor 'a' ["},
        {R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
         10, "safetensors allows no holes"},
        {R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 3, "pass the end of the file"},
        {R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 9,
         "5 bytes after the last tensor"},
        {R"({"t":{"dtype":"F16","shape":[-2],"data_offsets":[0,4]}})", 4,
         "dimension -2 is not a non-negative integer"},
        {R"({"t":{"dtype":"F16","shape":[2.5],"data_offsets":[0,5]}})", 5,
         "dimension 2.5 is not a non-negative integer"},
        {R"({"t":{"shape":[2],"data_offsets":[0,2]}})", 2, "tensor 't' dtype: missing"},
        {R"({"t":[1,2]})", 0, "tensor 't': not a JSON object"},
        {R"({"__metadata__":{"k":1}})", 0, "__metadata__ 'k': the value is not a string"},
        {R"({"t":)", 0, "header: not valid JSON"},
        {R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}} [1])", 1,
         "header: not valid JSON"},
    };
    for (const hostile& c : cases) {
        std::vector<std::byte> file = safetensors_header(c.json);
        file.resize(file.size() + c.data_bytes);
        const std::string message = malformed_message(file, file.size());
        BOOST_TEST_INFO(c.json);
        BOOST_TEST(message.find("'hostile.model' is not a valid safetensors file: ") == 0u,
                   message);
        BOOST_TEST(message.find(c.expected) != std::string::npos, message);
    }
    const std::vector<std::byte> array = safetensors_header("[1,2]");
    BOOST_TEST(malformed_message(array, array.size()) ==
               "'hostile.model' is neither a GGUF nor a safetensors file: it starts with neither "
               "\"GGUF\" nor an 8-byte length and '{'");
    std::vector<std::byte> length_past_end = bytes_of("garbage!{}");
    BOOST_TEST(malformed_message(length_past_end, length_past_end.size())
                   .find("header length: 2406443243860549991 passes the end of the file") !=
               std::string::npos);
}

BOOST_AUTO_TEST_CASE(hostile_gguf_headers_name_the_file_the_field_and_the_rule) {
    const model::planned_model plan = small_plan(model::format::gguf);
    const std::vector<std::byte>& good = plan.header;
    const std::uint64_t size = plan.layout.file_size;
    const auto with_u32 = [&](std::size_t at, std::uint32_t value) {
        std::vector<std::byte> b = good;
        for (std::size_t i = 0; i < 4; ++i)
            b[at + i] = static_cast<std::byte>(value >> (8 * i));
        return b;
    };
    const auto with_u64 = [&](std::size_t at, std::uint64_t value) {
        std::vector<std::byte> b = good;
        put_u64(b, at, value);
        return b;
    };
    const auto message = [&](const std::vector<std::byte>& b) {
        return malformed_message(b, size);
    };
    const auto has = [](const std::string& text, const std::string& part) {
        BOOST_TEST(text.find("'hostile.model' is not a valid GGUF file: ") == 0u, text);
        BOOST_TEST(text.find(part) != std::string::npos, text);
    };
    has(message(with_u32(4, 1)), "version: version 1 (32-bit counts) is not supported");
    has(message(with_u32(4, 0x03000000)), "version: a big-endian GGUF file");
    has(message(with_u32(4, 4)), "version: 4 is not supported");
    has(message(with_u64(8, 1ull << 60)),
        "tensor_count: 1152921504606846976 tensor infos cannot fit");
    has(message(with_u64(16, ~0ull)), "metadata_kv_count: 18446744073709551615 key/value pairs");

    // Fields of the first tensor info, found by its name.
    const std::string first = plan.layout.tensors[0].name;
    std::size_t name_at = 0;
    for (std::size_t i = 8; i + first.size() < good.size(); ++i) {
        if (std::memcmp(good.data() + i, first.data(), first.size()) == 0 &&
            good[i - 8] == static_cast<std::byte>(first.size()))
            name_at = i;
    }
    BOOST_REQUIRE(name_at != 0);
    const std::size_t dims_at = name_at + first.size();
    const auto dims = static_cast<std::size_t>(plan.layout.tensors[0].shape.size());
    const std::size_t type_at = dims_at + 4 + 8 * dims;
    const std::size_t offset_at = type_at + 4;
    has(message(with_u32(dims_at, 5)), "n_dims: 5 is more than 4");
    has(message(with_u32(type_at, 4)), "type: ggml type 4 is unknown to this loader");
    has(message(with_u32(type_at, 999)), "type: ggml type 999 is unknown");
    has(message(with_u64(dims_at + 4, 1ull << 63)), "has more than 2^63 - 1 elements");
    has(message(with_u64(offset_at, 33)), "offset: 33 is not a multiple of general.alignment (32)");
    has(message(with_u64(offset_at, 0xFFFFFFFFFFFFFFE0ull)), "offset: passes 2^64 bytes");
    has(message(with_u64(offset_at, (size / 32 + 1) * 32)), "pass the end of the file");
    // Tensor 0 (F32) moved onto tensor 1's bytes.
    has(message(with_u64(offset_at, plan.layout.tensors[1].offset - plan.layout.data_offset)),
        "overlap tensor");
    // A Q4_0 tensor whose first dimension is not a whole number of 32-element blocks.
    std::vector<std::byte> split = with_u32(type_at, 2);
    put_u64(split, dims_at + 4, 33);
    has(message(split), "the first dimension 33 is not a multiple of Q4_0's 32-element blocks");
    std::vector<std::byte> truncated(good.begin(), good.begin() + static_cast<long>(offset_at));
    has(malformed_message(truncated, truncated.size()), "past the end of the file");
}

BOOST_AUTO_TEST_CASE(gguf_metadata_is_checked_by_type_and_count) {
    // A minimal GGUF: header, one key/value, no tensors.
    const auto file_with = [](const std::string& key, std::uint32_t type,
                              const std::vector<std::byte>& value) {
        std::vector<std::byte> b;
        model::detail::byte_writer w{b};
        w.put<std::uint32_t>(0x46554747u);
        w.put<std::uint32_t>(3);
        w.put<std::uint64_t>(0);
        w.put<std::uint64_t>(1);
        w.put_key(key, type);
        b.insert(b.end(), value.begin(), value.end());
        return b;
    };
    const auto u32 = [](std::uint32_t v) {
        std::vector<std::byte> b;
        model::detail::byte_writer{b}.put(v);
        return b;
    };
    const auto check = [](const std::vector<std::byte>& b, const std::string& part) {
        const std::string text = malformed_message(b, b.size());
        BOOST_TEST(text.find(part) != std::string::npos, text);
    };
    check(file_with("general.alignment", 4, u32(0)),
          "'general.alignment': 0 is not a power of two");
    check(file_with("general.alignment", 4, u32(48)), "48 is not a power of two");
    check(file_with("general.alignment", 10, u32(32)), "must be a uint32 (type 4), not type 10");
    check(file_with("k", 13, u32(0)), "'k': unknown value type 13");
    // An array claiming 2^62 uint64 elements: refused before any loop.
    std::vector<std::byte> huge = u32(10);
    huge.resize(12);
    put_u64(huge, 4, 1ull << 62);
    check(file_with("k", 9, huge), "4611686018427387904 elements of at least 8 bytes do not fit");
    // Arrays nested past the limit.
    std::vector<std::byte> nested;
    for (int i = 0; i < 12; ++i) {
        const std::vector<std::byte> head = u32(9);
        nested.insert(nested.end(), head.begin(), head.end());
        nested.resize(nested.size() + 8);
        put_u64(nested, nested.size() - 8, 1);
    }
    check(file_with("k", 9, nested), "arrays nested deeper than 8");
    // A string longer than the file.
    std::vector<std::byte> long_string(8);
    put_u64(long_string, 0, 1000);
    check(file_with("k", 8, long_string), "past the end of the file");
    // A well-formed key/value and no tensors parses.
    std::vector<std::byte> ok = file_with("k", 0, {std::byte{5}});
    BOOST_TEST(parse_header(ok, ok.size()).tensors.empty());
}

BOOST_AUTO_TEST_CASE(mutated_headers_never_crash_hang_or_yield_an_out_of_range_tensor,
                     *boost::unit_test::timeout(120)) {
    const std::uint64_t cases =
        env_number("NVMEIO_FUZZ_CASES", nvmeio_test::sanitized ? 600 : 6000);
    const std::uint64_t first_seed = env_number("NVMEIO_FUZZ_SEED", 1);
    const model::planned_model bases[] = {small_plan(model::format::gguf, 3, 32),
                                          small_plan(model::format::gguf, 2, 64),
                                          small_plan(model::format::safetensors)};
    unsigned accepted = 0;
    unsigned tried = 0;
    for (std::uint64_t seed = first_seed; seed < first_seed + cases; ++seed) {
        for (const model::planned_model& base : bases) {
            std::mt19937_64 random(seed * 3 + (&base - bases));
            const bool structural =
                base.layout.kind == model::format::safetensors && random() % 2 == 0;
            const std::vector<std::byte> header =
                structural ? mutate_json(base.header, random) : mutate(base.header, random);
            // The file may end right after the header, hold the planned data, or be cut short.
            const std::uint64_t sizes[] = {header.size(), base.layout.file_size,
                                           header.size() + random() % 4096};
            const std::uint64_t file_size =
                std::max<std::uint64_t>(header.size(), sizes[random() % std::size(sizes)]);
            ++tried;
            const std::string broken = fuzz_one(header, file_size, accepted);
            if (!broken.empty()) {
                BOOST_FAIL("NVMEIO_FUZZ_SEED=" << seed << " NVMEIO_FUZZ_CASES=1 ("
                                               << model::to_string(base.layout.kind)
                                               << "): " << broken);
            }
        }
    }
    BOOST_TEST_MESSAGE(tried << " mutated headers, " << accepted << " accepted");
    // Some mutations (a flipped padding byte, a changed name) must still parse, or the fuzzer is
    // only exercising the first check.
    BOOST_TEST(accepted > 0u);
    BOOST_TEST(accepted < tried);
}
