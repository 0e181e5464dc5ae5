// Backend::token_surprisal (the NuC scores of InfiniPot, the log-probability
// of lctx_decode_token): the CPU backend's SIMD rows and the portable
// default against -log softmax in long double written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/op_timing_backend.h"

using namespace lctx;

namespace {

std::vector<double> brute(const std::vector<float> &logits, int64_t rows, int64_t V, const std::vector<int32_t> &tok) {
    std::vector<double> out(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        const float *x = logits.data() + r * V;
        long double mx = x[0], sum = 0;
        for (int64_t i = 0; i < V; ++i) mx = std::max(mx, static_cast<long double>(x[i]));
        for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<long double>(x[i]) - mx);
        out[size_t(r)] = static_cast<double>(std::log(sum) + mx - x[tok[size_t(r)]]);
    }
    return out;
}

struct Case {
    std::vector<float> logits;
    std::vector<int32_t> tokens;
};

Case make_case(int64_t rows, int64_t V, std::mt19937 &rng) {
    Case c;
    c.logits.resize(static_cast<size_t>(rows * V));
    std::normal_distribution<float> d(0.0f, 4.0f);
    for (auto &x : c.logits) x = d(rng);
    for (int64_t r = 0; r < rows; ++r) {
        c.tokens.push_back(static_cast<int32_t>(rng() % uint32_t(V)));
        if (r % 3 == 0) c.logits[size_t(r * V + c.tokens.back())] = 30.0f;   // a confident, right prediction
    }
    return c;
}

TEST(BackendSurprisal, CpuAndPortableMatchLongDoubleSoftmax) {
    std::mt19937 rng(17);
    for (int threads : {1, 2})
        for (auto [rows, V] : {std::pair<int64_t, int64_t>{1, 1}, {1, 7}, {5, 49152}, {37, 1000}, {3, 262149}}) {
            const Case c = make_case(rows, V, rng);
            const std::vector<double> want = brute(c.logits, rows, V, c.tokens);
            auto be = make_cpu_backend(threads);
            std::vector<float> got(static_cast<size_t>(rows), -1.0f), port(got);
            be->token_surprisal(c.logits.data(), rows, V, c.tokens.data(), got.data());
            token_surprisal_portable(c.logits.data(), rows, V, c.tokens.data(), port.data(), be.get());
            for (int64_t r = 0; r < rows; ++r) {
                const double tol = 2e-6 * std::max(1.0, std::fabs(want[size_t(r)]));
                EXPECT_NEAR(got[size_t(r)], want[size_t(r)], tol) << "cpu rows " << rows << " V " << V << " r " << r;
                EXPECT_NEAR(port[size_t(r)], want[size_t(r)], tol) << "portable rows " << rows << " V " << V;
                EXPECT_GE(got[size_t(r)], 0.0f);
            }
        }
}

TEST(BackendSurprisal, NoRowsWritesNothingAndTheOpIsTimed) {
    auto be = make_cpu_backend(2);
    float out = -3.0f;
    const float logit = 1.0f;
    const int32_t tok = 0;
    be->token_surprisal(&logit, 0, 1, &tok, &out);
    EXPECT_EQ(out, -3.0f);
    OpTimingBackend timed(make_cpu_backend(1));
    timed.token_surprisal(&logit, 1, 1, &tok, &out);   // one logit: probability 1
    EXPECT_EQ(out, 0.0f);
    bool seen = false;
    for (const auto &e : timed.entries())
        if (std::string(e.op) == "token_surprisal") seen = e.calls == 1;
    EXPECT_TRUE(seen);
}

} // namespace
