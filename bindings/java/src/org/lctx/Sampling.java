package org.lctx;

/** Sampling parameters; the defaults are greedy. Fields as in lctx_sampling_params. */
public final class Sampling {
    public float temperature = 0f;
    public int topK = 0;
    public float topP = 1f;
    public float minP = 0f;
    public float repeatPenalty = 1f;
    public int repeatLastN = 64;
    public long seed = 0;
    /** Stop strings: generation ends before the first occurrence of any of
     * them; the stop string and what follows are not returned. */
    public java.util.List<String> stop = java.util.List.of();

    /** Sets the stop strings; returns this. */
    public Sampling stop(String... stops) {
        stop = java.util.List.of(stops);
        return this;
    }

    public static Sampling greedy() {
        return new Sampling();
    }

    public static Sampling random(float temperature, int topK, long seed) {
        Sampling s = new Sampling();
        s.temperature = temperature;
        s.topK = topK;
        s.seed = seed;
        return s;
    }

    lctx_sampling_params toNative() {
        lctx_sampling_params p = new lctx_sampling_params();
        LctxNative.lctx_sampling_default_params(p);
        p.setTemperature(temperature);
        p.setTop_k(topK);
        p.setTop_p(topP);
        p.setMin_p(minP);
        p.setRepeat_penalty(repeatPenalty);
        p.setRepeat_last_n(repeatLastN);
        p.setSeed(seed);
        return p;
    }
}
