#!/usr/bin/env python3
"""A streaming chat in the terminal: each line you type is a user turn, and the
model's answer streams back; the conversation is kept and resent every turn.

    python chat.py --endpoint 127.0.0.1:50051 --system "You are terse."
    printf 'Hi!\nName a color.\n' | python chat.py --max-tokens 64

Empty line or end of input (Ctrl-D) quits; Ctrl-C stops the current answer.
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
    parser.add_argument("--system", default=None, help="a system prompt")
    parser.add_argument("--max-tokens", type=int, default=256,
                        help="tokens per answer at most (default: %(default)s)")
    parser.add_argument("--temperature", type=float, default=0.7,
                        help="sampling temperature (default: %(default)s)")
    parser.add_argument("--api-key", default=os.environ.get("TANDEM_API_KEY"),
                        help="API key (default: $TANDEM_API_KEY)")
    args = parser.parse_args()

    history: list[ChatMessage] = []
    if args.system:
        history.append({"role": "system", "content": args.system})
    interactive = sys.stdin.isatty()

    with TandemClient(args.endpoint, api_key=args.api_key) as client:
        while True:
            try:
                line = input("you> " if interactive else "")
            except EOFError:
                break
            if not line.strip():
                break
            if not interactive:
                print(f"you> {line}")
            history.append({"role": "user", "content": line})
            print("assistant> ", end="", flush=True)
            try:
                with client.generate_stream(messages=history, max_tokens=args.max_tokens,
                                            temperature=args.temperature) as stream:
                    for chunk in stream:
                        print(chunk.text, end="", flush=True)
                    done = stream.completion
            except KeyboardInterrupt:  # the with block cancels the request
                print(" [stopped]")
                history.pop()
                continue
            except TandemError as err:
                print(f"\nerror: {err}", file=sys.stderr)
                return 1
            suffix = " [cut: max tokens]" if done.finish_reason == "length" else ""
            print(f"{suffix}\n   ({done.usage.prompt_tokens} prompt +"
                  f" {done.usage.completion_tokens} tokens,"
                  f" {done.usage.cached_tokens} cached)")
            history.append({"role": "assistant", "content": done.text})
    return 0


if __name__ == "__main__":
    sys.exit(main())
