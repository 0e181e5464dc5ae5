package org.lctx;

import java.util.ArrayList;
import java.util.List;

/** Streams text pieces, holding back a tail that may begin a stop string,
 * and stops at the first complete one (which is dropped). */
final class StopFilter {
    private final List<String> stops = new ArrayList<>();
    private final StringBuilder text = new StringBuilder();
    private int sent = 0;
    boolean done = false;

    StopFilter(List<String> stops) {
        for (String s : stops) if (s != null && !s.isEmpty()) this.stops.add(s);
    }

    String push(String piece) {
        text.append(piece);
        int cut = -1;
        for (String s : stops) {
            int i = text.indexOf(s, Math.max(0, sent - s.length() + 1));
            if (i >= 0 && (cut < 0 || i < cut)) cut = i;
        }
        if (cut >= 0) {
            done = true;
            String out = text.substring(sent, cut);
            sent = cut;
            return out;
        }
        int hold = 0;
        for (String s : stops) {   // longest tail of the text that begins a stop string
            for (int k = Math.min(s.length() - 1, text.length()); k > hold; k--) {
                if (text.substring(text.length() - k).equals(s.substring(0, k))) {
                    hold = k;
                    break;
                }
            }
        }
        int safe = Math.max(sent, text.length() - hold);
        String out = text.substring(sent, safe);
        sent = safe;
        return out;
    }

    String flush() {
        if (done) return "";
        String out = text.substring(sent);
        sent = text.length();
        return out;
    }
}
