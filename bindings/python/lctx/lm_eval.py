"""lm-evaluation-harness adapter: lctx as the model ``lctx`` of lm-eval.

    python -m lctx.lm_eval --model lctx \\
        --model_args model=models/SmolLM2-135M-Instruct.Q4_1.gguf,method=reform \\
        --tasks longbench_hotpotqa --output_path results/

``python -m lctx.lm_eval`` registers the model and runs lm-eval's own command
line with the same arguments (lm-eval has no plugin discovery for models). From
a script, call :func:`register` and then ``lm_eval.simple_evaluate(model="lctx",
model_args=...)``, or pass an instance: ``simple_evaluate(model=LctxLM(...))``.

Each request's context is split into a *document* and a *question* (the
question: the text after the context's last blank line; if that is longer than
``max_query_tokens`` tokens, after its last line break; if that is too, its
last ``max_query_tokens`` tokens). The document is fed (``feed`` +
``build_index``: the method reads it), the question is the query of ``select`` +
``recompute``, then the answer is decoded: the stages ``lctx run`` and ``lctx
eval`` go through, so every method works on its own terms. With ``chat=true``
(the default) the context is one user turn of the model's chat template (the
framing of ``lctx run``/``lctx eval``), so an instruct model answers as it was
trained to; ``chat=false`` (or a model without a chat template lctx knows) feeds
the context as raw text. lm-eval's ``--apply_chat_template`` renders the
harness's own messages with the model's template instead (no second wrap).

Supported request types: ``generate_until`` (greedy unless ``do_sample``; stop
strings cut the answer), ``loglikelihood`` (the continuation is teacher-forced
with ``lctx_decode_token`` after the method's select + recompute, so the score is
the method's) and ``loglikelihood_rolling`` (windows of ``rolling_window``
tokens, each conditioned on all the text before it read as the document).
See docs/lm-eval.md.
"""
from __future__ import annotations

import logging
import os
import sys
from array import array
from typing import Dict, List, Optional, Sequence, Tuple

try:
    import lm_eval  # noqa: F401  (the harness, not this module: absolute import)
    from lm_eval.api.model import LM
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError("lctx.lm_eval needs lm-evaluation-harness: pip install lm-eval "
                      "(the tested version is 0.4.13; no torch needed)") from _exc

from . import _capi
from ._enums import Method, methods
from ._model import Model
from ._session import Sampling, Session, _session_params

__all__ = ["LctxLM", "register", "main", "method_names", "MODEL_NAME"]

MODEL_NAME = "lctx"
log = logging.getLogger("lctx.lm_eval")

# The eval-only variants of `lctx eval`: REFORM or ILRe whose recomputed cache
# is decoded with RefreshKV (lctx_refreshkv_params.gathered).
_VARIANTS = {"reform+refreshkv": (Method.REFORM, {"refreshkv_gathered": True}),
             "ilre+refreshkv": (Method.ILRE, {"refreshkv_gathered": True})}
# Methods whose n_ctx is a plain KV cache for the whole input (document +
# question + answer): sized per document unless n_ctx is given, as lctx eval does.
_SIZED = (Method.FULL, Method.REFRESHKV)
# Arguments lm-eval passes to every model, and `tokenizer`, which tasks that
# make their own data read from the model args (RULER: a Hugging Face tokenizer
# name); lctx has no use for them (requests run one at a time; the backend is
# LCTX_BACKEND's, see docs/backends/cuda.md).
_IGNORED = ("batch_size", "max_batch_size", "device", "trust_remote_code", "tokenizer")
# Generation keyword arguments understood (others are ignored with a warning).
_GEN_KEYS = ("until", "max_gen_toks", "do_sample", "temperature", "top_p", "top_k", "min_p", "repeat_penalty",
             "seed")
_MARK = "\x01lctx-lm-eval-turn\x01"  # where the user's content goes when rendering a template


def method_names() -> List[str]:
    """The method names accepted by ``method=``: the library's registry
    (``lctx.methods()``) plus the variants reform+refreshkv and ilre+refreshkv."""
    return [m.name for m in methods() if m.implemented] + list(_VARIANTS)


def _method(name) -> Tuple[Method, dict]:
    key = str(name).strip().lower()
    if key in _VARIANTS:
        return _VARIANTS[key]
    for m in methods():
        if m.name == key and m.implemented:
            return m.method, {}
    raise ValueError(f"unknown lctx method {name!r}; valid methods: {', '.join(method_names())}")


def _as_bool(value, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"model arg {name}={value!r}: expected true or false")


class LctxLM(LM):
    """An lm-eval model running lctx with one method.

    Model args (``--model_args key=value,...``): ``model`` (GGUF path,
    required), ``method`` (default ``reform``; see :func:`method_names`),
    ``threads`` (0: all cores), ``max_gen_toks`` (default 256; a task's
    ``max_gen_toks`` wins), ``chat`` (default true), ``max_query_tokens``
    (default 256), ``rolling_window`` (default 256), ``seed`` (sampling seed,
    default 0), and any session parameter of the Python binding: ``n_ctx``,
    ``n_batch``, ``kv_type``, ``max_memory``, ``attn_precision`` and
    ``matmul_precision`` (1: bf16, docs/bf16.md; matmul 2: int8, docs/int8.md) and the method knobs by their
    prefixed names (``reform_budget``, ``reform_chunk``, ``kv_budget``,
    ``snapkv_kernel``, ``ilre_budget``, ``reattention_span``,
    ``refreshkv_partial``, ...: ``lctx.Session``'s keyword arguments).
    """

    def __init__(self, model: Optional[str] = None, method: str = "reform", threads: int = 0,
                 max_gen_toks: int = 256, chat=True, max_query_tokens: int = 256, rolling_window: int = 256,
                 seed: int = 0, **params) -> None:
        super().__init__()
        if not model:
            raise ValueError("lctx needs the model's GGUF path: --model_args model=PATH.gguf,method=reform")
        for k in _IGNORED:
            params.pop(k, None)
        self.method_name = str(method).strip().lower()
        self.method, variant = _method(method)
        self.threads = int(threads)
        self.max_gen_toks = int(max_gen_toks)
        self.chat = _as_bool(chat, "chat")
        self.max_query_tokens = int(max_query_tokens)
        self.rolling_window = int(rolling_window)
        self.seed = int(seed)
        if self.max_gen_toks < 1 or self.max_query_tokens < 1 or self.rolling_window < 1:
            raise ValueError("max_gen_toks, max_query_tokens and rolling_window must be at least 1")
        self.session_params = {**variant, **params}
        try:  # unknown parameter names fail here, before the model loads
            _session_params(self.method, self.session_params)
        except TypeError as exc:
            raise ValueError(f"{exc} in --model_args; lctx's args are model, method, threads, max_gen_toks, chat, "
                             "max_query_tokens, rolling_window, seed and lctx.Session's keyword arguments "
                             "(n_ctx, n_batch, kv_type, max_memory, attn_precision, matmul_precision, reform_*, kv_*, "
                             "snapkv_*, infinipot_*, "
                             "infllm_*, ilre_*, reattention_*, refreshkv_*)") from None
        if not os.path.isfile(os.fspath(model)):
            raise ValueError(f"model file not found: {model}")
        self.model_path = os.fspath(model)
        self.model = Model(self.model_path, n_threads=self.threads)
        # Out-of-range knob values are refused by the library when the session
        # is made: make one now, so that they fail before the first request.
        self._session().close()
        self._has_template = self._template_known()
        if self.chat and not self._has_template:
            log.info("lctx: %s has no chat template lctx knows; contexts are fed as raw text", self.model_path)
        # Contexts rendered by apply_chat_template (--apply_chat_template):
        # the text (the very string lm-eval keeps) -> the framing before and
        # after the user's content.
        self._rendered: Dict[str, Tuple[str, str]] = {}
        self._warned = set()

    # -- model information (lm-eval's optional interface) ----------------
    @property
    def tokenizer_name(self) -> str:
        return "lctx-" + os.path.basename(self.model_path)

    def chat_template(self, chat_template=False) -> str:
        return self.model.chat_template or ""

    def get_model_info(self) -> dict:
        from . import version
        return {"model_path": self.model_path, "lctx_method": self.method_name, "lctx_version": version(),
                "lctx_chat": self.chat and self._has_template}

    def _template_known(self) -> bool:
        try:
            self.model.chat_apply([("user", "x")])
            return True
        except _capi.UnsupportedError:
            return False

    def apply_chat_template(self, chat_history: List[Dict[str, str]], add_generation_prompt: bool = True) -> str:
        """lm-eval's --apply_chat_template: the messages in the model's chat
        template (lctx's renderer). The last user message's content is what
        gets split into document and question; the rest is framing."""
        if not self._has_template:
            raise ValueError(f"{self.model_path} has no chat template lctx knows: run without --apply_chat_template")
        msgs = [(m["role"], m["content"]) for m in chat_history]
        users = [i for i, (role, _) in enumerate(msgs) if role == "user"]
        u = users[-1] if users else None
        content = msgs[u][1] if u is not None else ""
        marked = [(r, _MARK) if i == u else (r, c) for i, (r, c) in enumerate(msgs)]
        if not add_generation_prompt and marked and marked[-1][0] == "assistant":
            # Continue the final assistant message (a task's gen_prefix).
            text = self.model.chat_apply(marked[:-1], add_assistant=True) + marked[-1][1]
        else:
            text = self.model.chat_apply(marked, add_assistant=add_generation_prompt)
        if u is None:
            before, after = text, ""
        else:
            before, _, after = text.partition(_MARK)
        rendered = before + content + after
        self._rendered[rendered] = (before, after)
        return rendered

    # -- prompts ------------------------------------------------------------
    def _session(self, n_ctx: Optional[int] = None) -> Session:
        params = dict(self.session_params)
        params.setdefault("n_threads", self.threads)
        if n_ctx is not None and "n_ctx" not in self.session_params:
            params["n_ctx"] = int(n_ctx)
        return Session(self.model, method=self.method, **params)

    def _tok(self, text: str, *, special: bool, bos: bool = False) -> array:
        if not text and not bos:
            return array("i")
        return array("i", self.model.tokenize(text, add_special=bos, parse_special=special))

    def split(self, text: str) -> Tuple[str, str]:
        """(document, question): the question is the text from the last blank
        line ("\\n\\n"), else the last line break, within max_query_tokens
        tokens; else the last max_query_tokens tokens (cut before a space)."""
        body = text.rstrip()
        for sep in ("\n\n", "\n"):
            i = body.rfind(sep)
            if i >= 0 and len(self._tok(text[i:], special=False)) <= self.max_query_tokens:
                return text[:i], text[i:]
        if len(self._tok(text, special=False)) <= self.max_query_tokens:
            return "", text
        # The shortest cut that keeps the tail within the limit (tokens per
        # character never exceed 1, so it lies in the last limit*16 characters
        # for any real text; binary search on the tail's token count).
        lo, hi = max(0, len(text) - 16 * self.max_query_tokens), len(text)
        while lo < hi:
            mid = (lo + hi) // 2
            if len(self._tok(text[mid:], special=False)) <= self.max_query_tokens:
                hi = mid
            else:
                lo = mid + 1
        i = lo
        while i < len(text) and not text[i].isspace():  # start the question at a word boundary
            i += 1
        if i >= len(text):
            i = lo
        return text[:i], text[i:]

    def _parts(self, context: str) -> Tuple[str, str, str]:
        """(framing before, the content to split, framing after)."""
        framing = self._rendered.get(context)
        if framing is not None:
            before, after = framing
            return before, context[len(before):len(context) - len(after)], after
        if self.chat and self._has_template:
            before, after = self.model.prompt_parts()
            return before, context, after
        return "", context, ""

    def encode(self, context: str) -> Tuple[array, array]:
        """(document tokens, query tokens) of a context: the framing before the
        content (special tokens parsed) + the document (plain text, BOS
        first), then the question (plain text) + the framing after it (the
        assistant's header, special tokens parsed). Never an empty query."""
        before, content, after = self._parts(context)
        doc_text, question = self.split(content)
        if before:
            doc = self._tok(before, special=True, bos=True) + self._tok(doc_text, special=False)
        else:
            doc = self._tok(doc_text, special=False, bos=True)
        query = self._tok(question, special=False) + self._tok(after, special=True)
        if not query:  # select needs a token: the document's last one becomes the query
            if not doc:
                doc = array("i", [self._prefix_token()])
            query = doc[-1:]
            doc = doc[:-1]
        return doc, query

    def _prefix_token(self) -> int:
        bos = self.model.token_bos
        return bos if bos >= 0 else self.model.token_eos

    # -- request processing ----------------------------------------------
    def _groups(self, encoded: Sequence[Tuple[array, array]]) -> List[List[int]]:
        """Request indices grouped by document (first-appearance order): one
        session reads each document once and answers its questions in turn."""
        groups: Dict[bytes, List[int]] = {}
        for i, (doc, _) in enumerate(encoded):
            groups.setdefault(doc.tobytes(), []).append(i)
        return list(groups.values())

    def _open(self, doc: array, extra: int) -> Session:
        """A session with the document read and indexed; FULL and REFRESHKV get
        n_ctx = document + extra (question + answer room) + 16."""
        s = self._session(len(doc) + extra + 16 if self.method in _SIZED else None)
        try:
            if len(doc):
                s.feed(doc)
            s.build_index()
        except BaseException:
            s.close()
            raise
        return s

    @staticmethod
    def _ask(s: Session, query: array) -> None:
        with s.select(query) as sel:
            s.recompute(sel)

    def _warn_once(self, key: str, msg: str, *args) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg, *args)

    def _gen_settings(self, kwargs) -> Tuple[List[str], int, Sampling]:
        kwargs = dict(kwargs or {})
        for k in kwargs:
            if k not in _GEN_KEYS:
                self._warn_once("gen:" + k, "lctx: generation argument %r is not supported; ignored", k)
        until = kwargs.get("until") or []
        if isinstance(until, str):
            until = [until]
        max_gen = int(kwargs.get("max_gen_toks") or self.max_gen_toks)
        sampling = Sampling(seed=int(kwargs.get("seed", self.seed)))
        if _as_bool(kwargs.get("do_sample", False), "do_sample"):
            temp = kwargs.get("temperature")
            sampling.temperature = 1.0 if temp is None else float(temp)
            if kwargs.get("top_p") is not None:
                sampling.top_p = float(kwargs["top_p"])
            if kwargs.get("top_k") is not None:
                sampling.top_k = int(kwargs["top_k"])
            if kwargs.get("min_p") is not None:
                sampling.min_p = float(kwargs["min_p"])
        if kwargs.get("repeat_penalty") is not None:
            sampling.repeat_penalty = float(kwargs["repeat_penalty"])
        return [u for u in until if u], max_gen, sampling

    def generate_until(self, requests, disable_tqdm: bool = False) -> List[str]:
        from tqdm import tqdm
        args = [req.args for req in requests]
        settings = [self._gen_settings(a[1] if len(a) > 1 else {}) for a in args]
        encoded = [self.encode(a[0]) for a in args]
        out: List[Optional[str]] = [None] * len(args)
        bar = tqdm(total=len(args), disable=disable_tqdm, desc=f"lctx {self.method_name}")
        for group in self._groups(encoded):
            doc = encoded[group[0]][0]
            extra = max(len(encoded[i][1]) + settings[i][1] for i in group)
            with self._open(doc, extra) as s:
                for i in group:
                    until, max_gen, sampling = settings[i]
                    self._ask(s, encoded[i][1])
                    pieces = []
                    try:
                        for piece in s.generate(max_gen, sampling, stop=until):
                            pieces.append(piece)
                    except _capi.ContextFullError:
                        self._warn_once("full", "lctx: the %s decode cache filled up; an answer was cut "
                                        "(raise n_ctx)", self.method_name)
                    out[i] = "".join(pieces)
                    self.cache_hook.add_partial("generate_until", args[i], out[i])
                    bar.update(1)
        bar.close()
        return out  # type: ignore[return-value]

    def _score(self, s: Session, query: array, cont: Sequence[int]) -> Tuple[float, bool]:
        """Log-probability of `cont` after the query, and whether greedy
        decoding would produce it (each token the argmax of the logits it was
        scored under)."""
        import numpy as np
        self._ask(s, query)
        total, greedy = 0.0, True
        for tok in cont:
            if greedy:
                # The session's logits are those the next decode samples
                # from: the ones decode_token scores `tok` under.
                greedy = int(np.argmax(s.logits)) == tok
            total += s.decode_token(tok)
        return total, greedy

    def encode_pair(self, context: str, continuation: str) -> Tuple[array, array, array]:
        """(document, query, continuation) tokens of a loglikelihood request.
        As lm-eval's tokenizing models do: spaces that end the context belong
        to the continuation, and the continuation's tokens are those of the
        query's last text + the continuation past that text's own tokens (a
        tokenizer that adds a space before a text, as SentencePiece does,
        would otherwise give the continuation a token it does not have)."""
        n_space = len(context) - len(context.rstrip(" "))
        if n_space:
            context, continuation = context[:-n_space], context[-n_space:] + continuation
        doc, query = self.encode(context)
        _, content, after = self._parts(context)
        last, special = (after, True) if after else (self.split(content)[1], False)
        if last and len(query):
            head = self._tok(last, special=special)
            cont = self._tok(last + continuation, special=special)[len(head):]
        else:
            cont = self._tok(continuation, special=False)
        return doc, query, cont

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> List[Tuple[float, bool]]:
        from tqdm import tqdm
        triples = [self.encode_pair(req.args[0], req.args[1]) for req in requests]
        encoded = [(d, q) for d, q, _ in triples]
        conts = [c for _, _, c in triples]
        out: List[Optional[Tuple[float, bool]]] = [None] * len(triples)
        bar = tqdm(total=len(triples), disable=disable_tqdm, desc=f"lctx {self.method_name}")
        for group in self._groups(encoded):
            doc = encoded[group[0]][0]
            extra = max(len(encoded[i][1]) + len(conts[i]) for i in group)
            with self._open(doc, extra) as s:
                for i in group:
                    out[i] = self._score(s, encoded[i][1], conts[i])
                    self.cache_hook.add_partial("loglikelihood", requests[i].args, out[i])
                    bar.update(1)
        bar.close()
        return out  # type: ignore[return-value]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> List[float]:
        """Each string from the prefix token (BOS, else EOS) with no chat
        template: windows of rolling_window tokens, each window's tokens
        teacher-forced after all the text before it, which is read as the
        document (its last token is the query). Every token is scored once;
        with method=full the total is the string's exact log-likelihood."""
        from tqdm import tqdm
        out = []
        w = self.rolling_window
        for req in tqdm(requests, disable=disable_tqdm, desc=f"lctx {self.method_name}"):
            tokens = [self._prefix_token()] + list(self._tok(req.args[0], special=False))
            total = 0.0
            for start in range(1, len(tokens), w):
                doc, query = array("i", tokens[:start - 1]), array("i", tokens[start - 1:start])
                window = tokens[start:start + w]
                with self._open(doc, 1 + len(window)) as s:
                    total += self._score(s, query, window)[0]
            out.append(total)
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return out

    def close(self) -> None:
        self.model.close()


def register(name: str = MODEL_NAME) -> type:
    """Registers LctxLM in lm-eval's model registry under `name` (default
    "lctx"); safe to call more than once. Returns the class."""
    import lm_eval.models  # noqa: F401  (the harness's own models first: lm-eval loads them only into an empty registry)
    from lm_eval.api.registry import register_model
    register_model(name)(LctxLM)
    return LctxLM


def main(argv: Optional[Sequence[str]] = None) -> None:
    """``python -m lctx.lm_eval ARGS``: lm-eval's command line (``lm_eval
    ARGS``) with the model ``lctx`` registered."""
    register()
    from lm_eval.__main__ import cli_evaluate
    if argv is not None:
        sys.argv = [sys.argv[0]] + list(argv)
    cli_evaluate()


if __name__ == "__main__":
    # Run as `python -m lctx.lm_eval`: register the class of the importable
    # module lctx.lm_eval (not this __main__ copy), so that both are the same.
    from lctx.lm_eval import main as _main
    _main()
