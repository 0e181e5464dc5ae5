"""ask: load a model, read a text file, ask a question, stream the answer.
usage: python ask.py MODEL.gguf FILE.txt "question" [max_tokens]"""
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
    try:
        with lctx.Model(model_path) as model, model.session(chat=True) as session:
            session.feed(document)
            for piece in session.ask_stream(question, max_tokens):
                print(piece, end="", flush=True)
            print()
    except lctx.Error as e:
        print(f"ask: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
