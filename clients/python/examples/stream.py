#!/usr/bin/env python3
"""Streams one completion from a tandem server and prints it as it arrives.

    python stream.py --endpoint 127.0.0.1:50051 --prompt "The capital of France is"
    python stream.py --prompt "Write a haiku about rivers." --chat --max-tokens 64

Run it with the interpreter of the venv that generate_stubs.sh made. The text goes
to stdout as it streams, then a blank line and the usage and timings.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# Let the example run from a checkout without PYTHONPATH: clients/python is one up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tandem_client import Chunk, TandemClient, TandemError  # noqa: E402


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
    args = parser.parse_args()

    if args.chat:
        prompt = {"messages": [{"role": "user", "content": args.prompt}]}
    else:
        prompt = {"prompt": args.prompt}

    with TandemClient(args.endpoint, timeout=args.timeout) as client:
        try:
            for item in client.generate(
                **prompt,
                max_tokens=args.max_tokens,
                temperature=args.temperature,
                seed=args.seed,
            ):
                if isinstance(item, Chunk):
                    print(item.text, end="", flush=True)
                else:
                    print()
                    print(
                        f"\n[{item.finish_reason}"
                        + (f" on {item.stop_reason!r}" if item.stop_reason else "")
                        + f"] prompt_tokens={item.prompt_tokens}"
                        f" completion_tokens={item.completion_tokens}"
                        f" cached_tokens={item.cached_tokens}"
                        f" request_id={item.request_id}"
                    )
                    timings = item.timings
                    print(
                        f"ttft={timings['time_to_first_token_ms']:.1f} ms"
                        f" decode={timings['decode_ms']:.1f} ms"
                        f" e2e={timings['e2e_ms']:.1f} ms"
                    )
        except TandemError as err:
            print(f"\nerror: {err.code.name}: {err.details}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:  # closing the stream cancels the request
            print("\ninterrupted", file=sys.stderr)
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
