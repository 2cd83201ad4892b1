"""Decoder-only language models from Hugging Face folders or configs, as programs for ExecuTorch's LLM runner.

`architectures` names the transformers classes a recipe may use; `checkpoint` reads a folder
(config.json, safetensors shards, tokenizer.json) strictly; `runner` wraps the model into the
runner contract (`forward(tokens[1, n], input_pos[1])` → last-token logits, the KV cache as
state) and gives the values of its constant methods; `recipe` turns `model.llm` into the model
section the stages read; `agreement` measures teacher-forced next-token agreement with the float model
(verify's gate and the quantize stage's search), `fallback` is that search (`verify.fallback: auto`), `swap`
runs a converted model's chosen layers float for it. Imports torch and transformers (the `llm` extra).
"""
