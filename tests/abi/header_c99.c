/* Compiled (not run) to prove include/lctx.h is valid strict C99. */
#include "lctx.h"

int lctx_header_c99_check(void) {
    lctx_model_params mp;
    lctx_session_params sp;
    lctx_sampling_params sa;
    lctx_model_default_params(&mp);
    lctx_session_default_params(&sp);
    lctx_sampling_default_params(&sa);
    return (int)(mp.struct_size + sp.struct_size + sa.struct_size) + LCTX_VERSION_NUMBER;
}
