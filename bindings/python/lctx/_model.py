"""Model: a loaded GGUF model (immutable, shareable between sessions)."""
from __future__ import annotations

import weakref
from array import array
from typing import Iterable, Mapping, Optional, Sequence, Tuple, Union

from . import _capi, capi

Tokens = Union[Sequence[int], array, memoryview]
Message = Union[Tuple[str, str], Mapping[str, str]]


class Model:
    """A model loaded from a GGUF file (or bytes). Close it (or use ``with``)
    to free it; closing a model closes the sessions still open on it."""

    def __init__(self, path: Union[str, "os.PathLike[str]", None] = None, *, data: Optional[bytes] = None,
                 n_threads: int = 0, use_mmap: bool = True) -> None:
        params = capi.lctx_model_params()
        capi.lctx_model_default_params(params)
        params.n_threads = n_threads
        params.use_mmap = use_mmap
        self._sessions: "weakref.WeakSet" = weakref.WeakSet()
        self._h = None
        if (path is None) == (data is None):
            raise TypeError("Model() needs exactly one of path or data")
        if path is not None:
            import os
            self._h = capi.lctx_model_load(os.fspath(path), params)
        else:
            self._h = capi.lctx_model_load_from_memory(data, params)

    @classmethod
    def from_bytes(cls, data: bytes, **kw) -> "Model":
        return cls(data=data, **kw)

    # -- lifetime -------------------------------------------------------
    def close(self) -> None:
        if self._h is not None:
            for s in list(self._sessions):
                s.close()
            capi.lctx_model_free(self._h)
            self._h = None

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # safety net; prefer close()/with
        try:
            self.close()
        except Exception:
            pass

    @property
    def handle(self):
        if self._h is None:
            raise ValueError("the model is closed")
        return self._h

    def session(self, **params) -> "Session":
        """A new Session on this model (keyword arguments as Session())."""
        from ._session import Session
        return Session(self, **params)

    # -- information ----------------------------------------------------
    architecture = property(lambda self: capi.lctx_model_architecture(self.handle))
    name = property(lambda self: capi.lctx_model_name(self.handle))
    n_layer = property(lambda self: capi.lctx_model_n_layer(self.handle))
    n_head = property(lambda self: capi.lctx_model_n_head(self.handle))
    n_head_kv = property(lambda self: capi.lctx_model_n_head_kv(self.handle))
    head_dim = property(lambda self: capi.lctx_model_head_dim(self.handle))
    n_embd = property(lambda self: capi.lctx_model_n_embd(self.handle))
    n_vocab = property(lambda self: capi.lctx_model_n_vocab(self.handle))
    n_ctx_train = property(lambda self: capi.lctx_model_n_ctx_train(self.handle))
    n_params = property(lambda self: capi.lctx_model_n_params(self.handle))
    size_bytes = property(lambda self: capi.lctx_model_size_bytes(self.handle))
    token_bos = property(lambda self: capi.lctx_model_token_bos(self.handle))
    token_eos = property(lambda self: capi.lctx_model_token_eos(self.handle))
    token_eot = property(lambda self: capi.lctx_model_token_eot(self.handle))
    token_pad = property(lambda self: capi.lctx_model_token_pad(self.handle))
    chat_template = property(lambda self: capi.lctx_model_chat_template(self.handle))

    def meta(self, key: str) -> Optional[str]:
        """A GGUF metadata value formatted as text, or None if absent."""
        raw = capi.lctx_model_meta_string(self.handle, key)
        return None if raw is None else raw.decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        return capi.lctx_token_is_eog(self.handle, token)

    # -- text -------------------------------------------------------------
    def tokenize(self, text: Union[str, bytes], *, add_special: bool = True,
                 parse_special: bool = False) -> array:
        """Token ids as array('i') (zero-copy into numpy: np.frombuffer(a, np.int32))."""
        return capi.lctx_tokenize(self.handle, text, add_special, parse_special)

    def detokenize(self, tokens: Tokens, *, special: bool = False) -> str:
        return capi.lctx_detokenize(self.handle, tokens, special).decode("utf-8", "replace")

    def token_to_piece(self, token: int, *, special: bool = False) -> bytes:
        """The bytes of one token (may be part of a UTF-8 character)."""
        return capi.lctx_token_to_piece(self.handle, token, special)

    def chat_apply(self, messages: Iterable[Message], *, add_assistant: bool = True) -> str:
        """Formats (role, content) pairs or {"role":..,"content":..} dicts with
        the model's chat template; UnsupportedError if it has none we know."""
        flat = []
        for m in messages:
            role, content = (m["role"], m["content"]) if isinstance(m, Mapping) else m
            flat += [str(role), str(content)]
        return capi.lctx_chat_apply(self.handle, flat, add_assistant).decode("utf-8", "replace")

    def prompt_parts(self, *, system: Optional[str] = None) -> Tuple[str, str]:
        """(prefix, suffix) that wrap one user turn in the chat template, ending
        with the assistant prefix; ("", "\\n") when the model has no template
        we know. Used by Session.feed/ask to frame a document and a question."""
        marker = "\x01lctx-user-turn\x01"
        msgs = ([("system", system)] if system else []) + [("user", marker)]
        try:
            text = self.chat_apply(msgs, add_assistant=True)
        except _capi.UnsupportedError:
            return "", "\n"
        prefix, _, suffix = text.partition(marker)
        return prefix, suffix

    def __repr__(self) -> str:
        if self._h is None:
            return "<lctx.Model closed>"
        return f"<lctx.Model {self.architecture} {self.name!r} n_layer={self.n_layer} n_vocab={self.n_vocab}>"
