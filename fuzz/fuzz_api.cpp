// Random sequences of lctx calls with random arguments on the micro model:
// up to 4 sessions of any method with fuzzed knobs (negative, zero, huge),
// feeds of random (also out-of-range) ids, every stage call in any order,
// cancels, sampling with fuzzed parameters, teacher-forced tokens,
// selections used across sessions, index saves and loads, RefreshKV stats. Every status is checked (fuzz::check):
// a known code, a message on failure, never LCTX_ERR_INTERNAL; and a few
// invariants of the stage machine.

#include "fuzz_common.h"
#include "scratch_path.h"

namespace {

int32_t knob(fuzz::Bytes &in) {
    switch (in.u8() % 8) {
    case 0: return 0;
    case 1: return -1 - in.u8();
    case 2: return int32_t(1) << (in.u8() % 31);
    case 3: return in.i32();
    default: return 1 + in.u8() % 64;
    }
}

float real(fuzz::Bytes &in) {
    switch (in.u8() % 6) {
    case 0: return 0.0f;
    case 1: return -1.0f;
    case 2: return 1e30f;
    case 3: return std::nanf("");
    default: return static_cast<float>(in.u8()) / 64.0f;
    }
}

struct Slot {
    lctx_session *s = nullptr;
    lctx_selection *sel = nullptr;
};

int cancel_sometimes(float, void *ud) {
    // A fuzzed struct_size ending right after `progress` leaves
    // progress_user_data at its default, NULL: the library then calls the
    // callback with NULL, as the caller asked.
    auto *n = static_cast<int *>(ud);
    return n && (*n)-- == 0;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const lctx_model *m = fuzz::micro_model();
    static const std::string path = scratch::path("lctx_fuzz_api", "scratch.lctx");   // removed at exit
    fuzz::Bytes in{data, size};
    Slot slots[4];
    int cancel_after = -1;
    for (int step = 0; step < 48 && !in.empty(); ++step) {
        Slot &sl = slots[in.u8() % 4];
        const int op = in.u8() % 12;
        switch (op) {
        case 0: {   // create (replaces the slot's session)
            lctx_selection_free(sl.sel);
            sl.sel = nullptr;
            lctx_session_free(sl.s);
            sl.s = nullptr;
            lctx_reform_params rp;
            lctx_reform_default_params(&rp);
            lctx_kv_params kp;
            lctx_kv_default_params(&kp);
            lctx_infllm_params ip;
            lctx_infllm_default_params(&ip);
            lctx_session_params sp;
            lctx_session_default_params(&sp);
            const int32_t method = static_cast<int32_t>(in.u8() % 14) - 1;   // -1 and 12 are not methods
            std::memcpy(&sp.method, &method, sizeof method);
            sp.n_ctx = 16 + in.u8() % 240;
            sp.n_threads = 1;
            sp.n_batch = knob(in);
            if (in.u8() & 1) {
                sp.progress = cancel_sometimes;
                sp.progress_user_data = &cancel_after;
            }
            rp.chunk = knob(in) % 96;
            rp.budget = knob(in) % 96;
            rp.recompute = knob(in) % 96;
            rp.sink = knob(in) % 16;
            rp.recent = knob(in) % 16;
            rp.obs = knob(in) % 32;
            rp.pool_half = knob(in) % 8;
            rp.repeat_window = knob(in) % 24;
            const int32_t ev = in.u8() % 5;
            std::memcpy(&rp.evictor, &ev, sizeof ev);
            kp.budget = knob(in) % 128;
            kp.chunk = knob(in) % 96;
            kp.sink = knob(in) % 16;
            kp.recent = knob(in) % 64;
            kp.obs = knob(in) % 32;
            kp.snapkv_kernel = knob(in) % 9;
            kp.infinipot_nuc_ratio = real(in);
            ip.block = knob(in) % 32;
            ip.repr = knob(in) % 8;
            lctx_ilre_params lp;
            lctx_ilre_default_params(&lp);
            lp.retrieval_layer = knob(in) % 4;   // the tiny model has 2 layers: 2, 3 are refused
            lp.sink = knob(in) % 8;
            lp.window = knob(in) % 48;
            lp.chunk = knob(in) % 64;
            lp.budget = knob(in) % 96;
            lp.query_tokens = knob(in) % 16;
            lp.repeat_window = knob(in) % 24;
            lp.dca = in.u8() & 1;
            static const char *const kKernels[] = {nullptr, "2,4,8", "1-16", "3", "1-4,9", "x", "0", "8-1"};
            lp.max_kernels = kKernels[in.u8() % 8];
            lp.avg_kernels = kKernels[in.u8() % 8];
            // ReAttention: -1 (derived), refused and small sizes; a spilling K/V store now and then.
            lctx_reattention_params ap;
            lctx_reattention_default_params(&ap);
            ap.n_global = knob(in) % 16;
            ap.n_local = knob(in) % 96;
            ap.span = knob(in) % 16;
            ap.top_k = knob(in) % 8;
            ap.n_spans = knob(in) % 8;
            ap.chunk = knob(in) % 48;
            ap.reuse_steps = knob(in) % 4;
            ap.tile_max = in.u8() & 1;
            ap.store_max_ram = in.u8() % 4 == 0 ? uint64_t(in.u8()) * 64 : 0;
            ap.store_dir = in.u8() % 8 == 0 ? "/nonexistent/lctx" : nullptr;
            // RefreshKV (and REFORM/ILRe decoding with it when gathered).
            lctx_refreshkv_params fp;
            lctx_refreshkv_default_params(&fp);
            fp.partial = knob(in) % 32;
            fp.stride = knob(in) % 8;
            fp.threshold = real(in);
            const int32_t schedule = in.u8() % 3;   // 2 is not a schedule
            std::memcpy(&fp.schedule, &schedule, sizeof schedule);
            fp.pool_kernel = knob(in) % 10;
            fp.max_partial_run = knob(in) % 6;
            fp.gathered = in.u8() & 1;
            const int32_t kv_type = in.u8() % 3;
            std::memcpy(&sp.kv_type, &kv_type, sizeof kv_type);
            sp.reform = &rp;
            sp.kv = &kp;
            sp.infllm = &ip;
            sp.ilre = &lp;
            sp.reattention = &ap;
            sp.refreshkv = &fp;
            if (in.u8() % 8 == 0) sp.struct_size = in.u8();   // also too small / odd sizes
            if (fuzz::check(lctx_session_create(m, &sp, &sl.s), "lctx_session_create") != LCTX_OK && sl.s) std::abort();
            break;
        }
        case 1: case 2: {   // feed
            std::vector<lctx_token> t(in.u8() % 48);
            for (lctx_token &x : t) x = in.u8() == 255 ? in.i32() : 3 + in.u8();   // mostly valid ids
            const int64_t before = lctx_session_n_fed(sl.s);
            const lctx_status st = fuzz::check(lctx_feed_chunk(sl.s, t.data(), t.size()), "lctx_feed_chunk");
            const int64_t after = lctx_session_n_fed(sl.s);
            if (st == LCTX_OK && sl.s && after != before + static_cast<int64_t>(t.size())) std::abort();
            if (after < before) std::abort();
            break;
        }
        case 3: {
            const lctx_stage before = lctx_session_stage(sl.s);
            const lctx_status st = fuzz::check(lctx_build_index(sl.s), "lctx_build_index");
            if (st != LCTX_OK && sl.s && lctx_session_stage(sl.s) != before) std::abort();   // failure changes no stage
            break;
        }
        case 4: {
            std::vector<lctx_token> q(in.u8() % 12);
            for (lctx_token &x : q) x = 3 + in.u8();
            lctx_selection *sel = nullptr;
            if (fuzz::check(lctx_select(sl.s, q.data(), q.size(), &sel), "lctx_select") == LCTX_OK) {
                lctx_selection_free(sl.sel);
                sl.sel = sel;
                std::vector<int64_t> pos(static_cast<size_t>(lctx_selection_size(sel)));
                lctx_selection_positions(sel, pos.data(), static_cast<int64_t>(pos.size()));
                for (size_t i = 1; i < pos.size(); ++i)
                    if (pos[i] <= pos[i - 1]) std::abort();   // ascending
            } else if (sel) {
                std::abort();
            }
            break;
        }
        case 5: {   // recompute, possibly with another session's selection
            const Slot &other = slots[in.u8() % 4];
            (void)fuzz::check(lctx_recompute(sl.s, other.sel), "lctx_recompute");
            break;
        }
        case 6: case 7: {
            lctx_sampling_params p;
            lctx_sampling_default_params(&p);
            p.temperature = real(in);
            p.top_k = knob(in);
            p.top_p = real(in);
            p.min_p = real(in);
            p.repeat_penalty = real(in);
            p.repeat_last_n = knob(in) % 100;
            p.seed = in.u8();
            lctx_token t = -1;
            if (in.u8() % 4 == 0) {   // teacher forcing with a (mostly valid) given token
                t = in.u8() == 255 ? in.i32() : in.u8();
                float lp = 1.0f;
                if (fuzz::check(lctx_decode_token(sl.s, t, &lp), "lctx_decode_token") == LCTX_OK && lp > 1e-3f)
                    std::abort();   // a log-probability
                break;
            }
            if (fuzz::check(lctx_decode(sl.s, &p, &t), "lctx_decode") == LCTX_OK &&
                (t < 0 || t >= lctx_model_n_vocab(m)))
                std::abort();
            break;
        }
        case 8:
            lctx_session_cancel(sl.s);
            cancel_after = in.u8() % 8;
            break;
        case 9:
            (void)fuzz::check(lctx_index_save(sl.s, path.c_str()), "lctx_index_save");
            break;
        case 10: {
            lctx_selection_free(sl.sel);
            sl.sel = nullptr;
            lctx_session_free(sl.s);
            sl.s = nullptr;
            lctx_session_params sp;
            lctx_session_default_params(&sp);
            sp.n_ctx = 16 + in.u8() % 240;
            sp.n_threads = 1;
            lctx_reform_params rp;
            lctx_reform_default_params(&rp);
            rp.recompute = 8;
            sp.reform = &rp;
            if (fuzz::check(lctx_session_load_index(m, path.c_str(), &sp, &sl.s), "lctx_session_load_index") !=
                    LCTX_OK && sl.s)
                std::abort();
            break;
        }
        default: {   // logits and getters
            const float *l = lctx_session_logits(sl.s);
            if (l && lctx_session_stage(sl.s) != LCTX_STAGE_DECODING) std::abort();
            (void)lctx_session_last_error(sl.s);
            lctx_refreshkv_stats st{};
            st.struct_size = in.u8() % 8 == 0 ? in.u8() : sizeof st;   // also too small / odd sizes
            int64_t full[4] = {-1, -1, -1, -1}, part[4] = {-1, -1, -1, -1};
            const size_t cap = in.u8() % 5;
            if (fuzz::check(lctx_session_refreshkv_stats(sl.s, &st, full, part, cap), "lctx_session_refreshkv_stats") ==
                    LCTX_OK &&
                st.struct_size == sizeof st) {
                if (st.n_full + st.n_partial != st.n_steps * st.n_layer) std::abort();   // every layer step counted
                for (size_t i = 0; i < cap && i < static_cast<size_t>(st.n_layer); ++i)
                    if (full[i] + part[i] != st.n_steps) std::abort();
            }
            // Per-op times: sessions are made without LCTX_PROFILE_OPS here, so
            // UNSUPPORTED, or (with it in the environment) entries that add up.
            lctx_op_time ops[4]{};
            size_t n_ops = 0;
            double life = 0;
            if (fuzz::check(lctx_session_op_times(sl.s, cap ? ops : nullptr, cap, &n_ops, &life),
                            "lctx_session_op_times") == LCTX_OK)
                for (size_t i = 0; i < cap && i < n_ops; ++i)
                    if (!ops[i].op || ops[i].calls <= 0 || ops[i].seconds < 0 || ops[i].seconds > life) std::abort();
            break;
        }
        }
    }
    for (Slot &sl : slots) {
        lctx_selection_free(sl.sel);
        lctx_session_free(sl.s);
    }
    return 0;
}
