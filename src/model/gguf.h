// GGUF reader: parses and strictly validates a GGUF v2/v3 file (memory
// mapped, or read into memory as a fallback), exposes its metadata and
// tensor table. Every malformation is refused with lctx::Error
// (LCTX_ERR_FORMAT, LCTX_ERR_IO or LCTX_ERR_UNSUPPORTED) and a precise message.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/ggml_type.h"

namespace lctx {

enum class GgufValueType : uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
    BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

// One metadata value. Scalars are widened: integers and bools in i (or u for
// UINT64), floats in f. Arrays hold their elements (arrays may nest).
struct GgufValue {
    GgufValueType type = GgufValueType::UINT8;
    int64_t i = 0;
    uint64_t u = 0;
    double f = 0.0;
    std::string str;
    GgufValueType elem_type = GgufValueType::UINT8; // for ARRAY
    std::vector<GgufValue> arr;                      // for ARRAY

    bool is_integer() const;  // any int type or bool
    std::string to_string(size_t max_array_items = 8) const; // for printing
};

struct GgufKV {
    std::string key;
    GgufValue value;
};

struct GgufTensorInfo {
    std::string name;
    uint32_t n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
    GgmlType type = GgmlType::F32;
    uint64_t offset = 0;           // relative to the data section
    size_t nbytes = 0;
    const uint8_t *data = nullptr; // into the mapped/loaded file
    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class GgufFile {
public:
    // Throws lctx::Error on any failure.
    static std::unique_ptr<GgufFile> open(const std::string &path, bool use_mmap = true);
    // Copies the buffer.
    static std::unique_ptr<GgufFile> from_memory(const void *data, size_t size);
    ~GgufFile();
    GgufFile(const GgufFile &) = delete;
    GgufFile &operator=(const GgufFile &) = delete;

    uint32_t version() const { return version_; }
    size_t alignment() const { return alignment_; }
    size_t file_size() const { return size_; }
    bool is_mmapped() const { return mapped_; }

    const std::vector<GgufKV> &metadata() const { return kvs_; }
    const GgufValue *find(std::string_view key) const;  // nullptr if absent

    // Typed getters. The *_or forms return the default when the key is absent;
    // all throw LCTX_ERR_FORMAT when present with an incompatible type, and
    // the plain forms throw LCTX_ERR_FORMAT "missing required key 'K'".
    std::string get_string(std::string_view key) const;
    std::string get_string_or(std::string_view key, const std::string &def) const;
    int64_t get_int(std::string_view key) const;                    // any integer type
    int64_t get_int_or(std::string_view key, int64_t def) const;
    double get_float(std::string_view key) const;                   // float or integer
    double get_float_or(std::string_view key, double def) const;
    bool get_bool_or(std::string_view key, bool def) const;
    std::vector<std::string> get_string_array(std::string_view key) const;   // throws if absent
    std::vector<float> get_float_array_or_empty(std::string_view key) const; // numeric array
    std::vector<int32_t> get_int_array_or_empty(std::string_view key) const; // integer array

    const std::vector<GgufTensorInfo> &tensors() const { return tensors_; }
    const GgufTensorInfo *find_tensor(std::string_view name) const;  // nullptr if absent

private:
    GgufFile() = default;
    void parse();

    uint32_t version_ = 0;
    size_t alignment_ = 32;
    const uint8_t *base_ = nullptr;
    size_t size_ = 0;
    bool mapped_ = false;
    std::vector<uint8_t> owned_;  // when not mmapped
    std::vector<GgufKV> kvs_;
    std::vector<GgufTensorInfo> tensors_;
};

} // namespace lctx
