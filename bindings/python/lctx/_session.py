"""Session: one document read with one method, then questions about it."""
from __future__ import annotations

import codecs
from array import array
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Union

from . import capi
from ._enums import Method, Stage
from ._model import Model, Tokens

Progress = Callable[[float], Optional[bool]]
# on_progress(stage, done): stage is the running call's label, one of STAGE_LABELS.
StageProgress = Callable[[str, float], Optional[bool]]
STAGE_LABELS = ("feed", "build_index", "select", "recompute")

try:  # numpy is optional: arrays when installed, lists otherwise
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the environment
    _np = None


def _as_array(values: array, dtype: str):
    """numpy array (zero-copy view of the array('q'/'f') the extension returned)
    when numpy is installed, else a list."""
    if _np is not None:
        return _np.frombuffer(values, dtype=dtype) if len(values) else _np.zeros(0, dtype=dtype)
    return list(values)


@dataclass
class Sampling:
    """Sampling parameters; the defaults are greedy (temperature 0)."""
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: int = 0
    # Stop strings: generation ends before the first occurrence of any of
    # them; the stop string and what follows are not returned.
    stop: Sequence[str] = ()

    def _native(self):
        p = capi.lctx_sampling_params()
        capi.lctx_sampling_default_params(p)
        for k, v in self.__dict__.items():
            if k != "stop":
                setattr(p, k, v)
        return p


class _StopFilter:
    """Streams text pieces, holding back a tail that may begin a stop string;
    stops at the first complete one (which is dropped)."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.text = ""
        self.sent = 0
        self.done = False

    def push(self, piece: str) -> str:
        self.text += piece
        if not self.stops:
            out, self.sent = self.text[self.sent:], len(self.text)
            return out
        cut = min((i for i in (self.text.find(s, max(0, self.sent - len(s) + 1)) for s in self.stops) if i >= 0),
                  default=-1)
        if cut >= 0:
            self.done = True
            out, self.sent = self.text[self.sent:cut], cut
            return out
        hold = 0
        for s in self.stops:  # longest tail of the text that is a prefix of a stop string
            for k in range(min(len(s) - 1, len(self.text)), hold, -1):
                if self.text.endswith(s[:k]):
                    hold = k
                    break
        safe = max(self.sent, len(self.text) - hold)
        out, self.sent = self.text[self.sent:safe], safe
        return out

    def flush(self) -> str:
        out = "" if self.done else self.text[self.sent:]
        self.sent = len(self.text)
        return out


class Selection:
    """The document tokens chosen for a question (positions ascending, scores)."""

    def __init__(self, handle) -> None:
        self._h = handle

    def close(self) -> None:
        if self._h is not None:
            capi.lctx_selection_free(self._h)
            self._h = None

    __enter__ = lambda self: self
    __exit__ = lambda self, *exc: self.close()

    def __del__(self) -> None:
        self.close()

    def __len__(self) -> int:
        return capi.lctx_selection_size(self._h)

    @property
    def positions(self):
        """Document positions, ascending: a numpy int64 array when numpy is
        installed, else a list."""
        return _as_array(capi.lctx_selection_positions(self._h), "int64")

    @property
    def scores(self):
        """Scores of those positions: a numpy float32 array, else a list."""
        return _as_array(capi.lctx_selection_scores(self._h), "float32")


@dataclass
class SelectScores:
    """Every scored document token's score from the session's last select
    (lctx_session_select_scores). `raw`: the method's score of each token;
    `ranked`: what select ranked by (REFORM: the pooled scores; ILRe: `raw`
    again). The first `forced_first` and last `forced_last` tokens were
    gathered whatever their scores. Arrays are numpy float32 when numpy is
    installed, else lists."""
    raw: object
    ranked: object
    forced_first: int
    forced_last: int


@dataclass
class RefreshKVStats:
    """lctx_refreshkv_stats plus the per-layer step counts. A layer step is one
    layer of one decoded token: n_full + n_partial == n_steps * n_layer, and
    layer_full[l] + layer_partial[l] == n_steps."""
    n_layer: int
    partial: int               # K in use (partial-cache slots per layer and KV head)
    n_steps: int               # decoded tokens
    n_full: int                # layer steps with full attention (and a refresh)
    n_partial: int             # layer steps over the partial cache
    effective_stride: float    # mean over layers of n_steps / full steps of the layer
    full_attention_s: float
    partial_attention_s: float
    refresh_s: float
    layer_full: List[int]
    layer_partial: List[int]


@dataclass
class OpTime:
    """One backend op of a session (lctx_op_time)."""
    calls: int
    seconds: float             # wall time inside the op, summed over its calls
    bytes: int                 # to_host, from_host, copy: moved; alloc: allocated; else 0


@dataclass
class OpTimes:
    """lctx_session_op_times: the ops called so far by name, and the
    session's lifetime; what the ops do not account for is host work."""
    lifetime_s: float
    ops: Dict[str, OpTime]


# Keyword arguments that set a field of a method's struct (lctx.h), by prefix:
# (prefix, lctx_session_params field, struct, its default function, strip the prefix).
_FAMILIES = (
    ("reform_", "reform", capi.lctx_reform_params, capi.lctx_reform_default_params, True),
    ("kv_", "kv", capi.lctx_kv_params, capi.lctx_kv_default_params, True),
    ("snapkv_", "kv", capi.lctx_kv_params, capi.lctx_kv_default_params, False),
    ("infinipot_", "kv", capi.lctx_kv_params, capi.lctx_kv_default_params, False),
    ("infllm_", "infllm", capi.lctx_infllm_params, capi.lctx_infllm_default_params, True),
    ("ilre_", "ilre", capi.lctx_ilre_params, capi.lctx_ilre_default_params, True),
    ("reattention_", "reattention", capi.lctx_reattention_params, capi.lctx_reattention_default_params, True),
    ("refreshkv_", "refreshkv", capi.lctx_refreshkv_params, capi.lctx_refreshkv_default_params, True),
)
_RESERVED = ("struct_size", "progress", "progress_user_data", "reform", "kv", "infllm", "ilre", "reattention",
             "refreshkv")


def _session_params(method: Optional[int], params: dict):
    """lctx_session_params from keyword arguments: common fields by name
    (n_ctx, n_threads, n_batch, kv_type), a method's knobs by their prefixed
    name (reform_chunk -> reform.chunk, kv_budget -> kv.budget, snapkv_kernel ->
    kv.snapkv_kernel, infllm_block -> infllm.block, ilre_max_kernels ->
    ilre.max_kernels, reattention_n_global -> reattention.n_global,
    refreshkv_partial -> refreshkv.partial). Returns the struct and
    the method structs it points to (keep them alive while it is used)."""
    p = capi.lctx_session_params()
    capi.lctx_session_default_params(p)
    if method is not None:
        p.method = int(method)
    subs = {}
    for k, v in params.items():
        if k.startswith("_") or k in _RESERVED:
            raise TypeError(f"unknown session parameter {k!r}")
        if hasattr(p, k):
            setattr(p, k, v)
            continue
        for prefix, field, cls, defaults, strip in _FAMILIES:
            if not k.startswith(prefix):
                continue
            name = k[len(prefix):] if strip else k
            sub = subs.get(field)
            if sub is None:
                sub = subs[field] = cls()
                defaults(sub)
            if name == "struct_size" or not hasattr(sub, name):
                raise TypeError(f"unknown session parameter {k!r}")
            setattr(sub, name, v)
            break
        else:
            raise TypeError(f"unknown session parameter {k!r}")
    for field, sub in subs.items():
        setattr(p, field, sub)
    return p, subs


class Session:
    """A session on a Model. Keyword arguments set lctx_session_params fields
    by name (method, n_ctx, n_threads, n_batch, kv_type) and the method
    structs' fields by prefixed name (reform_chunk, kv_budget, snapkv_kernel,
    infinipot_catalyst, infllm_block, ilre_budget, ilre_max_kernels,
    reattention_n_local, reattention_span, refreshkv_partial, refreshkv_schedule,
    ...; each struct starts from its lctx_*_default_params). method=None
    (the default) is the library's default, Method.REFORM. progress(done) is
    called during long calls; returning True cancels (CancelledError).
    on_progress(stage, done) is the same with the running call's label
    ("feed", "build_index", "select", "recompute"); give one or the other.
    chat=True frames the document and each question as one user turn of the
    model's chat template (see Model.prompt_parts)."""

    def __init__(self, model: Model, *, method: Optional[Method] = None, progress: Optional[Progress] = None,
                 on_progress: Optional[StageProgress] = None, chat: bool = False, **params) -> None:
        self._h = None
        self.model = model
        p, self._subs = _session_params(method, params)
        self._set_progress(p, progress, on_progress)
        self._params = p
        self._h = capi.lctx_session_create(model.handle, p)
        model._sessions.add(self)
        self._chat = model.prompt_parts() if chat else None

    def _set_progress(self, p, progress, on_progress) -> None:
        if progress is not None and on_progress is not None:
            raise TypeError("give progress or on_progress, not both")
        self._stage_label = ["feed"]  # a cell, so the callback holds no reference to self
        if on_progress is not None:
            label = self._stage_label
            progress = lambda done: on_progress(label[0], done)  # noqa: E731
        self._progress = progress  # must outlive the native session
        capi.lctxsw_session_params_set_progress(p, progress)

    @classmethod
    def load_index(cls, model: Model, path: str, *, progress: Optional[Progress] = None,
                   on_progress: Optional[StageProgress] = None, chat: bool = False, **params) -> "Session":
        """A REFORM session in stage INDEXED from a file written by save_index()."""
        self = cls.__new__(cls)
        self._h = None
        self.model = model
        p, self._subs = _session_params(None, params)
        self._set_progress(p, progress, on_progress)
        self._params = p
        import os
        self._h = capi.lctx_session_load_index(model.handle, os.fspath(path), p)
        model._sessions.add(self)
        self._chat = model.prompt_parts() if chat else None
        return self

    # -- lifetime -------------------------------------------------------
    def close(self) -> None:
        if self._h is not None:
            capi.lctx_session_free(self._h)
            self._h = None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def handle(self):
        if self._h is None:
            raise ValueError("the session is closed")
        return self._h

    # -- state ------------------------------------------------------------
    stage = property(lambda self: Stage(capi.lctx_session_stage(self.handle)))
    n_fed = property(lambda self: capi.lctx_session_n_fed(self.handle))
    last_error = property(lambda self: capi.lctx_session_last_error(self.handle))

    def cancel(self) -> None:
        """Asks the running call (on another thread) to stop; thread-safe."""
        capi.lctx_session_cancel(self.handle)

    @property
    def logits(self):
        """Copy of the logits the next decode samples from (empty before
        recompute): a numpy float32 array when numpy is installed, else a list."""
        return _as_array(capi.lctx_session_logits(self.handle, self.model.handle), "float32")

    # -- the five stages ------------------------------------------------
    def feed(self, document: Union[str, bytes, Tokens]) -> int:
        """Stage 1: append document text (as feed_text; with chat=True the
        turn prefix goes before the first chunk) or token ids. Returns the
        number of tokens fed."""
        if isinstance(document, (str, bytes)):
            text = document if isinstance(document, str) else document.decode("utf-8", "replace")
            if self._chat is not None and self.n_fed == 0:
                prefix = self.model.tokenize(self._chat[0], add_special=True, parse_special=True)
                body = self.model.tokenize(text, add_special=False, parse_special=False)
                document = array("i", prefix) + array("i", body)
            else:
                document = self.model.tokenize(text, add_special=self.n_fed == 0, parse_special=False)
        self._stage_label[0] = "feed"
        capi.lctx_feed_chunk(self.handle, document)
        return len(document)

    def feed_text(self, text: str) -> int:
        """Stage 1 with text, the rule of every binding: BOS (when the model
        adds one) before the first chunk only, and special-token text such as
        "<|im_start|>" is NOT parsed: a document is data, read as plain text.
        To feed control tokens, tokenize with parse_special=True and feed the
        ids. Returns the number of tokens fed."""
        return self.feed(text)

    def build_index(self) -> None:
        self._stage_label[0] = "build_index"
        capi.lctx_build_index(self.handle)

    def select(self, query: Union[str, bytes, Tokens]) -> Selection:
        """Stage 3. Text is tokenized without BOS and with special tokens
        parsed (a question may carry the chat template's markers)."""
        if isinstance(query, (str, bytes)):
            query = self.model.tokenize(query, add_special=False, parse_special=True)
        self._stage_label[0] = "select"
        return Selection(capi.lctx_select(self.handle, query))

    def select_scores(self) -> SelectScores:
        """The scores behind the last successful select (REFORM, ILRe):
        lctx.UnsupportedError for other methods, lctx.StateError before a
        select has succeeded."""
        forced = capi.lctxsw_session_select_forced(self.handle)
        return SelectScores(raw=_as_array(capi.lctx_session_select_scores(self.handle, False), "float32"),
                            ranked=_as_array(capi.lctx_session_select_scores(self.handle, True), "float32"),
                            forced_first=int(forced[0]), forced_last=int(forced[1]))

    def attended(self):
        """What the latest step's attention could see (ReAttention,
        lctx_session_attended): for each stored token (document, then question
        and answer so far), the share of layers whose attention window held it,
        in [0, 1]; all 0 before the first step. A numpy float32 array when
        numpy is installed, else a list. lctx.UnsupportedError for a method
        whose decode attends to its whole cache."""
        return _as_array(capi.lctx_session_attended(self.handle), "float32")

    def recompute(self, selection: Selection) -> None:
        self._stage_label[0] = "recompute"
        capi.lctx_recompute(self.handle, selection._h)

    def decode(self, sampling: Optional[Sampling] = None) -> int:
        return capi.lctx_decode(self.handle, (sampling or Sampling())._native())

    def decode_token(self, token: int) -> float:
        """Stage 5 with a given token (teacher forcing): returns the natural
        log of its probability under the logits the next decode would sample
        from, then appends it as if it had been sampled."""
        return capi.lctx_decode_token(self.handle, int(token))

    def refreshkv_stats(self) -> "RefreshKVStats":
        """RefreshKV decoding statistics since the last recompute (sessions of
        Method.REFRESHKV, or REFORM/ILRe with refreshkv_gathered=True);
        lctx.UnsupportedError for other sessions."""
        st = capi.lctx_refreshkv_stats()
        capi.lctx_session_refreshkv_stats(self.handle, st)
        return RefreshKVStats(
            n_layer=st.n_layer, partial=st.partial, n_steps=st.n_steps, n_full=st.n_full, n_partial=st.n_partial,
            effective_stride=st.effective_stride, full_attention_s=st.full_attention_s,
            partial_attention_s=st.partial_attention_s, refresh_s=st.refresh_s,
            layer_full=list(capi.lctxsw_session_refreshkv_layer_steps(self.handle, True)),
            layer_partial=list(capi.lctxsw_session_refreshkv_layer_steps(self.handle, False)))

    def set_refreshkv(self, enabled: Optional[bool] = True, **knobs) -> None:
        """How the next questions decode, from the next recompute on (an
        answer in progress keeps its decoding; the document is not read
        again). set_refreshkv(partial=8, stride=3): RefreshKV with those
        knobs (lctx_refreshkv_params' fields, the refreshkv_* keyword
        arguments of Session without the prefix; the others from
        lctx_refreshkv_default_params; gathered is not read).
        set_refreshkv(None) or set_refreshkv(False): dense decoding. For
        sessions of Method.FULL, Method.REFRESHKV, REFORM and ILRe;
        lctx.UnsupportedError for
        others, lctx.InvalidArgumentError for bad knobs (nothing changes on
        an error)."""
        if not enabled:
            if knobs:
                raise TypeError(f"RefreshKV knobs with dense decoding: {sorted(knobs)}")
            capi.lctx_session_set_refreshkv(self.handle, None)
            return
        p = capi.lctx_refreshkv_params()
        capi.lctx_refreshkv_default_params(p)
        for k, v in knobs.items():
            # this/thisown are the SWIG proxy's own attributes, not fields
            if k.startswith("_") or k in ("struct_size", "this", "thisown") or not hasattr(p, k):
                raise TypeError(f"unknown RefreshKV knob {k!r}")
            setattr(p, k, v)
        capi.lctx_session_set_refreshkv(self.handle, p)

    def op_times(self) -> "OpTimes":
        """Where the session's time went, per backend op (docs/profiling.md).
        Only for a session created while the environment variable
        LCTX_PROFILE_OPS was set (os.environ["LCTX_PROFILE_OPS"] = "1");
        lctx.UnsupportedError for others."""
        n, lifetime = capi.lctx_session_op_times(self.handle, 0, None)
        ops = {}
        for i in range(n):
            op = capi.lctx_op_time()
            capi.lctx_session_op_times(self.handle, i, op)
            ops[op.op] = OpTime(calls=op.calls, seconds=op.seconds, bytes=op.bytes)
        return OpTimes(lifetime_s=lifetime, ops=ops)

    def save_index(self, path: str) -> None:
        import os
        capi.lctx_index_save(self.handle, os.fspath(path))

    # -- generation -------------------------------------------------------
    def tokens(self, max_tokens: int = 256, sampling: Optional[Sampling] = None) -> Iterator[int]:
        """Decoded token ids until an end-of-generation token or max_tokens."""
        native = (sampling or Sampling())._native()
        for _ in range(max_tokens):
            tok = capi.lctx_decode(self.handle, native)
            if self.model.is_eog(tok):
                return
            yield tok

    def generate(self, max_tokens: int = 256, sampling: Optional[Sampling] = None,
                 stop: Optional[Sequence[str]] = None) -> Iterator[str]:
        """Text pieces of the decoded tokens; a UTF-8 character split over
        tokens is held back until complete. Generation ends at an
        end-of-generation token, after max_tokens, or before the first stop
        string (stop, else sampling.stop), which is not returned."""
        sampling = sampling or Sampling()
        filt = _StopFilter(sampling.stop if stop is None else stop)
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        for tok in self.tokens(max_tokens, sampling):
            piece = filt.push(dec.decode(self.model.token_to_piece(tok)))
            if piece:
                yield piece
            if filt.done:
                return
        tail = filt.push(dec.decode(b"", final=True))
        tail += filt.flush()
        if tail:
            yield tail

    def ask_stream(self, question: str, max_tokens: int = 256, sampling: Optional[Sampling] = None,
                   stop: Optional[Sequence[str]] = None) -> Iterator[str]:
        """Seals the document on the first question, then select + recompute +
        generate. Ask as many questions as you like: the document is read once."""
        if self.stage == Stage.FEEDING:
            self.build_index()
        if self._chat is not None:
            question = "\n\n" + question + self._chat[1]
        with self.select(question) as sel:
            self.recompute(sel)
        return self.generate(max_tokens, sampling, stop)

    def ask(self, question: str, max_tokens: int = 256, sampling: Optional[Sampling] = None,
            stop: Optional[Sequence[str]] = None) -> str:
        return "".join(self.ask_stream(question, max_tokens, sampling, stop))

    def __repr__(self) -> str:
        if self._h is None:
            return "<lctx.Session closed>"
        return f"<lctx.Session stage={self.stage.name} n_fed={self.n_fed}>"
