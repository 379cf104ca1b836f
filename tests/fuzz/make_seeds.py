#!/usr/bin/env python3
"""Writes the committed seed corpora under tests/fuzz/ (one directory per fuzzer).

Seeds are small valid inputs the fuzzers mutate from: OpenAI request bodies, texts for
the tokenizers, the published chat templates, and call scripts for the decode
and prefill workers' services (hand-encoded protobuf, so no protobuf package is needed). Run it
again after changing a script format; scripts/fuzz.sh adds the committed GGUF files
and nothing else.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def write(fuzzer, name, data):
    d = os.path.join(HERE, fuzzer)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# --- protobuf wire format, as much as the scripts need -------------------------------
def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field_varint(num, value):
    return varint(num << 3) + varint(value)


def field_bytes(num, data):
    return varint((num << 3) | 2) + varint(len(data)) + data


def field_double(num, value):
    return varint((num << 3) | 1) + struct.pack("<d", value)


def packed(num, values):
    return field_bytes(num, b"".join(varint(v) for v in values))


def op(code, flags, message):
    assert len(message) < 256, len(message)
    return bytes([code, flags, len(message)]) + message


RESERVE, PUSH, DECODE, RELEASE, HANDSHAKE = range(5)
SLOT0 = 0x80  # flags: substitute slot 0's lease


def chunk(layer, first, num):
    return field_varint(4, layer) + field_varint(5, first) + field_varint(6, num)


def push_message(chunks):
    out = b""
    for c in chunks:
        out += bytes([len(c)]) + c
    return out


def decode_scripts():
    prompt = list(range(1, 40))  # 39 tokens + the first token: 40 = 3 blocks of 16
    reserve = op(RESERVE, 0x03, field_varint(2, 40) + field_varint(3, 5000))
    full = push_message([chunk(l, 0, 3) for l in range(4)])
    # flags: slot 0, its block ids (1), the fingerprint (2), payloads of the right size (4)
    push = op(PUSH, SLOT0 | 0x07, full)
    # max_tokens 3, top_p 1, repetition_penalty 1, ignore_eos (greedy: temperature 0)
    params = field_varint(1, 3) + field_double(4, 1.0) + field_double(8, 1.0) + field_varint(12, 1)
    decode = op(DECODE, SLOT0, packed(3, prompt) + field_varint(4, 7) + field_bytes(5, params))
    release = op(RELEASE, SLOT0, b"")
    write("decode_service", "full_request", reserve + push + decode)
    write("decode_service", "reserve_release", reserve + release)
    write("decode_service", "partial_push", reserve + op(PUSH, SLOT0 | 0x07, push_message(
        [chunk(0, 0, 3), chunk(1, 0, 2)])) + decode)
    write("decode_service", "double_push", reserve + push + push + decode)
    write("decode_service", "wrong_sizes", reserve + op(PUSH, SLOT0 | 0x03, full) + decode)
    write("decode_service", "bad_blocks", reserve + op(PUSH, SLOT0 | 0x06, push_message(
        [chunk(0, 0, 3) + packed(3, [0, 1, 1 << 30])])))
    write("decode_service", "handshake", op(HANDSHAKE, 0x01, packed(2, [1, 2, 3])) +
          op(HANDSHAKE, 0x00, b"\x0a\x02\x0a\x00"))
    write("decode_service", "raw_garbage", op(RESERVE, 0, b"\xff\xff\xff") +
          op(RELEASE, 0, b"\x08") + op(HANDSHAKE, 0, b"\x12\x80"))


PREFILL, PREFILL_TWICE, STATS = 1, 2, 4  # with RESERVE 0 and RELEASE 3 (decode worker)
CLAMP_IDS, SLOT_CACHED = 0x10, 0x20  # op bits: prompt ids into the vocabulary; the slot's cached_blocks


def prefill_request(prompt, params, destination=b""):
    return packed(2, prompt) + field_bytes(3, params) + field_bytes(4, destination)


def prefill_scripts():
    prompt = list(range(1, 40))  # 39 tokens: 3 blocks of 16
    reserve = op(RESERVE, 0x03, field_varint(2, 40) + field_varint(3, 5000))
    greedy = (field_varint(1, 4) + field_double(4, 1.0) + field_double(8, 1.0) +
              field_varint(11, (1 << 64) - 1))
    sampled = (field_varint(1, 4) + field_double(2, 0.8) + field_double(4, 0.9) + field_varint(6, 7) +
               field_double(8, 1.0) + field_varint(11, 3))
    # flags: slot 0, its block ids (1), the fingerprint (2); address: the live decode worker
    full = op(PREFILL | SLOT_CACHED, SLOT0 | 0x03, prefill_request(prompt, greedy))
    release = op(RELEASE, SLOT0, b"")
    write("prefill_service", "full_request", reserve + full + op(STATS, 0, b""))
    write("prefill_service", "sampled", reserve + op(PREFILL | SLOT_CACHED, SLOT0 | 0x03,
                                                     prefill_request(prompt, sampled)))
    # Found by the fuzzer: a valid repetition penalty (~1e-120) so small that a positive
    # logit divided by it left float's range, and the sampler then indexed token -1.
    write("prefill_service", "tiny_repetition_penalty", bytes.fromhex(
        "400305102818882721834e122701677270632e6b656570616c6976255f7065131415161718191a1b1c1d1e1f20212223242526271a210804119a9999999199e93f21cdccccccccccec3f300741000000000000092758132200"))
    write("prefill_service", "again_after_release", reserve + full + release + reserve +
          op(PREFILL | SLOT_CACHED, SLOT0 | 0x13, prefill_request(prompt, greedy)))
    write("prefill_service", "race_one_lease", reserve + op(PREFILL_TWICE | SLOT_CACHED,
                                                            SLOT0 | 0x03,
                                                            prefill_request(prompt, greedy)))
    write("prefill_service", "dead_address", reserve + op(PREFILL, SLOT0 | 0x07,
                                                          prefill_request(prompt, greedy)))
    write("prefill_service", "port_from_input", reserve + op(
        PREFILL, SLOT0 | 0x0b, prefill_request(prompt, greedy, field_bytes(1, b"65535"))))
    write("prefill_service", "malformed_address", reserve + op(
        PREFILL, SLOT0 | 0x0f, prefill_request(prompt, greedy, field_bytes(1, b"abc"))))
    # An empty address reached gRPC and came back UNKNOWN (the fuzzer's first finding).
    write("prefill_service", "empty_address", reserve + op(
        PREFILL, SLOT0 | 0x0f, prefill_request(prompt, greedy, field_bytes(1, b""))))
    for name, cached in (("cached_too_many", 50), ("cached_negative", (1 << 64) - 1)):
        write("prefill_service", name, reserve + op(PREFILL, SLOT0 | 0x03, prefill_request(
            prompt, greedy, field_varint(5, cached))))
    write("prefill_service", "prompt_outgrows_lease", reserve + op(
        PREFILL | SLOT_CACHED, SLOT0 | 0x03, prefill_request(list(range(1, 100)), greedy)))
    write("prefill_service", "ids_outside_vocab", reserve + op(
        PREFILL | CLAMP_IDS, SLOT0 | 0x03, prefill_request([5000, 1 << 20, 7], greedy)))
    write("prefill_service", "no_lease", op(PREFILL, 0x02, prefill_request(
        prompt, greedy, field_varint(2, 12345) + packed(3, [0, 1, 2]))))
    write("prefill_service", "raw_garbage", op(PREFILL, 0, b"\xff\xff\xff") +
          op(STATS, 0, b"\x12\x80") + op(PREFILL, 0, b""))


def openai_bodies():
    bodies = {
        "completion": (0, {"model": "m", "prompt": "Hello", "max_tokens": 5}),
        "completion_ids": (0, {"prompt": [[1, 2, 3], "x"], "n": 2, "seed": 7, "stop": ["\n"]}),
        "completion_sampling": (0, {"prompt": "a", "temperature": 0.7, "top_p": 0.9,
                                    "top_k": 40, "min_p": 0.05, "logprobs": 3,
                                    "presence_penalty": 1, "frequency_penalty": -1,
                                    "repetition_penalty": 1.1, "stop_token_ids": [2],
                                    "ignore_eos": True, "stream": True,
                                    "stream_options": {"include_usage": True}}),
        "chat": (1, {"messages": [{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Hi"}]}),
        "chat_parts": (1, {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
            "max_completion_tokens": 4, "logprobs": True, "top_logprobs": 2}),
        "chat_bad": (1, {"messages": [], "tools": [{}], "response_format": {"type": "x"}}),
        "chat_tools": (1, {"messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "-3 C"}],
            "tools": [{"type": "function", "function": {
                "name": "get_weather", "description": "Weather.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}}],
            "tool_choice": "required", "parallel_tool_calls": False}),
        "chat_tool_named": (1, {"messages": [{"role": "user", "content": "Time?"}],
                                "tools": [{"type": "function", "function": {"name": "now"}}],
                                "tool_choice": {"type": "function", "function": {"name": "now"}},
                                "stream": True}),
        "tokenize": (2, {"prompt": "Hello world"}),
        "tokenize_chat": (2, {"messages": [{"role": "user", "content": "Hi"}]}),
        "big_int": (0, {"prompt": "a", "max_tokens": 18446744073709551615, "seed": -1}),
    }
    for name, (endpoint, body) in bodies.items():
        write("openai_request", name, bytes([endpoint]) + json.dumps(body).encode())


def tokenizer_texts():
    texts = ["Hello, world!", "  leading spaces and\ttabs\n\nnewlines", "日本語のテキスト 🙂",
             "<|im_start|>user\nhi<|im_end|>", "don't I'll we've 123456 3.14",
             "\u00e9\u0301 combining", "a" * 200]
    for i, t in enumerate(texts):
        for mode in (0, 1):  # byte-level BPE, SentencePiece
            write("tokenizer", f"text{i}_{mode}", bytes([mode]) + t.encode())
    for mode in (2, 3):  # ids
        write("tokenizer", f"ids_{mode}", bytes([mode]) + struct.pack("<8i", 1, 2, 3, 200, 300,
                                                                       49000, 5, 0))
    write("tokenizer", "bad_utf8", b"\x00abc\xff\xfe\xc3")


def chat_templates():
    golden = json.load(open(os.path.join(ROOT, "tests", "data", "chat_template_golden.json")))
    for i, (name, source) in enumerate(golden["templates"].items()):
        write("chat_template", f"template_{name}", b"\x01" + source.encode())
        # mode byte: add_generation_prompt, conversation, a system message, template i
        write("chat_template", f"conversation_{name}",
              bytes([0x07 | (i << 3)]) + b"Be brief.\x00Hi\x00Hello\x00How are you?")


if __name__ == "__main__":
    decode_scripts()
    prefill_scripts()
    openai_bodies()
    tokenizer_texts()
    chat_templates()
