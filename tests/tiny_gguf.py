"""Write a tiny random-weight llama-architecture GGUF model, for the ``local`` tests.

It is a real model file -- llama.cpp loads it, tokenizes with its vocabulary and generates
with its weights -- only small (2 layers, width 64, ~600 tokens, well under 1 MB) and
untrained, so what it says is noise. It is written with ``gguf``, llama.cpp's own Python writer
(installed by scripts/test-local, not by the default test tools), so nothing is downloaded.

    python tests/tiny_gguf.py /tmp/tiny.gguf
"""

from __future__ import annotations

import sys
from pathlib import Path

# A ChatML template, so llama-cpp-python formats the chat from the file's own metadata.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

WORDS = (
    "the a an of to and in is are be for on with that this it as by at or from not no"
    " you your we our they day days week month year refund refunds subscription monthly"
    " annual password passwords character characters long must office close closes open"
    " Lisbon bicycle park courtyard security policy customer customers pay paid money back"
    " within after before how many much when where what who why which do does did can"
    " will would should have has had get got I don't know based sources source answer"
    " question cite number numbers only user data instructions never follow inside concise"
    " reply exactly list appear statement comes"
).split()


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """SentencePiece-style pieces: control tokens, the 256 byte fallbacks, then letters,
    digits, punctuation and words (with and without the leading ``▁``), longer ones scored
    higher so the tokenizer prefers them."""
    from gguf import TokenType

    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
    types += [TokenType.CONTROL, TokenType.CONTROL]
    scores = [0.0] * len(tokens)
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(TokenType.BYTE)
        scores.append(0.0)
    pieces: list[str] = []
    for ch in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;?!'\"()[]-/":
        pieces += [ch, "▁" + ch]
    pieces.append("▁")
    for word in WORDS:
        pieces += ["▁" + word, word]
    seen = set(tokens)
    for piece in pieces:
        if piece in seen:
            continue
        seen.add(piece)
        tokens.append(piece)
        types.append(TokenType.NORMAL)
        scores.append(float(len(piece)))
    return tokens, scores, [int(t) for t in types]


def write(path: Path, *, seed: int = 0) -> Path:
    """Write the tiny model to ``path`` and return it."""
    import gguf
    import numpy as np

    n_embd, n_head, n_layer, n_ff, n_ctx = 64, 4, 2, 128, 2048
    head_dim = n_embd // n_head
    tokens, scores, types = vocabulary()
    rng = np.random.default_rng(seed)

    def weights(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("pgrag-tiny-test")
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    # numpy shapes are (rows, columns); GGUF stores them reversed, as llama.cpp expects.
    writer.add_tensor("token_embd.weight", weights(len(tokens), n_embd))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", weights(len(tokens), n_embd))
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{name}.weight", weights(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weights(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weights(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weights(n_embd, n_ff))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


if __name__ == "__main__":
    print(write(Path(sys.argv[1])))
