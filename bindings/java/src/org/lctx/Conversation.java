package org.lctx;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.function.Consumer;

/**
 * A chat on top of a {@link Session}: the document (optional with a chat
 * template) is read once, and every question is asked with the earlier
 * questions and answers before it, so the second question sees the first
 * Q/A. Framing, the same in every binding: with chat true and a model whose
 * chat template the library knows, that template's turns (the document and
 * the first question share the first user turn); otherwise the document is
 * followed by "\n\n" + question + "\n" + answer for each turn (the format of
 * {@code lctx run --no-chat}).
 */
public final class Conversation {
    /** One question and its answer. */
    public record Turn(String question, String answer) {}

    private static final String DOCUMENT_MARK = "\u0001lctx-document\u0001";

    private final Session session;
    private final List<Turn> history = new ArrayList<>();
    private final boolean template;
    private final String prefix;
    private boolean started = false;

    /** Starts a conversation on a session with nothing fed yet. */
    public Conversation(Session session, boolean chat) {
        if (session.nFed() != 0) throw new IllegalStateException("the session has already been fed");
        this.session = session;
        boolean t = false;
        if (chat) {
            try {
                session.model().chatApply(List.of(new Model.ChatMessage("user", "x")), true);
                t = true;
            } catch (LctxException.UnsupportedException e) {
                t = false;
            }
        }
        template = t;
        prefix = template ? render(List.of(), "")[0] : "";
    }

    public List<Turn> history() {
        return Collections.unmodifiableList(history);
    }

    public Session session() {
        return session;
    }

    /** {text before the document, text after it up to the answer}. */
    private String[] render(List<Turn> turns, String question) {
        if (!template) {
            StringBuilder b = new StringBuilder();
            for (Turn t : turns) b.append("\n\n").append(t.question()).append('\n').append(t.answer());
            b.append("\n\n").append(question).append('\n');
            return new String[] {"", b.toString()};
        }
        List<Model.ChatMessage> msgs = new ArrayList<>();
        for (int i = 0; i <= turns.size(); i++) {
            String q = i < turns.size() ? turns.get(i).question() : question;
            msgs.add(new Model.ChatMessage("user", i == 0 ? DOCUMENT_MARK + "\n\n" + q : q));
            if (i < turns.size()) msgs.add(new Model.ChatMessage("assistant", turns.get(i).answer()));
        }
        String text = session.model().chatApply(msgs, true);
        int at = text.indexOf(DOCUMENT_MARK);
        if (at < 0) throw new IllegalStateException("the chat template dropped the document");
        return new String[] {text.substring(0, at), text.substring(at + DOCUMENT_MARK.length())};
    }

    private void start() {
        if (started) return;
        started = true;
        if (!prefix.isEmpty()) session.feed(session.model().tokenize(prefix, true, true));
    }

    /** Appends document text (feedText's rule: plain text, BOS first). */
    public int feedText(String document) {
        start();
        return session.feedText(document);
    }

    /** The text that follows the document for question (history included). */
    public String query(String question) {
        return render(history, question)[1];
    }

    /** Asks question, streaming the answer to onPiece (may be null); the turn
     * joins the history. sampling may be null (greedy) and carries the stop strings. */
    public String ask(String question, int maxTokens, Sampling sampling, Consumer<String> onPiece) {
        start();
        if (session.nFed() == 0)
            throw new IllegalStateException("nothing to talk about: feedText a document before the first question");
        StringBuilder answer = new StringBuilder();
        session.ask(query(question), maxTokens, sampling, piece -> {
            answer.append(piece);
            if (onPiece != null) onPiece.accept(piece);
        });
        history.add(new Turn(question, answer.toString()));
        return answer.toString();
    }

    public String ask(String question, int maxTokens) {
        return ask(question, maxTokens, null, null);
    }
}
