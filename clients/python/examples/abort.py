#!/usr/bin/env python3
"""Aborts a long generation from another thread, by its request id.

    python abort.py --endpoint 127.0.0.1:50051 --after 1.0

The main thread streams a long completion (``ignore_eos``, many tokens) under a
request id of its choosing; a timer thread calls ``client.abort(request_id)`` after
``--after`` seconds. The stream then ends with ``TandemError`` code ``CANCELLED``.
(Any client, in any process, may abort a request whose id it knows.)
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import uuid
from pathlib import Path

try:
    import tandem_client  # noqa: F401  (installed)
except ImportError:  # a checkout: clients/python is one up
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tandem_client import TandemClient, TandemError  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="127.0.0.1:50051",
                        help="the router's gRPC host:port (default: %(default)s)")
    parser.add_argument("--prompt", default="Once upon a time", help="(default: %(default)r)")
    parser.add_argument("--max-tokens", type=int, default=1024, help="(default: %(default)s)")
    parser.add_argument("--after", type=float, default=1.0,
                        help="seconds before the abort (default: %(default)s)")
    parser.add_argument("--api-key", default=os.environ.get("TANDEM_API_KEY"),
                        help="API key (default: $TANDEM_API_KEY)")
    args = parser.parse_args()

    request_id = f"abort-demo-{uuid.uuid4().hex[:8]}"
    with TandemClient(args.endpoint, api_key=args.api_key) as client:  # thread-safe

        def abort() -> None:
            found = client.abort(request_id)
            print(f"\n[abort({request_id!r}) -> found={found}]", file=sys.stderr)

        timer = threading.Timer(args.after, abort)
        stream = client.generate_stream(args.prompt, max_tokens=args.max_tokens,
                                        ignore_eos=True, request_id=request_id)
        timer.start()
        try:
            for chunk in stream:
                print(chunk.text, end="", flush=True)
        except TandemError as err:
            if err.code_name != "CANCELLED":
                print(f"\nerror: {err}", file=sys.stderr)
                return 1
            print(f"\n[stream ended: {err.code_name} after {len(stream.token_ids)} tokens]")
            return 0
        finally:
            timer.cancel()
            timer.join()
    print(f"\n[finished before the abort: {stream.completion.finish_reason}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
