// GGUF parsing and validation. Every read is bounds checked against the
// bytes left, and no count from the file is used to allocate before it has
// been checked to fit in those bytes.
#include "model/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "common/error.h"
#include "model/gguf_types.h"

namespace lctx {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr size_t kHeaderSize = 4 + 4 + 8 + 8;
constexpr int kMaxArrayDepth = 8;
// GgufValue is ~100 bytes, so a file of N bytes could otherwise expand into
// 100*N bytes of arrays; real vocabularies stay far below this.
constexpr uint64_t kMaxArrayElements = uint64_t(1) << 24;
constexpr uint64_t kMaxKeyLength = 65535;  // GGUF spec limit for keys

class Reader {
public:
    Reader(const uint8_t *base, size_t size) : base_(base), size_(size) {}

    size_t pos() const { return pos_; }
    size_t left() const { return size_ - pos_; }

    void need(size_t n, const std::string &what) const {
        if (n > left())
            fail(LCTX_ERR_FORMAT, "truncated while reading %s at offset %zu: need %zu bytes, %zu left",
                 what.c_str(), pos_, n, left());
    }
    template <typename T> T read(const std::string &what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, base_ + pos_, sizeof(T));  // little-endian host assumed
        pos_ += sizeof(T);
        return v;
    }
    std::string read_string(const std::string &what, uint64_t max_len = std::numeric_limits<uint64_t>::max()) {
        const size_t at = pos_;
        const uint64_t len = read<uint64_t>(what + " length");
        if (len > left())
            fail(LCTX_ERR_FORMAT, "%s length %llu at offset %zu overflows the file (%zu bytes left)", what.c_str(),
                 static_cast<unsigned long long>(len), at, left());
        if (len > max_len)
            fail(LCTX_ERR_FORMAT, "%s length %llu at offset %zu exceeds the limit of %llu bytes", what.c_str(),
                 static_cast<unsigned long long>(len), at, static_cast<unsigned long long>(max_len));
        std::string s(reinterpret_cast<const char *>(base_ + pos_), static_cast<size_t>(len));
        pos_ += static_cast<size_t>(len);
        return s;
    }

private:
    const uint8_t *base_;
    size_t size_;
    size_t pos_ = 0;
};

// Smallest encoding of one value of the type (for count plausibility checks).
uint64_t min_encoded_size(GgufValueType t) {
    switch (t) {
    case GgufValueType::STRING: return 8;
    case GgufValueType::ARRAY: return 4 + 8;
    default: return gguf_scalar_size(t);
    }
}

class Parser {
public:
    Parser(const uint8_t *base, size_t size) : r_(base, size), size_(size) {}

    GgufValue read_value(GgufValueType type, const std::string &key, int depth) {
        GgufValue v;
        v.type = type;
        const std::string what = "value of key '" + key + "'";
        switch (type) {
        case GgufValueType::UINT8: set_unsigned(v, r_.read<uint8_t>(what)); break;
        case GgufValueType::INT8: set_signed(v, r_.read<int8_t>(what)); break;
        case GgufValueType::UINT16: set_unsigned(v, r_.read<uint16_t>(what)); break;
        case GgufValueType::INT16: set_signed(v, r_.read<int16_t>(what)); break;
        case GgufValueType::UINT32: set_unsigned(v, r_.read<uint32_t>(what)); break;
        case GgufValueType::INT32: set_signed(v, r_.read<int32_t>(what)); break;
        case GgufValueType::UINT64: set_unsigned(v, r_.read<uint64_t>(what)); break;
        case GgufValueType::INT64: set_signed(v, r_.read<int64_t>(what)); break;
        case GgufValueType::FLOAT32: v.f = r_.read<float>(what); break;
        case GgufValueType::FLOAT64: v.f = r_.read<double>(what); break;
        case GgufValueType::BOOL: {
            const size_t at = r_.pos();
            const uint8_t b = r_.read<uint8_t>(what);
            if (b > 1) fail(LCTX_ERR_FORMAT, "bool value of key '%s' at offset %zu is %u (must be 0 or 1)", key.c_str(), at, b);
            set_unsigned(v, b);
            break;
        }
        case GgufValueType::STRING: v.str = r_.read_string("string " + what); break;
        case GgufValueType::ARRAY: read_array(v, key, depth); break;
        }
        return v;
    }

    void read_array(GgufValue &v, const std::string &key, int depth) {
        if (depth >= kMaxArrayDepth)
            fail(LCTX_ERR_FORMAT, "arrays of key '%s' are nested deeper than %d levels", key.c_str(), kMaxArrayDepth);
        const size_t at = r_.pos();
        const uint32_t et = r_.read<uint32_t>("array element type of key '" + key + "'");
        if (!gguf_valid_value_type(et))
            fail(LCTX_ERR_FORMAT, "invalid array element type %u for key '%s' at offset %zu", et, key.c_str(), at);
        v.elem_type = static_cast<GgufValueType>(et);
        const uint64_t count = r_.read<uint64_t>("array length of key '" + key + "'");
        const uint64_t min_size = min_encoded_size(v.elem_type);
        if (count > r_.left() / min_size)
            fail(LCTX_ERR_FORMAT,
                 "array element count %llu of key '%s' overflows the file (%llu items of >= %llu bytes, %zu bytes left)",
                 static_cast<unsigned long long>(count), key.c_str(), static_cast<unsigned long long>(count),
                 static_cast<unsigned long long>(min_size), r_.left());
        array_elements_ += count;
        if (array_elements_ > kMaxArrayElements)
            fail(LCTX_ERR_UNSUPPORTED, "metadata arrays hold more than %llu elements in total (key '%s')",
                 static_cast<unsigned long long>(kMaxArrayElements), key.c_str());
        v.arr.reserve(static_cast<size_t>(count));
        for (uint64_t k = 0; k < count; ++k) v.arr.push_back(read_value(v.elem_type, key, depth + 1));
    }

    Reader r_;
    size_t size_;
    uint64_t array_elements_ = 0;

private:
    static void set_unsigned(GgufValue &v, uint64_t x) {
        v.u = x;
        v.i = static_cast<int64_t>(x);  // UINT64 above INT64_MAX is caught by get_int
        v.f = static_cast<double>(x);
    }
    static void set_signed(GgufValue &v, int64_t x) {
        v.i = x;
        v.u = static_cast<uint64_t>(x);
        v.f = static_cast<double>(x);
    }
};

bool mul_overflows(uint64_t a, uint64_t b, uint64_t limit) { return a != 0 && b > limit / a; }

} // namespace

void GgufFile::parse() {
    if (size_ < kHeaderSize)
        fail(LCTX_ERR_FORMAT, "file is too small to be GGUF: %zu bytes, the header alone is %zu", size_, kHeaderSize);
    Parser p(base_, size_);
    Reader &r = p.r_;

    const uint32_t magic = r.read<uint32_t>("header");
    if (magic != kMagic)
        fail(LCTX_ERR_FORMAT, "bad magic 0x%08x: not a GGUF file (expected \"GGUF\")", magic);
    version_ = r.read<uint32_t>("header");
    if (version_ == 0x02000000u || version_ == 0x03000000u)
        fail(LCTX_ERR_UNSUPPORTED, "big-endian GGUF files are not supported");
    if (version_ == 1)
        fail(LCTX_ERR_UNSUPPORTED, "GGUF version 1 is not supported (only versions 2 and 3); re-convert the model");
    if (version_ != 2 && version_ != 3)
        fail(LCTX_ERR_UNSUPPORTED, "unsupported GGUF version %u (only versions 2 and 3)", version_);
    const uint64_t n_tensors = r.read<uint64_t>("header");
    const uint64_t n_kv = r.read<uint64_t>("header");
    // A kv takes >= 13 bytes (key length, type, 1-byte value); a tensor info
    // >= 24 (name length, n_dims, type, offset).
    if (n_kv > r.left() / 13)
        fail(LCTX_ERR_FORMAT, "absurd kv count %llu for a file of %zu bytes", static_cast<unsigned long long>(n_kv), size_);
    if (n_tensors > r.left() / 24)
        fail(LCTX_ERR_FORMAT, "absurd tensor count %llu for a file of %zu bytes",
             static_cast<unsigned long long>(n_tensors), size_);

    kvs_.clear();
    kvs_.reserve(static_cast<size_t>(n_kv));
    std::unordered_set<std::string> keys;
    for (uint64_t k = 0; k < n_kv; ++k) {
        const std::string where = "key of kv " + std::to_string(k);
        const size_t at = r.pos();
        GgufKV kv;
        kv.key = r.read_string(where, kMaxKeyLength);
        if (kv.key.empty()) fail(LCTX_ERR_FORMAT, "empty key of kv %llu at offset %zu", static_cast<unsigned long long>(k), at);
        if (!keys.insert(kv.key).second) fail(LCTX_ERR_FORMAT, "duplicate key '%s' at offset %zu", kv.key.c_str(), at);
        const size_t type_at = r.pos();
        const uint32_t t = r.read<uint32_t>("value type of key '" + kv.key + "'");
        if (!gguf_valid_value_type(t))
            fail(LCTX_ERR_FORMAT, "invalid value type %u for key '%s' at offset %zu", t, kv.key.c_str(), type_at);
        kv.value = p.read_value(static_cast<GgufValueType>(t), kv.key, 0);
        kvs_.push_back(std::move(kv));
    }

    alignment_ = 32;
    if (const GgufValue *a = find("general.alignment")) {
        if (!a->is_integer() || a->type == GgufValueType::BOOL)
            fail(LCTX_ERR_FORMAT, "general.alignment has type %s, expected an unsigned integer",
                 gguf_type_name(*a).c_str());
        const bool neg = a->type != GgufValueType::UINT64 && a->i < 0;
        if (neg || a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > (uint64_t(1) << 30))
            fail(LCTX_ERR_FORMAT, "general.alignment = %s is not a power of two in [1, 2^30]", a->to_string().c_str());
        alignment_ = static_cast<size_t>(a->u);
    }

    tensors_.clear();
    tensors_.reserve(static_cast<size_t>(n_tensors));
    std::unordered_set<std::string> names;
    for (uint64_t k = 0; k < n_tensors; ++k) {
        const size_t at = r.pos();
        GgufTensorInfo t;
        t.name = r.read_string("name of tensor info " + std::to_string(k));
        if (t.name.empty())
            fail(LCTX_ERR_FORMAT, "empty name of tensor %llu at offset %zu", static_cast<unsigned long long>(k), at);
        if (!names.insert(t.name).second) fail(LCTX_ERR_FORMAT, "duplicate tensor name '%s' at offset %zu", t.name.c_str(), at);
        const char *nm = t.name.c_str();
        const std::string what = "tensor info '" + t.name + "'";
        t.n_dims = r.read<uint32_t>(what);
        if (t.n_dims > 4) fail(LCTX_ERR_FORMAT, "tensor '%s' has %u dimensions (at most 4)", nm, t.n_dims);
        uint64_t n_elements = 1;
        for (uint32_t d = 0; d < t.n_dims; ++d) {
            const int64_t ne = r.read<int64_t>(what);
            if (ne <= 0)
                fail(LCTX_ERR_FORMAT, "dimension %u of tensor '%s' is %lld (must be positive)", d, nm, static_cast<long long>(ne));
            if (mul_overflows(n_elements, static_cast<uint64_t>(ne), static_cast<uint64_t>(INT64_MAX)))
                fail(LCTX_ERR_FORMAT, "element count of tensor '%s' overflows 64 bits", nm);
            n_elements *= static_cast<uint64_t>(ne);
            t.ne[d] = ne;
        }
        const uint32_t type = r.read<uint32_t>(what);
        const GgmlTypeInfo *info = ggml_type_info(type);
        if (!info) fail(LCTX_ERR_UNSUPPORTED, "tensor '%s' has unknown or unsupported type %u", nm, type);
        t.type = static_cast<GgmlType>(type);
        t.offset = r.read<uint64_t>(what);
        if (t.ne[0] % info->block_size != 0)
            fail(LCTX_ERR_FORMAT, "row size %lld of tensor '%s' is not a multiple of the %s block size %lld",
                 static_cast<long long>(t.ne[0]), nm, info->name, static_cast<long long>(info->block_size));
        const uint64_t n_blocks = n_elements / static_cast<uint64_t>(info->block_size);
        if (mul_overflows(n_blocks, info->type_size, std::numeric_limits<size_t>::max()))
            fail(LCTX_ERR_FORMAT, "byte size of tensor '%s' overflows", nm);
        t.nbytes = static_cast<size_t>(n_blocks * info->type_size);
        if (t.offset % alignment_ != 0)
            fail(LCTX_ERR_FORMAT, "offset %llu of tensor '%s' is not a multiple of the alignment %zu",
                 static_cast<unsigned long long>(t.offset), nm, alignment_);
        tensors_.push_back(std::move(t));
    }

    // The data section starts at the next multiple of the alignment; a file
    // without tensors may end before it.
    const size_t pad = (alignment_ - r.pos() % alignment_) % alignment_;
    const size_t data_start = r.pos() + pad;
    if (tensors_.empty()) return;
    if (data_start > size_)
        fail(LCTX_ERR_FORMAT, "data section at offset %zu starts beyond the end of the file (%zu bytes)", data_start, size_);
    const size_t data_size = size_ - data_start;
    for (GgufTensorInfo &t : tensors_) {
        if (t.offset > data_size || t.nbytes > data_size - t.offset)
            fail(LCTX_ERR_FORMAT,
                 "data of tensor '%s' (%zu bytes at data offset %llu) is out of bounds of the file (data section: %zu bytes)",
                 t.name.c_str(), t.nbytes, static_cast<unsigned long long>(t.offset), data_size);
        t.data = base_ + data_start + t.offset;
    }
    std::vector<const GgufTensorInfo *> by_offset;
    by_offset.reserve(tensors_.size());
    for (const GgufTensorInfo &t : tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensorInfo *a, const GgufTensorInfo *b) { return a->offset < b->offset; });
    for (size_t k = 1; k < by_offset.size(); ++k) {
        const GgufTensorInfo *a = by_offset[k - 1], *b = by_offset[k];
        if (a->offset + a->nbytes > b->offset)
            fail(LCTX_ERR_FORMAT, "data of tensors '%s' and '%s' overlap", a->name.c_str(), b->name.c_str());
    }
}

const GgufValue *GgufFile::find(std::string_view key) const {
    for (const GgufKV &kv : kvs_)
        if (kv.key == key) return &kv.value;
    return nullptr;
}

const GgufTensorInfo *GgufFile::find_tensor(std::string_view name) const {
    for (const GgufTensorInfo &t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

} // namespace lctx
