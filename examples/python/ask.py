"""ask: load a model, read a (long) text file, ask a question, stream the answer.
usage: python ask.py MODEL.gguf FILE.txt "question" [max_tokens]

The session uses the library's default method, REFORM, so FILE.txt may be far
longer than the model's trained context (examples/make_haystack.py writes one).
Progress goes to stderr with the stage of each long call."""
import sys

import lctx


def main() -> int:
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    model_path, text_path, question = sys.argv[1:4]
    max_tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 128
    with open(text_path, encoding="utf-8") as f:
        document = f.read()

    def progress(stage: str, done: float) -> bool:
        print(f"\r{stage} {done:4.0%}", end="\n" if done >= 1 else "", file=sys.stderr, flush=True)
        return False  # True would cancel

    try:
        with lctx.Model(model_path) as model, model.session(on_progress=progress) as session:
            chat = lctx.Conversation(session)          # the model's chat template, history kept
            n = chat.feed_text(document)
            print(f"ask: {n} tokens (trained context {model.n_ctx_train})", file=sys.stderr)
            for piece in chat.ask_stream(question, max_tokens):
                print(piece, end="", flush=True)
            print()
    except lctx.Error as e:
        print(f"ask: {e} ({e.kind})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
