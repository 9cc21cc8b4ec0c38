#!/usr/bin/env python3
"""Converts a tokenizer-less Hugging Face directory (a random-weight model made by
gpu_wide_parity.py) to GGUF with llama.cpp's own converter, for the side-by-side benchmarks.

The converter insists on a tokenizer; these models have none, so the vocabulary is written as
llama.cpp's "none" tokenizer with the config's vocab_size (llama.cpp then loads vocab_size dummy
tokens, and llama-bench draws random ids below it). Every tensor goes through the converter as
usual. Usage:
    gguf_no_vocab.py LLAMA_CPP_DIR HF_DIR OUT.gguf [--outtype bf16]
"""

import sys


def main():
    llama, model, out, *rest = sys.argv[1:]
    sys.path[0:0] = [llama, llama + "/gguf-py"]
    from conversion import base  # noqa: E402  (llama.cpp's package, found through sys.path)

    def no_vocab(self):
        self.gguf_writer.add_tokenizer_model("none")
        self.gguf_writer.add_vocab_size(self.hparams["vocab_size"])

    base.TextModel._set_vocab_sentencepiece = no_vocab
    base.TextModel._set_vocab_gpt2 = no_vocab
    import convert_hf_to_gguf  # noqa: E402

    sys.argv = ["convert_hf_to_gguf.py", model, "--outfile", out, *(rest or ["--outtype", "bf16"])]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
