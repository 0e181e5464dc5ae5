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
    OFF(lctx_model_params, max_memory);
    SIZE(lctx_session_params);
    OFF(lctx_session_params, method);
    OFF(lctx_session_params, n_ctx);
    OFF(lctx_session_params, n_threads);
    OFF(lctx_session_params, n_batch);
    OFF(lctx_session_params, progress);
    OFF(lctx_session_params, progress_user_data);
    OFF(lctx_session_params, reform);
    OFF(lctx_session_params, kv);
    OFF(lctx_session_params, infllm);
    OFF(lctx_session_params, max_memory);
    OFF(lctx_session_params, refreshkv);
    OFF(lctx_session_params, attn_precision);
    OFF(lctx_session_params, matmul_precision);
    SIZE(lctx_reform_params);
    OFF(lctx_reform_params, chunk);
    OFF(lctx_reform_params, budget);
    OFF(lctx_reform_params, recompute);
    OFF(lctx_reform_params, sink);
    OFF(lctx_reform_params, recent);
    OFF(lctx_reform_params, obs);
    OFF(lctx_reform_params, keep_first);
    OFF(lctx_reform_params, keep_last);
    OFF(lctx_reform_params, pool_half);
    OFF(lctx_reform_params, h2o_per_chunk);
    OFF(lctx_reform_params, heads_path);
    OFF(lctx_reform_params, evictor);
    OFF(lctx_reform_params, repeat_window);
    SIZE(lctx_kv_params);
    OFF(lctx_kv_params, budget);
    OFF(lctx_kv_params, chunk);
    OFF(lctx_kv_params, sink);
    OFF(lctx_kv_params, recent);
    OFF(lctx_kv_params, obs);
    OFF(lctx_kv_params, snapkv_kernel);
    OFF(lctx_kv_params, infinipot_nuc_ratio);
    OFF(lctx_kv_params, infinipot_catalyst);
    SIZE(lctx_infllm_params);
    OFF(lctx_infllm_params, block);
    OFF(lctx_infllm_params, repr);
    SIZE(lctx_refreshkv_params);
    OFF(lctx_refreshkv_params, partial);
    OFF(lctx_refreshkv_params, stride);
    OFF(lctx_refreshkv_params, threshold);
    OFF(lctx_refreshkv_params, schedule);
    OFF(lctx_refreshkv_params, pool_kernel);
    OFF(lctx_refreshkv_params, max_partial_run);
    OFF(lctx_refreshkv_params, gathered);
    SIZE(lctx_refreshkv_stats);
    OFF(lctx_refreshkv_stats, n_steps);
    OFF(lctx_refreshkv_stats, refresh_s);
    SIZE(lctx_op_time);
    OFF(lctx_op_time, seconds);
    OFF(lctx_op_time, bytes);
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
