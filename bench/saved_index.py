"""Encode once, answer many times: the `lctx run` flags for a saved REFORM/ILRe index.

A bench that passes --index-dir keeps each encoding as IDX (`--save-index`)
with the encoding run's figures (time, tok/s, peak RSS) in IDX with the
suffix .json beside it; a later run answers from the file (`--index`) and
reports those figures instead of the index load's.
"""
import json
import pathlib


def flags(idx):
    """(lctx run flags, the saved figures or None): load IDX when it and its figures exist, else save it."""
    idx = pathlib.Path(idx)
    meta = idx.with_suffix(".json")
    if idx.exists() and meta.exists():
        return ["--index", str(idx)], json.loads(meta.read_text())
    return ["--save-index", str(idx)], None


def save_figures(idx, figures):
    """Writes the encoding run's figures beside IDX (after the run that saved it)."""
    pathlib.Path(idx).with_suffix(".json").write_text(json.dumps(figures) + "\n")
