#!/usr/bin/env python3
"""Generates one completion without streaming and prints it with its usage.

    python complete.py --prompt "The capital of France is" --max-tokens 16
    python complete.py --prompt "Count to five." --chat --stop "5" --logprobs 2

``generate()`` returns a ``Completion``: the whole text and token ids, why it ended,
the token counts and the time each stage took.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

try:
    import tandem_client  # noqa: F401  (installed)
except ImportError:  # a checkout: clients/python is one up
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tandem_client import ChatMessage, TandemClient, TandemError  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="127.0.0.1:50051",
                        help="the router's gRPC host:port (default: %(default)s)")
    parser.add_argument("--prompt", required=True, help="the prompt text")
    parser.add_argument("--chat", action="store_true", help="send it as a user turn")
    parser.add_argument("--max-tokens", type=int, default=32, help="(default: %(default)s)")
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="0 = greedy (default: %(default)s)")
    parser.add_argument("--stop", action="append", default=None,
                        help="a stop string (repeatable)")
    parser.add_argument("--logprobs", type=int, default=None,
                        help="also return the top-N log-probabilities per token")
    parser.add_argument("--api-key", default=os.environ.get("TANDEM_API_KEY"),
                        help="API key (default: $TANDEM_API_KEY)")
    args = parser.parse_args()

    text: str | None = None if args.chat else args.prompt
    messages: list[ChatMessage] | None = (
        [{"role": "user", "content": args.prompt}] if args.chat else None)
    with TandemClient(args.endpoint, api_key=args.api_key, timeout=120) as client:
        try:
            result = client.generate(text, messages=messages, max_tokens=args.max_tokens,
                                     temperature=args.temperature, stop=args.stop,
                                     logprobs=args.logprobs)
        except TandemError as err:
            print(f"error: {err.code_name}: {err.message}", file=sys.stderr)
            return 1

    print(result.text)
    print()
    print(f"finish_reason: {result.finish_reason}"
          + (f" (stop string {result.stop_reason!r})" if result.stop_reason else ""))
    u = result.usage
    print(f"usage: prompt={u.prompt_tokens} completion={u.completion_tokens}"
          f" total={u.total_tokens} cached={u.cached_tokens}")
    t = result.timings
    print(f"timings: queue={t.queue_ms:.1f} prefill={t.prefill_ms:.1f}"
          f" (kv transfer {t.kv_transfer_ms:.1f}) ttft={t.time_to_first_token_ms:.1f}"
          f" decode={t.decode_ms:.1f} e2e={t.e2e_ms:.1f} ms")
    print(f"request_id: {result.request_id}")
    for lp in result.logprobs:
        top = ", ".join(f"{t.token_id}:{t.logprob:.2f}" for t in lp.top_logprobs)
        print(f"  token {lp.token_id} logprob {lp.logprob:.3f}  top [{top}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
