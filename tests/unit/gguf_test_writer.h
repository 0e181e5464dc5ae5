// Builds GGUF files in memory for tests: a byte buffer with little-endian
// put helpers, and a writer that lays out header, metadata, tensor infos and
// aligned tensor data. Every field can be set to a bad value on purpose.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace gguf_test {

enum VT : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 };

struct Bytes {
    std::vector<uint8_t> b;
    template <typename T> Bytes &put(T v) {
        uint8_t tmp[sizeof(T)];
        std::memcpy(tmp, &v, sizeof(T));
        b.insert(b.end(), tmp, tmp + sizeof(T));
        return *this;
    }
    Bytes &u8(uint8_t v) { return put(v); }
    Bytes &u32(uint32_t v) { return put(v); }
    Bytes &u64(uint64_t v) { return put(v); }
    Bytes &i64(int64_t v) { return put(v); }
    Bytes &str(const std::string &s) {
        u64(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    Bytes &raw(const std::vector<uint8_t> &v) {
        b.insert(b.end(), v.begin(), v.end());
        return *this;
    }
    size_t size() const { return b.size(); }
};

struct TensorSpec {
    std::string name;
    std::vector<int64_t> dims;       // written as given (n_dims = dims.size() unless n_dims set)
    uint32_t type = 0;               // F32
    std::vector<uint8_t> data;       // written into the data section
    std::optional<uint32_t> n_dims;  // override the written n_dims
    std::optional<uint64_t> offset;  // override the computed offset
};

class Writer {
public:
    uint32_t magic = 0x46554747;
    uint32_t version = 3;
    size_t alignment = 32;                  // layout alignment (add general.alignment separately)
    std::optional<uint64_t> n_kv_override;
    std::optional<uint64_t> n_tensors_override;
    size_t truncate_data = 0;               // bytes cut from the end of the file

    // kv with a raw, already encoded value (type + payload).
    Writer &kv_raw(const std::string &key, uint32_t type, const Bytes &payload) {
        kvs.str(key).u32(type).raw(payload.b);
        ++n_kv;
        return *this;
    }
    template <typename T> Writer &kv(const std::string &key, uint32_t type, T v) {
        return kv_raw(key, type, Bytes().put(v));
    }
    Writer &kv_str(const std::string &key, const std::string &v) { return kv_raw(key, STR, Bytes().str(v)); }
    template <typename T> Writer &kv_arr(const std::string &key, uint32_t elem, const std::vector<T> &v) {
        Bytes p;
        p.u32(elem).u64(v.size());
        for (const T &x : v) p.put(x);
        return kv_raw(key, ARR, p);
    }
    Writer &kv_arr_str(const std::string &key, const std::vector<std::string> &v) {
        Bytes p;
        p.u32(STR).u64(v.size());
        for (const auto &s : v) p.str(s);
        return kv_raw(key, ARR, p);
    }
    Writer &tensor(TensorSpec t) {
        tensors.push_back(std::move(t));
        return *this;
    }

    std::vector<uint8_t> build() const {
        Bytes f;
        f.u32(magic).u32(version);
        f.u64(n_tensors_override ? *n_tensors_override : tensors.size());
        f.u64(n_kv_override ? *n_kv_override : n_kv);
        f.raw(kvs.b);
        std::vector<uint64_t> offsets;
        uint64_t off = 0;
        for (const TensorSpec &t : tensors) {
            offsets.push_back(t.offset ? *t.offset : off);
            off += (t.data.size() + alignment - 1) / alignment * alignment;
        }
        for (size_t k = 0; k < tensors.size(); ++k) {
            const TensorSpec &t = tensors[k];
            f.str(t.name).u32(t.n_dims ? *t.n_dims : static_cast<uint32_t>(t.dims.size()));
            for (int64_t d : t.dims) f.i64(d);
            f.u32(t.type).u64(offsets[k]);
        }
        if (!tensors.empty()) {
            while (f.size() % alignment) f.u8(0);
            const size_t data_start = f.size();
            for (size_t k = 0; k < tensors.size(); ++k) {
                // data goes at its computed place (an overridden offset only changes the header)
                uint64_t place = 0;
                for (size_t j = 0; j < k; ++j) place += (tensors[j].data.size() + alignment - 1) / alignment * alignment;
                f.b.resize(std::max(f.size(), data_start + place));
                f.raw(tensors[k].data);
                while ((f.size() - data_start) % alignment) f.u8(0);
            }
        }
        std::vector<uint8_t> out = std::move(f.b);
        out.resize(out.size() - std::min(truncate_data, out.size()));
        return out;
    }

private:
    Bytes kvs;
    uint64_t n_kv = 0;
    std::vector<TensorSpec> tensors;
};

inline std::vector<uint8_t> f32_bytes(const std::vector<float> &v) {
    std::vector<uint8_t> out(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
}

} // namespace gguf_test
