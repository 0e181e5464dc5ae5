/* Compiled (not run) to prove include/lctx.h is valid strict C99. */
#include "lctx.h"

int lctx_header_c99_check(void) {
    lctx_model_params mp;
    lctx_session_params sp;
    lctx_sampling_params sa;
    lctx_reform_params rp;
    lctx_kv_params kv;
    lctx_infllm_params ip;
    lctx_refreshkv_params rk;
    lctx_model_default_params(&mp);
    lctx_session_default_params(&sp);
    lctx_sampling_default_params(&sa);
    lctx_reform_default_params(&rp);
    lctx_kv_default_params(&kv);
    lctx_infllm_default_params(&ip);
    lctx_refreshkv_default_params(&rk);
    sp.reform = &rp;
    sp.kv = &kv;
    sp.infllm = &ip;
    sp.refreshkv = &rk;
    return (int)(mp.struct_size + sp.struct_size + sa.struct_size + rp.struct_size + kv.struct_size +
                 ip.struct_size + rk.struct_size) + lctx_method_count() + LCTX_VERSION_NUMBER;
}
