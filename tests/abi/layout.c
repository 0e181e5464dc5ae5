/* Prints the size and field offsets of the public params structs, one per
 * line, for the ABI guard (check_abi.cmake compares with layout.txt). */
#include <stddef.h>
#include <stdio.h>

#include "lctx.h"

#define SIZE(T) printf("sizeof %s %zu\n", #T, sizeof(T))
#define OFF(T, f) printf("offsetof %s.%s %zu\n", #T, #f, offsetof(T, f))

int main(void) {
    SIZE(lctx_model_params);
    OFF(lctx_model_params, n_threads);
    OFF(lctx_model_params, use_mmap);
    SIZE(lctx_session_params);
    OFF(lctx_session_params, method);
    OFF(lctx_session_params, n_ctx);
    OFF(lctx_session_params, n_threads);
    OFF(lctx_session_params, n_batch);
    OFF(lctx_session_params, progress);
    OFF(lctx_session_params, progress_user_data);
    OFF(lctx_session_params, reform_chunk);
    OFF(lctx_session_params, reform_heads_path);
    OFF(lctx_session_params, kv_budget);
    OFF(lctx_session_params, infinipot_nuc_ratio);
    OFF(lctx_session_params, infinipot_catalyst);
    OFF(lctx_session_params, infllm_repr);
    SIZE(lctx_sampling_params);
    OFF(lctx_sampling_params, temperature);
    OFF(lctx_sampling_params, top_k);
    OFF(lctx_sampling_params, top_p);
    OFF(lctx_sampling_params, min_p);
    OFF(lctx_sampling_params, repeat_penalty);
    OFF(lctx_sampling_params, repeat_last_n);
    OFF(lctx_sampling_params, seed);
    SIZE(lctx_chat_message);
    SIZE(lctx_status);
    SIZE(lctx_method);
    printf("LCTX_ABI_VERSION %d\n", LCTX_ABI_VERSION);
    return 0;
}
