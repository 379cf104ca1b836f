#!/usr/bin/env python3
"""Streams one completion from a tandem server and prints it as it arrives.

    python stream.py --endpoint 127.0.0.1:50051 --prompt "The capital of France is"
    python stream.py --prompt "Write a haiku about rivers." --chat --max-tokens 64

Uses the installed SDK (``pip install ./clients/python``), or, from a checkout, the
one in clients/python after ``generate_stubs.sh``. The text goes to stdout as it
streams, then a blank line and the usage and timings.
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
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="tokens to generate at most (server default: 16)")
    parser.add_argument("--temperature", type=float, default=None,
                        help="sampling temperature; 0 = greedy (server default: 1)")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed")
    parser.add_argument("--chat", action="store_true",
                        help="send the prompt as one user turn of a chat")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="deadline for the whole request in seconds (default: %(default)s)")
    parser.add_argument("--api-key", default=os.environ.get("TANDEM_API_KEY"),
                        help="API key, for a router started with --api-key "
                             "(default: $TANDEM_API_KEY)")
    args = parser.parse_args()

    # One prompt: plain text, or a chat of one user turn.
    text: str | None = None if args.chat else args.prompt
    messages: list[ChatMessage] | None = (
        [{"role": "user", "content": args.prompt}] if args.chat else None)

    with TandemClient(args.endpoint, api_key=args.api_key, timeout=args.timeout) as client:
        try:
            stream = client.generate_stream(
                text, messages=messages, max_tokens=args.max_tokens, temperature=args.temperature,
                seed=args.seed)
            with stream:  # leaving early (Ctrl-C) cancels the request
                for chunk in stream:
                    print(chunk.text, end="", flush=True)
                done = stream.completion
        except TandemError as err:
            print(f"\nerror: {err.code_name}: {err.message}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("\ninterrupted", file=sys.stderr)
            return 130

    print()
    print(
        f"\n[{done.finish_reason}" + (f" on {done.stop_reason!r}" if done.stop_reason else "")
        + f"] prompt_tokens={done.usage.prompt_tokens}"
        f" completion_tokens={done.usage.completion_tokens}"
        f" cached_tokens={done.usage.cached_tokens} request_id={done.request_id}"
    )
    t = done.timings
    print(f"ttft={t.time_to_first_token_ms:.1f} ms decode={t.decode_ms:.1f} ms"
          f" e2e={t.e2e_ms:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
