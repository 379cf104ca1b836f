"""Golden chat-template renderings: Python's jinja2 on the real templates.

Produces
    tests/data/chat_template_golden.json:
        [{"family": str, "template": str, "messages": [{"role", "content"}],
          "add_generation_prompt": bool, "rendered": str}, ...]
    Templates: SmolLM2's (read from the default model's GGUF) and Llama 3's (below, as
    published in Meta's tokenizer_config.json, without the date/tools preamble of 3.1).

How to run (from the repository root)
    scripts/fetch-model.sh
    /tmp/refvenv/bin/python tests/reference/make_chat_golden.py

Requirements
    tests/reference/requirements.txt (gguf, and jinja2 which transformers brings).
"""

import json
import os

import gguf
import jinja2

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "smollm2-135m-instruct-q4_1.gguf")
OUT = os.path.join(ROOT, "tests", "data", "chat_template_golden.json")

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"}],
    [
        {"role": "user", "content": "Write a haiku.\nAbout rain."},
        {"role": "assistant", "content": "Soft rain on the roof"},
        {"role": "user", "content": "Another, in French: ça va?"},
    ],
]


def main() -> None:
    smol = gguf.GGUFReader(MODEL).fields["tokenizer.chat_template"].contents()
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    cases = []
    for family, source in (("chatml-smollm2", smol), ("llama3", LLAMA3)):
        tpl = env.from_string(source)
        for messages in CONVERSATIONS:
            for gen in (True, False):
                rendered = tpl.render(messages=messages, add_generation_prompt=gen,
                                      bos_token="<|begin_of_text|>")
                cases.append({"family": family, "template": source, "messages": messages,
                              "add_generation_prompt": gen, "rendered": rendered})
    with open(OUT, "w") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
