"""Result files of `lctx eval` for the tests of the bench/eval_*.py tools."""
import json


def write_results(path, rows, tail=""):
    """A JSONL file as `lctx eval` writes it: its run line, one line per row, then `tail` (e.g. a torn line)."""
    path.write_text('{"kind": "run", "command": "lctx eval ..."}\n' + "".join(json.dumps(r) + "\n" for r in rows) + tail)
    return path
