"""Token log-probabilities of continuations, computed in-process by llama.cpp: what
``pgrag score`` needs from a local GGUF model (``PGRAG_LLM_GGUF``) instead of an endpoint's
``echo``.

``Llama(logits_all=True)`` would keep a row of logits for every position of the context
(``n_ctx`` x vocabulary floats: 2.5 GB for Qwen2.5's 152k vocabulary at 4096 tokens), so the
model keeps its default and the logits are read one position at a time instead: the prompt
is evaluated once; for each continuation the model's state is cut back to the prompt
(``n_tokens``; llama.cpp drops the KV cache after it), and the continuation's tokens are fed
one by one, the log-softmax of the last logits giving the next token's log-probability.
Candidates that share the prompt (every candidate of one passage) therefore cost one prompt
evaluation plus one step per token each.

The text is tokenised whole (prompt + continuation), as a server does with ``echo``; the
continuation's tokens are those from the first one that the prompt alone does not produce, so
a token the tokenizer merged across the boundary counts as the continuation's
(:func:`pgrag.answer.scoring.span_logprobs` takes the same one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pgrag.errors import GenerationError, InputError


def _tokens(model: Any, text: str, special: bool = False, add_bos: bool = True) -> list[int]:
    # add_bos=True adds the model's start token only where its vocabulary asks for one.
    # ``special``: a rendered chat template, tokenised as llama-cpp-python's chat handler does
    # it -- control tokens written as text (``<|im_start|>``) become those tokens, and the start
    # token is added only where the handler adds it (``add_bos``: not when the template writes
    # its own). A plain-text prompt keeps control-token spellings as text.
    return list(model.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special))


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _feed(model: Any, tokens: Sequence[int]) -> None:
    """Bring the model's state to exactly ``tokens``, re-using the cached prefix; at least
    the last token is evaluated, so the last logits are those after ``tokens``."""
    cached = [int(t) for t in model.input_ids[: model.n_tokens]]
    keep = min(_common(cached, tokens), len(tokens) - 1)
    model.n_tokens = keep  # eval() drops the KV cache from here on
    model.eval(list(tokens[keep:]))


def _last_logprob(model: Any, token: int) -> float:
    """log p(token | the model's state): the log-softmax of the last logits, in float64."""
    import llama_cpp
    import numpy as np

    pointer = llama_cpp.llama_get_logits_ith(model.ctx, -1)
    logits = np.ctypeslib.as_array(pointer, shape=(model.n_vocab(),)).astype(np.float64)
    top = logits.max()
    log_norm = top + np.log(np.exp(logits - top).sum())
    return float(logits[token] - log_norm)  # <= 0: log_norm >= the largest logit


def continuation_logprobs(
    model: Any,
    prefix: str,
    continuations: Sequence[str],
    *,
    special: bool = False,
    add_bos: bool = True,
) -> list[list[float]]:
    """For each of ``continuations``, the log-probabilities of its tokens after ``prefix``
    (see the module; ``special`` for a rendered chat template, see :func:`_tokens`). The
    caller holds the model's lock."""
    if not prefix:
        raise InputError("continuation_logprobs needs a non-empty prefix to condition on")
    head = _tokens(model, prefix, special, add_bos)
    out: list[list[float]] = []
    for continuation in continuations:
        full = _tokens(model, prefix + continuation, special, add_bos)
        start = max(_common(head, full), 1)  # (the prompt's first token is always context)
        if start >= len(full):
            raise InputError(f"the continuation {continuation!r} adds no token to the prompt")
        _feed(model, full[:start])
        values = []
        for i in range(start, len(full)):
            values.append(_last_logprob(model, full[i]))
            if i + 1 < len(full):
                model.eval([full[i]])
        out.append(values)
    return out


def failed(name: str, exc: Exception) -> GenerationError:
    from pgrag.http import one_line

    return GenerationError(
        f"llama.cpp failed to score on {name} ({one_line(str(exc), 160)}); if the prompt is too"
        " long raise PGRAG_LLM_CTX or lower -k"
    )
