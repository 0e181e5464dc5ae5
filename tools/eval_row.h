// lctx eval, the child side: one row (or the rows of one shared prefill),
// from loading the model to the scored answer, as JSON. cmd_eval.cpp runs
// each in a forked child and adds what only the parent knows (wall time,
// the CPU, pauses).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lctx.h"
#include "method_knobs.h"

namespace lctx::cli {

struct EvalOptions {
    std::string model, out, md, plot, command, backend, essays;
    int threads = 0, samples = 5;
    int first_samples = 5;   // --first-samples: samples 0..first_samples-1 of the `samples` are run
    int64_t oracle_tokens = 0;   // 0: from the model (oracle_window)
    uint64_t seed = 42;
    double timeout = 0;
    bool no_chat = false;
    bool share_prefill = true;   // FULL and RefreshKV rows of a sample from one prefill (--no-share-prefill)
    lctx_precision attn = LCTX_PRECISION_F32, matmul = LCTX_PRECISION_F32;   // --attn, --matmul
    std::string kv = "f32";                                                   // --kv-type
};

struct Combo {
    std::string method_name, task;
    lctx_method method;
    bool refreshkv_decode;   // REFORM/ILRe + RefreshKV decoding (method name "reform+refreshkv")
    bool oracle;             // FULL on the sample cut to the oracle window (method name "oracle")
    std::vector<KnobSetting> settings;   // a method variant's parameters ("reform:recompute=4096")
    int64_t length;
    int sample;
};

// ", \"params\": {...}" of a method variant's settings; "" for a plain method.
std::string params_json(const Combo &c);

// The session params of a combination (method, threads, arithmetic, its
// knobs); n_ctx is left to the caller. `knobs`, a fresh one, must outlive
// the use of sp.
void combo_session_params(const EvalOptions &o, const Combo &c, MethodKnobs &knobs, lctx_session_params &sp);

// The JSON row of one combination (without wall_s and cpu, which the parent
// adds). Failures of lctx calls become an error row.
std::string run_combo(const EvalOptions &o, const Combo &c);

// Whether a combination can take its prefill from FULL's: a RefreshKV method
// (with any settings), not the oracle.
bool decodes_over_full_prefill(const Combo &c);

// The rows of one sample that share FULL's prefill: group[0] is FULL, the
// rest decode_over_full_prefill combinations of the same task, length and
// sample. One session reads the document; FULL answers densely, then each
// RefreshKV method after lctx_session_set_refreshkv. `emit` gets each row as
// it is finished; the later rows carry "prefill_shared_with": "full" and
// "shared_s" (the seconds of loading, generating, tokenizing and prefilling
// that they did not repeat). The parent first asks the library whether a
// FULL session of the model can switch (probe_model).
void run_shared_prefill(const EvalOptions &o, const std::vector<Combo> &group,
                        const std::function<void(const std::string &)> &emit);

// --dump-prompts: writes c's sample (its task, length and sample index, at
// full length; c.method is not used) to DIR as NAME.document.txt and
// NAME.question.txt, the files `lctx run --file --question-file` reads to
// build the same prompt, and NAME.json (run seed and sample seed as the
// rows write them, depth, prompt tokens, the expected answers, the needle
// texts gather recall measures, and that lctx run command with a --probe
// per needle).
// m: the model of o.model, loaded once for every sample. NAME is
// TASK-LENGTH-SAMPLE ("niah_single-128K-2"); returns it. Throws
// std::exception when the sample cannot be built or a file written.
std::string dump_prompt(const EvalOptions &o, const Combo &c, const lctx_model *m, const std::string &dir);

} // namespace lctx::cli
